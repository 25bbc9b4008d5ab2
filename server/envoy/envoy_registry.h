#ifndef RATELIMIT_SERVER_ENVOY_ENVOY_REGISTRY_H_
#define RATELIMIT_SERVER_ENVOY_ENVOY_REGISTRY_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/config/watched_config.h"
#include "server/envoy/envoy_config.h"
#include "server/envoy/envoy_config_loader.h"

namespace ratelimit {

// The Envoy configuration in force (see ConfigSnapshot). Starts empty (no domains).
using EnvoyConfigRegistry = ConfigSnapshot<EnvoyConfig>;

// Keeps an EnvoyConfigRegistry in step with a directory of YAML files (see
// envoy_config_loader.h and WatchedConfig). Load() reads it once (start-up fails on an error);
// each poll lists and reads the directory once and, when any file's name or bytes changed,
// parses the whole directory and swaps in the result. A directory that fails to parse is logged
// with file:line and the previous configuration stays in force; so does a directory that cannot
// be listed.
//
// Ownership: `registry` is not owned and must outlive the watcher.
// Thread safety: as WatchedConfig.
class EnvoyConfigWatcher : public WatchedConfig<EnvoyConfig, std::vector<EnvoyConfigFile>> {
 public:
  EnvoyConfigWatcher(std::string dir, EnvoyConfigRegistry& registry, absl::Duration interval,
                     ReloadObserver observer = nullptr);
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_ENVOY_ENVOY_REGISTRY_H_
