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
    // No domain: every Envoy request is answered OK with no limit, which deserves a warning.
    Log(config.domains.empty() ? LogLevel::kWarning : LogLevel::kInfo,
        config.domains.empty() ? "envoy config loaded with no domain; every Envoy request is "
                                 "answered OK with no limit"
                               : "envoy config loaded",
        {{"dir", dir},
         {"files", std::to_string(files.size())},
         {"domains", std::to_string(config.domains.size())}});
  };
  spec.reload_failed_message = "envoy config reload failed; keeping the previous configuration";
  // A directory being swapped may be missing for a moment, a deleted one stays missing: either
  // way the configuration in force stays, and the first poll that finds it missing says so.
  spec.missing_message =
      "envoy config directory missing; keeping the previous configuration (swap it by renaming "
      "a symlink)";
  return spec;
}

}  // namespace

EnvoyConfigWatcher::EnvoyConfigWatcher(std::string dir, EnvoyConfigRegistry& registry,
                                       absl::Duration interval, ReloadObserver observer)
    : WatchedConfig(EnvoyConfigDirSpec(dir), registry, interval, std::move(observer)) {}

}  // namespace ratelimit
