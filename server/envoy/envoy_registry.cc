#include "server/envoy/envoy_registry.h"

#include "server/observability/log.h"

namespace ratelimit {
namespace {

using EnvoyConfigFiles = std::vector<EnvoyConfigFile>;

WatchedConfigSpec<EnvoyConfig, EnvoyConfigFiles> EnvoyConfigDirSpec(const std::string& dir) {
  WatchedConfigSpec<EnvoyConfig, EnvoyConfigFiles> spec;
  spec.source_field = "dir";
  spec.source_name = dir;
  spec.read = [dir] { return ReadEnvoyConfigDir(dir); };
  spec.parse = [](const EnvoyConfigFiles& files) { return BuildEnvoyConfig(files); };
  spec.on_loaded = [dir](const EnvoyConfig& config, const EnvoyConfigFiles& files) {
    Log(LogLevel::kInfo, "envoy config loaded",
        {{"dir", dir},
         {"files", std::to_string(files.size())},
         {"domains", std::to_string(config.domains.size())}});
  };
  spec.reload_failed_message = "envoy config reload failed; keeping the previous configuration";
  // A directory being swapped may be missing for a moment; the configuration in force stays,
  // silently.
  return spec;
}

}  // namespace

EnvoyConfigWatcher::EnvoyConfigWatcher(std::string dir, EnvoyConfigRegistry& registry,
                                       absl::Duration interval, ReloadObserver observer)
    : WatchedConfig(EnvoyConfigDirSpec(dir), registry, interval, std::move(observer)) {}

}  // namespace ratelimit
