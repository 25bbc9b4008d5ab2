#include "server/observability/repeated_log.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ratelimit {
namespace {

// Every RepeatedLog of the process, for FlushRepeatedLogs.
struct Registry {
  absl::Mutex mu;
  std::vector<RepeatedLog*> logs ABSL_GUARDED_BY(mu);
};

Registry& Logs() {
  static Registry* const registry = new Registry();  // never destroyed: logs may outlive main
  return *registry;
}

}  // namespace

RepeatedLog::RepeatedLog(LogLevel level, std::string message, const Clock& clock,
                         absl::Duration interval)
    : level_(level),
      message_(std::move(message)),
      clock_(clock),
      interval_us_(std::max<int64_t>(1, absl::ToInt64Microseconds(interval))) {
  Registry& r = Logs();
  absl::MutexLock lock(&r.mu);
  r.logs.push_back(this);
}

RepeatedLog::~RepeatedLog() {
  {
    Registry& r = Logs();
    absl::MutexLock lock(&r.mu);
    r.logs.erase(std::remove(r.logs.begin(), r.logs.end(), this), r.logs.end());
  }
  Flush(/*force=*/true);
}

void RepeatedLog::Log(std::initializer_list<LogField> fields, uint64_t occurrences) {
  const int64_t now = clock_.NowMicros();
  absl::MutexLock lock(&mu_);
  if (opened_at_us_ >= 0 && now - opened_at_us_ < interval_us_) {
    counted_ += occurrences;
    return;
  }
  if (counted_ > 0) WriteSummaryLocked(now);
  // Written in full; the occurrences beyond the first of a group are counted.
  ::ratelimit::Log(level_, message_, fields);
  opened_at_us_ = now;
  counted_ = occurrences - 1;
}

void RepeatedLog::Flush(bool force) {
  const int64_t now = clock_.NowMicros();
  absl::MutexLock lock(&mu_);
  if (opened_at_us_ < 0 || (!force && now - opened_at_us_ < interval_us_)) return;
  if (counted_ > 0) WriteSummaryLocked(now);
  opened_at_us_ = -1;
}

void RepeatedLog::WriteSummaryLocked(int64_t now_us) {
  const absl::Duration span =
      absl::Microseconds(std::min(interval_us_, std::max<int64_t>(0, now_us - opened_at_us_)));
  ::ratelimit::Log(level_,
                   absl::StrCat(message_, " repeated ", counted_, " times in the last ",
                                absl::FormatDuration(absl::Trunc(span, absl::Milliseconds(1)))),
                   {{"repeated", absl::StrCat(counted_)}});
  counted_ = 0;
}

void FlushRepeatedLogs(bool force) {
  Registry& r = Logs();
  absl::MutexLock lock(&r.mu);
  for (RepeatedLog* log : r.logs) log->Flush(force);
}

}  // namespace ratelimit
