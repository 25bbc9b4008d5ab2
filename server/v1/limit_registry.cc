#include "server/v1/limit_registry.h"

#include "absl/strings/str_cat.h"
#include "server/observability/log.h"
#include "server/v1/limits_file.h"

namespace ratelimit {
namespace {

WatchedConfigSpec<LimitSet, std::string> LimitsFileSpec(const std::string& path) {
  WatchedConfigSpec<LimitSet, std::string> spec;
  spec.source_field = "file";
  spec.source_name = path;
  spec.read = [path] { return ReadLimitsFile(path); };
  spec.parse = [path](const std::string& bytes) { return ParseLimitsYaml(bytes, path); };
  spec.on_loaded = [path](const LimitSet& limits, const std::string&) {
    if (limits.limits.empty()) {
      Log(LogLevel::kWarning, "no limits defined: every request needs an inline config",
          {{"file", path}});
    } else {
      Log(LogLevel::kInfo, "limits loaded",
          {{"file", path}, {"limits", std::to_string(limits.limits.size())}});
    }
  };
  spec.reload_failed_message = "limits reload failed; keeping the previous definitions";
  // A file replaced in place (not by rename) is missing for a moment, a deleted one stays
  // missing: either way the definitions in force stay.
  spec.missing_message =
      "limits file missing; keeping the previous definitions (replace the file atomically, by "
      "rename)";
  return spec;
}

}  // namespace

LimitsFileWatcher::LimitsFileWatcher(std::string path, LimitRegistry& registry,
                                     absl::Duration interval, ReloadObserver observer)
    : WatchedConfig(LimitsFileSpec(path), registry, interval, std::move(observer)) {}

}  // namespace ratelimit
