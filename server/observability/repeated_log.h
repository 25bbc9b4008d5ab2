#ifndef RATELIMIT_SERVER_OBSERVABILITY_REPEATED_LOG_H_
#define RATELIMIT_SERVER_OBSERVABILITY_REPEATED_LOG_H_

// Logging an event that can repeat as often as requests arrive, without a line per occurrence.
//
// A failing store fails every request, a refused admin caller may retry in a loop, a collector
// that is down fails every export: one line each would write millions of lines a minute, bury
// the first error, fill the log disk and cost CPU exactly when the service is in trouble. A
// RepeatedLog writes the first occurrence of its event in full, then only counts the occurrences
// of the next `interval`, and writes them as one summary line:
//
//   2026-11-28T10:00:10.000000Z ERROR store failure repeated 48213 times in the last 10s
//
// The summary is written when an occurrence comes after the interval (that occurrence is then
// written in full and opens the next interval), or by Flush once the interval has passed, which
// FlushRepeatedLogs does for every RepeatedLog of the process (the server calls it every second
// and when it stops). So a storm of one event costs about two lines per interval, and the
// occurrences the lines account for (one per full line, N per summary) add up to how many there
// were.

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/observability/log.h"
#include "storage/clock.h"

namespace ratelimit {

class RepeatedLog {
 public:
  // `message` names the event ("store failure"); `clock` times the intervals and must outlive
  // this object.
  RepeatedLog(LogLevel level, std::string message, const Clock& clock = SystemClock::Default(),
              absl::Duration interval = absl::Seconds(10));
  // Writes the summary of the occurrences not yet written, if any.
  ~RepeatedLog();
  RepeatedLog(const RepeatedLog&) = delete;
  RepeatedLog& operator=(const RepeatedLog&) = delete;

  // One occurrence, or `occurrences` of them at once (a Batch whose entries failed together),
  // with the fields a full line carries.
  void Log(std::initializer_list<LogField> fields, uint64_t occurrences = 1);

  // Writes the summary of the counted occurrences once the interval has passed (at once with
  // `force`), and closes the interval: the next occurrence is written in full.
  void Flush(bool force = false);

 private:
  // REQUIRES: something was counted.
  void WriteSummaryLocked(int64_t now_us) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const LogLevel level_;
  const std::string message_;
  const Clock& clock_;
  const int64_t interval_us_;
  absl::Mutex mu_;
  // When the current interval opened; -1: none is open (the next occurrence is written in full).
  int64_t opened_at_us_ ABSL_GUARDED_BY(mu_) = -1;
  // Occurrences of the current interval not written yet.
  uint64_t counted_ ABSL_GUARDED_BY(mu_) = 0;
};

// Flush() on every RepeatedLog that exists (`force`: write every pending summary now).
// Thread-safe.
void FlushRepeatedLogs(bool force = false);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_OBSERVABILITY_REPEATED_LOG_H_
