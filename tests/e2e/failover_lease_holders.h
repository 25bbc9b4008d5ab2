#ifndef RATELIMIT_TESTS_E2E_FAILOVER_LEASE_HOLDERS_H_
#define RATELIMIT_TESTS_E2E_FAILOVER_LEASE_HOLDERS_H_

// Holders of a concurrency key's slots through two servers sharing a Redis cluster, run beside
// the rate workload of redis_failover_test while a primary is killed, and the audit of what they
// held: how many slots they believed they held at once, which acknowledged leases the store lost,
// and what ListLeases and Check show afterwards.

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/cpp/client.h"

namespace ratelimit::testing {

// The concurrency limit the holders share: its name and capacity, and its key, in the slot of
// the rate key ("failover"), so that the killed primary serves both workloads.
inline constexpr char kLeaseLimit[] = "slots";
inline constexpr int kSlots = 4;
inline constexpr char kLeaseKey[] = "{failover}slots";

struct LeaseRun {
  int max_holding = 0;   // most slots the callers believed they held at one instant
  int acquired = 0;      // acquires acknowledged as allowed
  int replayed = 0;      // of which answered to a retry, with the lease an earlier attempt took
  int released = 0;      // releases answered RELEASED
  int failed_calls = 0;  // acquire and release attempts that failed (each retried)
  // Leases acknowledged before the kill and released by a call sent after it.
  int held_across_kill = 0;
  // Leases whose holder never had a release fail, and whose first release answered NOT_HELD:
  // acknowledged acquires the store lost.
  std::vector<std::string> lost;
  std::vector<std::string> problems;  // a holder that gave up, or an answer out of contract
  // Per server, when the first allowed acquire sent after the kill was answered, and how long
  // after the kill that was (set by the test).
  absl::Time back[2] = {absl::InfiniteFuture(), absl::InfiniteFuture()};
  double outage_s[2] = {-1, -1};
  // The leases the callers hold when the run stops (the pinned one among them), sorted.
  std::vector<std::string> held_at_end;
  // After the run, through each server: the ids ListLeases shows (sorted), its `held`, and the
  // free slots Check reports.
  std::vector<std::string> listed[2];
  uint64_t listed_held[2] = {0, 0};
  double free_slots[2] = {-1, -1};
  // Then every held lease released (each answer's state), and the free slots after that.
  std::vector<v1::LeaseState> end_releases;
  double free_after_release = -1;
};

// Holders of kLeaseKey's slots, through two servers. Each caller repeatedly acquires a slot with
// a request_id of its own, counts itself in a shared "holding" counter from the acknowledgement
// until just before it releases, holds the slot a few random milliseconds, and releases it. A
// failed acquire is retried with the same request_id until answered (a lost answer must not
// leave a slot nobody knows of), a failed release until answered. One more lease, pinned, is
// acquired before the callers start and held to the end.
class LeaseHolders {
 public:
  // `targets`: the two servers' addresses; the callers alternate between them.
  explicit LeaseHolders(const std::vector<std::string>& targets);
  ~LeaseHolders();

  // Acquires the pinned lease, then starts the callers.
  absl::Status Start();

  // The primary was dead from `at` on.
  void Killed(absl::Time at);

  // Whether an acquire sent after the kill has been allowed through each server.
  bool BackOnEveryServer();

  // Stops the callers (each keeps what it holds at that moment), then audits the key through
  // each server (ListLeases with `admin_token`, Check) and releases every lease still held.
  LeaseRun StopAndAudit(const std::string& admin_token);

 private:
  void Stop();

  // The first answer to an acquire with `request_id`, retried while calls fail.
  absl::StatusOr<v1::AcquireResponse> AcquireAnswered(RateLimitClient& client,
                                                      const std::string& request_id,
                                                      const std::string& holder, absl::Time* sent);
  void Caller(int i);

  // Counts an allowed acquire sent to `server` at `sent` and answered at `answered` in the
  // callers' holding counter. Returns whether it was acknowledged before the kill.
  bool Hold(const v1::AcquireResponse& acquired, int server, absl::Time sent, absl::Time answered);

  // Counts a holder about to release `id` out of the holding counter; false (the lease is kept
  // for the audit) once the run is stopping.
  bool Unhold(const std::string& id);

  // Releases `id`, retried until a call is answered, and judges the answer.
  void ReleaseAnswered(RateLimitClient& client, const std::string& id, bool acquired_before_kill);

  void CountFailedCall();
  void Problem(const std::string& what);

  const std::vector<std::string> targets_;
  std::vector<std::unique_ptr<RateLimitClient>> clients_;  // one per caller
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  LeaseRun run_ ABSL_GUARDED_BY(mu_);
  int holding_ ABSL_GUARDED_BY(mu_) = 0;  // the callers' shared count of slots held
  absl::Time killed_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
};

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_E2E_FAILOVER_LEASE_HOLDERS_H_
