#ifndef RATELIMIT_SERVER_CONFIG_WATCHED_CONFIG_H_
#define RATELIMIT_SERVER_CONFIG_WATCHED_CONFIG_H_

// One reload mechanism for every configuration the server reads from disk: a snapshot holder
// that readers consult, and a watcher that polls a source, parses it when it changed and swaps
// in the result.

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/observability/log.h"
#include "server/observability/periodic_task.h"

namespace ratelimit {

// The configuration in force. Readers take a snapshot that stays valid and unchanged for as long
// as they hold it; Replace swaps in a new one without blocking them. Starts with a
// default-constructed `Config` (for the limits and Envoy configurations: nothing defined).
//
// Thread safety: thread-safe.
template <typename Config>
class ConfigSnapshot {
 public:
  ConfigSnapshot() : current_(std::make_shared<const Config>()) {}
  ConfigSnapshot(const ConfigSnapshot&) = delete;
  ConfigSnapshot& operator=(const ConfigSnapshot&) = delete;

  // Never null.
  std::shared_ptr<const Config> Current() const {
    absl::ReaderMutexLock lock(&mu_);
    return current_;
  }
  // REQUIRES: `config` is not null.
  void Replace(std::shared_ptr<const Config> config) {
    absl::MutexLock lock(&mu_);
    current_ = std::move(config);
  }

 private:
  mutable absl::Mutex mu_;
  std::shared_ptr<const Config> current_ ABSL_GUARDED_BY(mu_);
};

// How a WatchedConfig reads, parses and reports one kind of configuration. `Source` is what one
// read returns (the file's bytes, a directory's files); it must be equality-comparable. A plain
// value, copied into the watcher; its functions are called on the watcher's threads (see
// WatchedConfig).
template <typename Config, typename Source>
struct WatchedConfigSpec {
  // Where the configuration comes from, as logged: `source_field` = `source_name`
  // (e.g. "file" = "/etc/limits.yaml").
  std::string source_field;
  std::string source_name;
  // Reads the source once. An error means the source is missing (or unreadable).
  std::function<absl::StatusOr<Source>()> read;
  // Parses what `read` returned. An error leaves the configuration in force unchanged.
  std::function<absl::StatusOr<Config>(const Source&)> parse;
  // Logs a successful load (called after the swap). May be empty.
  std::function<void(const Config&, const Source&)> on_loaded;
  // Logged (error) when a reload fails; the error is added as the field "error".
  std::string reload_failed_message;
  // Logged (warning) once each time the source goes missing. Empty: stay silent.
  std::string missing_message;
};

// Keeps a ConfigSnapshot in step with a source. Load() reads and applies it once (start-up fails
// on its error); ReloadIfChanged() reads it once and, when it differs from what the last attempt
// read, parses it and swaps in the result; Start() calls ReloadIfChanged() every `interval` on a
// thread of its own. A source that fails to parse is logged and the previous configuration stays;
// so does a missing source (logged once per disappearance when the spec says so). Every reload
// attempt made by ReloadIfChanged is reported to the observer with its outcome.
//
// Ownership: `snapshot` is not owned and must outlive the watcher.
// Thread safety: Load/ReloadIfChanged/Start/Stop from one thread, and ReloadIfChanged only while
// not started; the polling runs on its own thread. The snapshot may be read from any thread.
template <typename Config, typename Source>
class WatchedConfig {
 public:
  // Called after every reload attempt with its outcome (for metrics). May be empty.
  using ReloadObserver = std::function<void(const absl::Status&)>;
  using Spec = WatchedConfigSpec<Config, Source>;

  WatchedConfig(Spec spec, ConfigSnapshot<Config>& snapshot, absl::Duration interval,
                ReloadObserver observer = nullptr)
      : spec_(std::move(spec)),
        snapshot_(snapshot),
        observer_(std::move(observer)),
        poller_(interval, [this] { ReloadIfChanged().IgnoreError(); }) {}
  ~WatchedConfig() { Stop(); }
  WatchedConfig(const WatchedConfig&) = delete;
  WatchedConfig& operator=(const WatchedConfig&) = delete;

  // Reads and applies the source now. Returns the read or parse error, leaving the snapshot
  // unchanged.
  absl::Status Load() {
    absl::StatusOr<Source> source = spec_.read();
    if (!source.ok()) return source.status();
    return Apply(*std::move(source));
  }

  // One poll: reads the source once and reloads it if it changed since the last attempt.
  // Returns that attempt's status; OK when nothing changed or the source is missing (NOT_FOUND
  // from `read`). Any other read error is a failed reload.
  absl::Status ReloadIfChanged() {
    absl::StatusOr<Source> source = spec_.read();
    if (!source.ok() && !absl::IsNotFound(source.status())) {
      // There but unreadable (a directory where a file belongs, an I/O error): a failed reload,
      // logged and reported once until the source changes; the configuration in force stays.
      if (!unreadable_) {
        Log(LogLevel::kError, spec_.reload_failed_message,
            {{spec_.source_field, spec_.source_name},
             {"error", std::string(source.status().message())}});
        if (observer_) observer_(source.status());
      }
      unreadable_ = true;
      missing_ = false;
      return source.status();
    }
    unreadable_ = false;
    if (!source.ok()) {
      if (!missing_ && !spec_.missing_message.empty()) {
        Log(LogLevel::kWarning, spec_.missing_message, {{spec_.source_field, spec_.source_name}});
      }
      missing_ = true;
      return absl::OkStatus();
    }
    missing_ = false;
    if (loaded_once_ && *source == last_source_) return absl::OkStatus();
    absl::Status s = Apply(*std::move(source));
    if (!s.ok()) {
      Log(LogLevel::kError, spec_.reload_failed_message,
          {{spec_.source_field, spec_.source_name}, {"error", std::string(s.message())}});
    }
    if (observer_) observer_(s);
    return s;
  }

  void Start() { poller_.Start(); }
  void Stop() { poller_.Stop(); }

 private:
  // Remembers `source` as the last attempt (so a bad edit is not retried until it changes),
  // parses it and swaps it in.
  absl::Status Apply(Source source) {
    last_source_ = std::move(source);
    loaded_once_ = true;
    absl::StatusOr<Config> parsed = spec_.parse(last_source_);
    if (!parsed.ok()) return parsed.status();
    auto config = std::make_shared<const Config>(*std::move(parsed));
    snapshot_.Replace(config);
    if (spec_.on_loaded) spec_.on_loaded(*config, last_source_);
    return absl::OkStatus();
  }

  const Spec spec_;
  ConfigSnapshot<Config>& snapshot_;
  const ReloadObserver observer_;
  Source last_source_;
  bool loaded_once_ = false;
  bool missing_ = false;     // the last poll found no source (logged once)
  bool unreadable_ = false;  // the last poll could not read it (reported once)
  PeriodicTask poller_;
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_CONFIG_WATCHED_CONFIG_H_
