#ifndef RATELIMIT_SERVER_LIMIT_REGISTRY_H_
#define RATELIMIT_SERVER_LIMIT_REGISTRY_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/limits_file.h"
#include "server/periodic_task.h"

namespace ratelimit {

// The limit definitions in force. Readers take a snapshot that stays valid and unchanged for as
// long as they hold it; a reload swaps in a new snapshot without blocking them.
//
// Thread safety: thread-safe.
class LimitRegistry {
 public:
  LimitRegistry() : current_(std::make_shared<const LimitSet>()) {}
  LimitRegistry(const LimitRegistry&) = delete;
  LimitRegistry& operator=(const LimitRegistry&) = delete;

  std::shared_ptr<const LimitSet> Current() const;
  void Replace(std::shared_ptr<const LimitSet> limits);

 private:
  mutable absl::Mutex mu_;
  std::shared_ptr<const LimitSet> current_ ABSL_GUARDED_BY(mu_);
};

// Keeps a LimitRegistry in step with a limits file: Load() reads it once (start-up fails on an
// error); Start() polls it every `interval` and, when its bytes change, parses and swaps in the
// new definitions. A file that fails to parse is logged and the previous definitions stay; so
// are a missing file (a warning, once) and a file without limits (a warning: requests then
// need inline configs).
//
// Thread safety: Load/Start/Stop from one thread; the polling runs on its own thread.
class LimitsFileWatcher {
 public:
  // Called after every reload attempt with its outcome (for metrics). May be empty.
  using ReloadObserver = std::function<void(const absl::Status&)>;

  // `registry` is not owned and must outlive the watcher.
  LimitsFileWatcher(std::string path, LimitRegistry& registry, absl::Duration interval,
                    ReloadObserver observer = nullptr);
  ~LimitsFileWatcher();  // calls Stop()

  // Reads and applies the file now. Returns the parse error, leaving the registry unchanged.
  absl::Status Load();
  // Reloads the file if its bytes changed since the last attempt; returns that attempt's status.
  absl::Status ReloadIfChanged();

  void Start();
  void Stop();

 private:
  const std::string path_;
  LimitRegistry& registry_;
  const ReloadObserver observer_;
  std::string last_bytes_;
  bool loaded_once_ = false;
  bool missing_ = false;  // the last poll found no file (logged once)
  PeriodicTask poller_;
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_LIMIT_REGISTRY_H_
