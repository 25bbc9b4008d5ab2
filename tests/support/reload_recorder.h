#ifndef RATELIMIT_TESTS_SUPPORT_RELOAD_RECORDER_H_
#define RATELIMIT_TESTS_SUPPORT_RELOAD_RECORDER_H_

// Waiting for an in-process server to reload a configuration, without polling.

#include <functional>
#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ratelimit::testing {

// Counts the reload outcomes a server reports through ServerOptions::on_config_reload, and
// lets a test block until a given one has happened.
//
// Ownership: Callback() refers to the recorder, which must outlive the server.
// Thread safety: thread-safe.
class ReloadRecorder {
 public:
  ReloadRecorder() = default;
  ReloadRecorder(const ReloadRecorder&) = delete;
  ReloadRecorder& operator=(const ReloadRecorder&) = delete;

  // The function to set as ServerOptions::on_config_reload.
  std::function<void(absl::string_view, const absl::Status&)> Callback() {
    return [this](absl::string_view config, const absl::Status& outcome) {
      absl::MutexLock lock(&mu_);
      ++counts_[{std::string(config), outcome.ok()}];
    };
  }

  // Blocks until `config` ("limits", "envoy") has had at least `n` reloads that succeeded (`ok`)
  // or failed (!`ok`). Returns false when `timeout` passes first: the reload never happened.
  bool WaitFor(absl::string_view config, bool ok, int n = 1,
               absl::Duration timeout = absl::Seconds(60)) {
    const std::pair<std::string, bool> key(std::string(config), ok);
    absl::MutexLock lock(&mu_);
    auto reached = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      auto it = counts_.find(key);
      return it != counts_.end() && it->second >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
  }

 private:
  absl::Mutex mu_;
  std::map<std::pair<std::string, bool>, int> counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_SUPPORT_RELOAD_RECORDER_H_
