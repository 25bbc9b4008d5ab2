#include "client/cpp/reserve_wait.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/cpp/proto_time.h"

namespace ratelimit {
namespace {

sigset_t Interrupts() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  return set;
}

// "ratelimit settle --used=0 --receipt=A,B": how to cancel the reservation by hand.
std::string SettleCommand(const v1::RateLimitResponse& response) {
  std::string receipts;
  for (const v1::LimitResult& r : response.results()) {
    if (r.receipt().empty()) continue;
    absl::StrAppend(&receipts, receipts.empty() ? "" : ",", absl::Base64Escape(r.receipt()));
  }
  return absl::StrCat("ratelimit settle --used=0 --receipt=", receipts);
}

}  // namespace

void HoldInterrupts() {
  const sigset_t set = Interrupts();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitUnlessInterrupted(absl::Time when) {
  const sigset_t set = Interrupts();
  for (;;) {
    const absl::Duration left = std::max(when - absl::Now(), absl::ZeroDuration());
    const timespec timeout = absl::ToTimespec(left);
    const int signal = sigtimedwait(&set, nullptr, &timeout);
    if (signal > 0) return signal;
    if (errno == EAGAIN && absl::Now() >= when) return 0;
    if (errno != EAGAIN && errno != EINTR) {
      // Nothing else can fail with this set and a timeout made from a non-negative duration; if
      // something did, retrying would spin at full speed. The rest of the wait is slept out
      // instead, as if uninterrupted (a signal that comes meanwhile stays pending, unseen).
      absl::SleepFor(when - absl::Now());
      return 0;
    }
    // EINTR (another signal's handler ran), or EAGAIN a little early: wait for the rest.
  }
}

int ReserveThenWait(RateLimitClient& client, const v1::RateLimitRequest& request,
                    std::optional<absl::Duration> max_wait, const ReserveWaitIo& io) {
  // Receipts are what cancels the reservation: asked for whatever the request says.
  v1::RateLimitRequest with_receipts = request;
  with_receipts.set_omit_receipts(false);
  absl::StatusOr<v1::RateLimitResponse> reserved = client.Reserve(with_receipts);
  if (!reserved.ok()) return io.fail(reserved.status());
  const v1::RateLimitResponse& r = *reserved;
  if (!r.allowed()) {
    io.print(r);
    return 2;
  }
  const absl::Time when = r.has_retry_at() ? TimeOf(r.retry_at()) : absl::InfinitePast();
  const absl::Time now = io.now();
  if (max_wait && when - now > *max_wait) {
    // Cancelled before it is shown: the caller sees one answer, the error.
    absl::StatusOr<v1::SettleResponse> cancelled = client.SettleAll(r, 0);
    if (!cancelled.ok()) {
      *io.note << "ratelimit: the reservation could not be cancelled; cancel it with: "
               << SettleCommand(r) << "\n";
      return io.fail(cancelled.status());
    }
    return io.fail(absl::DeadlineExceededError(absl::StrCat(
        "--max_wait: the reservation may only be used in ", absl::FormatDuration(when - now),
        ", more than ", absl::FormatDuration(*max_wait), "; it was cancelled (nothing taken)")));
  }
  io.print(r);
  if (when <= now) return 0;
  const int signal = io.wait_until(when);
  if (signal == 0) return 0;
  absl::StatusOr<v1::SettleResponse> cancelled = client.SettleAll(r, 0);
  if (!cancelled.ok()) {
    *io.note << "ratelimit: interrupted; cancelling the reservation failed ("
             << cancelled.status().ToString() << "); cancel it with: " << SettleCommand(r) << "\n";
    return 1;
  }
  *io.note << "ratelimit: interrupted; the reservation was cancelled (nothing taken)\n";
  return 128 + signal;
}

}  // namespace ratelimit
