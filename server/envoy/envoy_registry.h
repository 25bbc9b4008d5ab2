#ifndef RATELIMIT_SERVER_ENVOY_ENVOY_REGISTRY_H_
#define RATELIMIT_SERVER_ENVOY_ENVOY_REGISTRY_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/envoy/envoy_config.h"
#include "server/envoy/envoy_config_loader.h"
#include "server/periodic_task.h"

namespace ratelimit {

// The Envoy configuration in force. Readers take a snapshot that stays valid and unchanged for
// as long as they hold it; a reload swaps in a new one without blocking them. Starts empty (no
// domains).
//
// Thread safety: thread-safe.
class EnvoyConfigRegistry {
 public:
  EnvoyConfigRegistry() : current_(std::make_shared<const EnvoyConfig>()) {}
  EnvoyConfigRegistry(const EnvoyConfigRegistry&) = delete;
  EnvoyConfigRegistry& operator=(const EnvoyConfigRegistry&) = delete;

  std::shared_ptr<const EnvoyConfig> Current() const;
  void Replace(std::shared_ptr<const EnvoyConfig> config);

 private:
  mutable absl::Mutex mu_;
  std::shared_ptr<const EnvoyConfig> current_ ABSL_GUARDED_BY(mu_);
};

// Keeps an EnvoyConfigRegistry in step with a directory of YAML files (see
// envoy_config_loader.h). Load() reads it once (start-up fails on an error); Start() polls it
// every `interval` and, when any file's name or bytes change, parses the whole directory and
// swaps in the result. A directory that fails to parse is logged with file:line and the
// previous configuration stays in force; so does a directory that cannot be listed.
//
// Thread safety: Load/ReloadIfChanged/Start/Stop from one thread; polling runs on its own.
class EnvoyConfigWatcher {
 public:
  // Called after every reload attempt with its outcome (for metrics). May be empty.
  using ReloadObserver = std::function<void(const absl::Status&)>;

  // `registry` is not owned and must outlive the watcher.
  EnvoyConfigWatcher(std::string dir, EnvoyConfigRegistry& registry, absl::Duration interval,
                     ReloadObserver observer = nullptr);
  ~EnvoyConfigWatcher();  // calls Stop()
  EnvoyConfigWatcher(const EnvoyConfigWatcher&) = delete;
  EnvoyConfigWatcher& operator=(const EnvoyConfigWatcher&) = delete;

  // Reads and applies the directory now; on error the registry is unchanged.
  absl::Status Load();
  // Reloads if the directory's files changed since the last attempt; returns that attempt's
  // status (OK when nothing changed or the directory cannot be listed).
  absl::Status ReloadIfChanged();

  void Start();
  void Stop();

 private:
  absl::Status Apply(std::vector<EnvoyConfigFile> files);

  const std::string dir_;
  EnvoyConfigRegistry& registry_;
  const ReloadObserver observer_;
  std::vector<EnvoyConfigFile> last_files_;
  bool loaded_once_ = false;
  PeriodicTask poller_;
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_ENVOY_ENVOY_REGISTRY_H_
