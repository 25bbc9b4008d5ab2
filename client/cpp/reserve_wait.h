#ifndef RATELIMIT_CLIENT_CPP_RESERVE_WAIT_H_
#define RATELIMIT_CLIENT_CPP_RESERVE_WAIT_H_

// `ratelimit reserve --wait`: a reservation is printed as soon as it is made (its receipts with
// it), then the command waits until its retry_at. A wait the user interrupts (SIGINT, SIGTERM or
// SIGHUP) cancels the reservation, so that its tokens are not held for work that will not run;
// a retry_at later than --max_wait allows is cancelled at once. Apart from main, so that each is
// tested on its own.

#include <functional>
#include <optional>
#include <ostream>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/cpp/client.h"
#include "ratelimit/v1/ratelimit.pb.h"

namespace ratelimit {

// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread and in every thread it starts later:
// call it before any thread starts (before connecting), so that such a signal waits for
// WaitUnlessInterrupted instead of ending the process while a reservation is held. Not undone.
void HoldInterrupts();

// Waits on the real clock until `when`, or until a signal held by HoldInterrupts arrives (one that
// arrived earlier counts at once). Returns 0 when `when` came, else the signal's number.
int WaitUnlessInterrupted(absl::Time when);

// How ReserveThenWait meets the outside world (tests pass fakes).
struct ReserveWaitIo {
  std::function<absl::Time()> now;
  // Waits until the time given; 0 when it came, else the number of the signal that interrupted.
  std::function<int(absl::Time)> wait_until;
  // Prints the reservation (as text or JSON) and flushes it, before any wait.
  std::function<void(const v1::RateLimitResponse&)> print;
  // Reports an error (as the command line does) and returns the exit status.
  std::function<int(const absl::Status&)> fail;
  // Where a note on an interrupted wait goes (standard error).
  std::ostream* note = nullptr;
};

// Reserves `request` (with receipts, whatever its omit_receipts says: they cancel it), prints the
// answer, and for an allowed reservation waits until its
// retry_at. Exit status: 0 when the wait ended (or none was needed), 2 denied (printed, no wait),
// 128 + the signal when the wait was interrupted and the reservation cancelled, and what `fail`
// returns for an error: the call's, or DEADLINE_EXCEEDED naming --max_wait when the retry_at is
// more than `max_wait` away (the reservation cancelled, nothing printed), or the cancellation's
// own error (then the note names the receipts to settle by hand).
int ReserveThenWait(RateLimitClient& client, const v1::RateLimitRequest& request,
                    std::optional<absl::Duration> max_wait, const ReserveWaitIo& io);

}  // namespace ratelimit

#endif  // RATELIMIT_CLIENT_CPP_RESERVE_WAIT_H_
