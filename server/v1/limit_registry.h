#ifndef RATELIMIT_SERVER_V1_LIMIT_REGISTRY_H_
#define RATELIMIT_SERVER_V1_LIMIT_REGISTRY_H_

#include <string>

#include "absl/time/time.h"
#include "server/config/watched_config.h"
#include "server/v1/limits_file.h"

namespace ratelimit {

// The limit definitions in force (see ConfigSnapshot). Starts empty.
using LimitRegistry = ConfigSnapshot<LimitSet>;

// Keeps a LimitRegistry in step with a limits file (see WatchedConfig): Load() reads it once
// (start-up fails on an error: NOT_FOUND, or the parse error); each poll reads the file once and,
// when its bytes changed, parses and swaps in the new definitions. A file that fails to parse is
// logged and the previous definitions stay; so are a missing file (a warning, once per
// disappearance) and a file without limits (a warning: requests then need inline configs).
//
// Ownership: `registry` is not owned and must outlive the watcher.
// Thread safety: as WatchedConfig.
class LimitsFileWatcher : public WatchedConfig<LimitSet, std::string> {
 public:
  LimitsFileWatcher(std::string path, LimitRegistry& registry, absl::Duration interval,
                    ReloadObserver observer = nullptr);
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_V1_LIMIT_REGISTRY_H_
