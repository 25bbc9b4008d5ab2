#include "server/v1/lease_sweeper.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/observability/log.h"

namespace ratelimit {

LeaseSweeper::LeaseSweeper(Options options, ReplicaBoard* board, const Clock& clock, SweepFn sweep)
    : options_(std::move(options)), board_(board), clock_(clock), sweep_(std::move(sweep)) {}

LeaseSweeper::Result LeaseSweeper::Count(Result r) {
  switch (r) {
    case Result::kSwept:
      swept_.fetch_add(1, std::memory_order_relaxed);
      break;
    case Result::kSkipped:
      skipped_.fetch_add(1, std::memory_order_relaxed);
      break;
    case Result::kFailed:
      failed_.fetch_add(1, std::memory_order_relaxed);
      break;
  }
  return r;
}

LeaseSweeper::Result LeaseSweeper::RunOnce() {
  if (board_ != nullptr) {
    BoardSyncRequest lead;
    lead.group = kBoardGroup;
    lead.member = options_.member;  // no record: only the lead
    lead.now_us = clock_.NowMicros();
    lead.lead_us = options_.interval_us;
    lead.stale_us = options_.interval_us;
    lead.keep_us = 3 * options_.interval_us;
    absl::StatusOr<BoardSyncReply> reply = board_->Sync(lead);
    if (!reply.ok()) {
      Log(LogLevel::kWarning, "lease leak sweep: the replica board failed; no pass this interval",
          {{"error", std::string(reply.status().message())}});
      return Count(Result::kFailed);
    }
    if (!reply->leading) return Count(Result::kSkipped);  // another replica sweeps
  }
  absl::StatusOr<int64_t> counted = sweep_();
  if (!counted.ok()) {
    if (counted.status().code() == absl::StatusCode::kUnimplemented) {
      return Count(Result::kSkipped);  // a store that keeps no leases
    }
    Log(LogLevel::kWarning, "lease leak sweep failed",
        {{"error", std::string(counted.status().message())}});
    return Count(Result::kFailed);
  }
  if (*counted > 0) {
    Log(LogLevel::kDebug, "lease leak sweep", {{"expired_unreleased", absl::StrCat(*counted)}});
  }
  return Count(Result::kSwept);
}

}  // namespace ratelimit
