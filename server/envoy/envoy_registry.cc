#include "server/envoy/envoy_registry.h"

#include "server/log.h"

namespace ratelimit {

std::shared_ptr<const EnvoyConfig> EnvoyConfigRegistry::Current() const {
  absl::ReaderMutexLock lock(&mu_);
  return current_;
}

void EnvoyConfigRegistry::Replace(std::shared_ptr<const EnvoyConfig> config) {
  absl::MutexLock lock(&mu_);
  current_ = std::move(config);
}

EnvoyConfigWatcher::EnvoyConfigWatcher(std::string dir, EnvoyConfigRegistry& registry,
                                       absl::Duration interval, ReloadObserver observer)
    : dir_(std::move(dir)),
      registry_(registry),
      observer_(std::move(observer)),
      poller_(interval, [this] { ReloadIfChanged().IgnoreError(); }) {}

EnvoyConfigWatcher::~EnvoyConfigWatcher() { Stop(); }

absl::Status EnvoyConfigWatcher::Apply(std::vector<EnvoyConfigFile> files) {
  last_files_ = std::move(files);
  loaded_once_ = true;
  absl::StatusOr<EnvoyConfig> config = BuildEnvoyConfig(last_files_);
  if (!config.ok()) return config.status();
  const size_t domains = config->domains.size();
  registry_.Replace(std::make_shared<const EnvoyConfig>(*std::move(config)));
  Log(LogLevel::kInfo, "envoy config loaded",
      {{"dir", dir_},
       {"files", std::to_string(last_files_.size())},
       {"domains", std::to_string(domains)}});
  return absl::OkStatus();
}

absl::Status EnvoyConfigWatcher::Load() {
  absl::StatusOr<std::vector<EnvoyConfigFile>> files = ReadEnvoyConfigDir(dir_);
  if (!files.ok()) return files.status();
  return Apply(*std::move(files));
}

absl::Status EnvoyConfigWatcher::ReloadIfChanged() {
  absl::StatusOr<std::vector<EnvoyConfigFile>> files = ReadEnvoyConfigDir(dir_);
  // A directory being swapped may be missing for a moment; keep the configuration in force.
  if (!files.ok()) return absl::OkStatus();
  if (loaded_once_ && *files == last_files_) return absl::OkStatus();
  absl::Status s = Apply(*std::move(files));
  if (!s.ok()) {
    Log(LogLevel::kError, "envoy config reload failed; keeping the previous configuration",
        {{"dir", dir_}, {"error", std::string(s.message())}});
  }
  if (observer_) observer_(s);
  return s;
}

void EnvoyConfigWatcher::Start() { poller_.Start(); }

void EnvoyConfigWatcher::Stop() { poller_.Stop(); }

}  // namespace ratelimit
