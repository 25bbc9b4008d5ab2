#ifndef RATELIMIT_TESTS_SUPPORT_TEST_SUPPORT_H_
#define RATELIMIT_TESTS_SUPPORT_TEST_SUPPORT_H_

// Shared test helpers: clocks, status matchers, a temporary directory, a store that fails on
// command, and a real ratelimit-server process.

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "storage/clock.h"
#include "storage/limit_config.h"
#include "storage/state_store.h"

#define ASSERT_OK(expr)                                            \
  do {                                                             \
    const absl::Status _st = ::ratelimit::testing::ToStatus(expr); \
    ASSERT_TRUE(_st.ok()) << #expr << ": " << _st;                 \
  } while (0)
#define EXPECT_OK(expr)                                            \
  do {                                                             \
    const absl::Status _st = ::ratelimit::testing::ToStatus(expr); \
    EXPECT_TRUE(_st.ok()) << #expr << ": " << _st;                 \
  } while (0)

namespace ratelimit::testing {

inline absl::Status ToStatus(const absl::Status& s) { return s; }
template <typename T>
absl::Status ToStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

// The value of `s`; a failed test assertion (and T{}) when it holds an error.
template <typename T>
T ValueOrDie(absl::StatusOr<T> s) {
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : T{};
}

// The non-empty lines of `text`.
std::vector<std::string> Lines(const std::string& text);

// How many occurrences of the logged event `event` the log `lines` account for (see
// server/observability/repeated_log.h): one per line that writes it in full, N per summary
// "<event> repeated N times in the last ...".
uint64_t LoggedOccurrences(const std::vector<std::string>& lines, const std::string& event);

inline constexpr int64_t kSecond = 1000000;
inline constexpr int64_t kMinute = 60 * kSecond;

// A limits file defining "api": a token bucket of 2 per second.
inline constexpr char kApiLimits[] = R"(limits:
  - name: api
    kind: token_bucket
    rate: 2
    period: 1s
)";

// The limits file of the service and process tests:
//   api     a token bucket of 10 per second;
//   daily   a fixed window of 3 per UTC day;
//   ledger  a token bucket of 1,000,000 that refills by 1 a day: what a test consumes stays
//           consumed for the test's duration;
//   cli     a fixed window of 10 that ends in 2070: its value changes only by what a test takes,
//           however long the test's calls take.
inline constexpr char kLimits[] = R"(limits:
  - name: api
    kind: token_bucket
    rate: 10
    period: 1s
  - name: daily
    kind: fixed_window
    rate: 3
    period: 24h
    start: 0s
  - name: ledger
    kind: token_bucket
    rate: 1
    period: 24h
    capacity: 1000000
  - name: cli
    kind: fixed_window
    rate: 10
    period: 36600d
    start: 0s
)";

// A limits file of one "ledger": a token bucket of 1,000 that refills by 1 a day.
inline constexpr char kLedgerOf1000Limits[] = R"(limits:
  - name: ledger
    kind: token_bucket
    rate: 1
    period: 24h
    capacity: 1000
)";

// A clock that moves only when told to.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t now_us = 1700000000LL * kSecond) : now_(now_us) {}
  int64_t NowMicros() const override { return now_.load(); }
  void Set(int64_t now_us) { now_.store(now_us); }
  void Advance(int64_t us) { now_.fetch_add(us); }

 private:
  std::atomic<int64_t> now_;
};

// A clock that advances by `step_us` every time it is read: virtual time that passes as fast as
// the callers work, for concurrency tests that must cover a span of time without sleeping.
class TickingClock final : public Clock {
 public:
  TickingClock(int64_t start_us, int64_t step_us) : now_(start_us), step_(step_us) {}
  int64_t NowMicros() const override { return now_.fetch_add(step_) + step_; }
  int64_t Peek() const { return now_.load(); }

 private:
  mutable std::atomic<int64_t> now_;
  const int64_t step_;
};

// A fresh directory under $TEST_TMPDIR or /tmp, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Writes `contents` to `path` atomically (ratelimit::WriteFileAtomically); aborts the test
// binary when it cannot, since every test relying on it would fail for an unrelated reason.
void WriteFileAtomically(const std::string& path, const std::string& contents);

// The newest WAL file (`*.log`) of the directory `dir` that holds data; empty if none.
std::string NewestWal(const std::string& dir);

// The bytes of the WAL file `wal` up to its last non-zero byte: its records. A mapped WAL file
// left by a crash ends in zeros up to its last reserved chunk (storage/mapped_wal_file_system.h).
uint64_t WalRecordBytes(const std::string& wal);

// A loopback port that refuses connections for as long as this object lives: a socket bound to
// it (so nothing else can take the port) that never listens, so every connection attempt is
// refused at once. For tests of a peer that is down. Aborts the test binary when it cannot bind.
class RefusingPort {
 public:
  RefusingPort();
  ~RefusingPort();
  RefusingPort(const RefusingPort&) = delete;
  RefusingPort& operator=(const RefusingPort&) = delete;
  int port() const { return port_; }
  // "127.0.0.1:<port>".
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Limit configs for tests. A fixed window's start defaults to 0: windows aligned to the epoch.
LimitConfig TokenBucket(double rate, int64_t period_us, std::optional<double> capacity = {},
                        std::optional<double> max_reserved = {});
LimitConfig FixedWindow(double rate, int64_t period_us, std::optional<int64_t> start_us = 0,
                        std::optional<double> capacity = {});

// Wraps a StateStore and fails every call with `error` while failing() is set.
class FailingStateStore final : public StateStore {
 public:
  explicit FailingStateStore(std::unique_ptr<StateStore> inner) : inner_(std::move(inner)) {}
  void FailWith(absl::Status error) {
    absl::MutexLock l(&mu_);
    error_ = std::move(error);
  }
  void Heal() { FailWith(absl::OkStatus()); }

  absl::Status Update(absl::Span<const StateKey> keys, DecideFn decide) override;
  absl::StatusOr<std::optional<State>> Get(const StateKey& key) override;
  absl::StatusOr<uint64_t> Delete(const StateKey& key) override;
  absl::StatusOr<uint64_t> DeleteAll(LimitSource source, absl::string_view name) override;
  absl::Status Health() override;
  absl::Status CollectGarbage() override;
  absl::Status Close() override { return inner_->Close(); }
  std::vector<Gauge> Gauges() override { return inner_->Gauges(); }
  absl::string_view backend_name() const override { return inner_->backend_name(); }

 private:
  absl::Status Error() {
    absl::MutexLock l(&mu_);
    return error_;
  }
  std::unique_ptr<StateStore> inner_;
  absl::Mutex mu_;
  absl::Status error_;
};

// The path of one of our executables: $RATELIMIT_BIN_DIR/<name> (CTest sets the variable to
// build/bin).
std::string BinaryPath(const std::string& name);

// Runs `command` with /bin/sh, standard error merged into standard output. Returns (exit code,
// output); the exit code is 128 + the signal number when a signal ended it, -1 when it could not
// be started.
std::pair<int, std::string> RunCommand(const std::string& command);

// Polls `condition` every 10 ms until it holds or `timeout` passes; returns whether it held. For
// waiting on what cannot notify the test: a child process, or a background job of a library (a
// RocksDB compaction). Work of our own threads is awaited on a condition instead (a
// notification, HealthReporter::AwaitState, ReloadRecorder). Tests assert the condition, never
// the time it took.
template <typename F>
bool Eventually(F condition, absl::Duration timeout = absl::Seconds(20)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return condition();
}

// Makes the gRPC clients of this process read a connection only while a call is in progress, as a
// client between calls may (gRPC's own poll an idle channel every 5 s): such a client does not
// answer a server's GOAWAY. Call before the process first uses gRPC.
void StopPollingIdleClientChannels();

// A ratelimit-server child process on port 0 (BinaryPath("ratelimit-server")).
class ServerProcess {
 public:
  // Starts the server with `args` (plus --listen=127.0.0.1:0, --metrics_listen=127.0.0.1:0 and
  // the port files) and waits until it has written its ports. Returns an error if it exits or takes
  // longer than 30 s.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(std::vector<std::string> args,
                                                              const std::string& work_dir);
  ~ServerProcess();  // SIGKILL if still running

  int port() const { return port_; }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  // The /metrics and /healthz HTTP port.
  int metrics_port() const { return metrics_port_; }
  pid_t pid() const { return pid_; }
  // Sends `signal` and waits for the process to exit; returns its exit status (as waitpid).
  int StopWith(int signal);
  // Sends `signal` and waits at most `limit` for the process to exit: its exit status (as
  // waitpid), or nullopt when it was still running then (it is killed with SIGKILL).
  std::optional<int> StopWithin(int signal, absl::Duration limit);
  // Everything the process wrote to standard error so far.
  std::string Stderr() const;

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  int metrics_port_ = 0;
  std::string stderr_path_;
};

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_SUPPORT_TEST_SUPPORT_H_
