#ifndef RATELIMIT_STORAGE_REDIS_REDIS_STATE_STORE_H_
#define RATELIMIT_STORAGE_REDIS_REDIS_STATE_STORE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "storage/apply.h"
#include "storage/redis/cluster/redis_cluster_client.h"
#include "storage/redis/redis_command_runner.h"
#include "storage/redis/redis_function_library.h"  // RedisHashTagOfKey: where a key's states go
#include "storage/redis/redis_override_store.h"
#include "storage/redis/redis_replica_board.h"
#include "storage/state_store.h"

namespace ratelimit {
namespace redis_internal {
class Router;  // redis_router.h
}  // namespace redis_internal

struct RedisStateStoreOptions {
  // Every key starts with it. REQUIRES: ValidateRedisKeyPrefix(key_prefix) is OK.
  std::string key_prefix = "ratelimit:";
  // Tests: the time of every decision instead of the server's TIME. Not owned; outlives the store.
  const Clock* clock_override = nullptr;
  // How long a take of a request whose keys span slots is remembered (to refund it, and to make
  // a take that arrives after its refund do nothing). Default 10 s (--redis_hold_ttl).
  absl::Duration hold_ttl = absl::Seconds(10);
  // How long a request with a request_id whose keys span slots owns its request_id before another
  // server may take it over (ApplyRecorded). The server sets 2 x --redis_timeout.
  absl::Duration claim_lease = absl::Seconds(2);
  // Tests: called by such a request once its takes are answered; returning true makes the request
  // stop there (as if its server died), leaving its claim and takes as they are, and fail with
  // UNAVAILABLE.
  std::function<bool()> stop_after_takes_for_tests = nullptr;
  // The overrides' audit keeps this many newest entries (redis_override_store.h). Tests lower it.
  uint64_t max_override_audit_entries = kMaxOverrideAuditEntries;
};

// A StateStore on Redis: one standalone server or a Redis Cluster. Every operation is decided
// inside Redis by the function library (redis_function_library.h), at the clock of the primary
// of its keys (`clock` of Apply is not used, unless options.clock_override is set), and checked
// against storage/algebra. Idle states expire by themselves once refilled (PXAT at full_at), so
// CollectGarbage has nothing to do. Each state has its own key, in its own slot unless its
// limit key carries a hash tag (RedisHashTagOfKey); so on a cluster the keys of one operation
// may live in different slots:
//  - Keys of one slot are decided and written in one atomic FCALL.
//  - An operation whose keys span slots takes per slot, all slots in parallel, each take
//    recorded under a hold key (the operation's random id, in that slot, for hold_ttl). When
//    every slot allowed, that is the outcome. Otherwise the slots that took (or whose answer is
//    unknown) are refunded (ratelimit_refund), and the outcome is the denial the algebra gives
//    for the states the slots read. Bound: never over-grants; a concurrent request may be denied
//    by tokens held for one round trip before their refund, and a lost refund holds at most the
//    count of each limit until it refills.
//
// Update (a decision made in C++) is an optimistic transaction on keys of one slot: read the
// states, decide, then ratelimit_compare_and_set; a conflicting write in between makes it decide
// again (at most 64 times, then ABORTED). Keys spanning slots of a cluster: FAILED_PRECONDITION.
//
// An operation with a limit under a runtime override (LimitConfig::adjustment) takes the same
// path as any other: the function library decides it as the algebra does (the adjustment travels
// in its arguments), at the primary's TIME, across slots too.
//
// Blocking: the synchronous StateStore methods wait for their replies (a condition variable, not
// the network: the cluster client's I/O thread does the network I/O, pipelining the commands of
// concurrent callers); the slots of one operation are asked in parallel, so a caller waits for
// about one round trip (two when a cross-slot operation is refunded).
//
// Errors: UNAVAILABLE / DEADLINE_EXCEEDED from the connection; INTERNAL for an error reply or a
// disagreement between the library and the algebra; UNAVAILABLE once closed.
//
// Thread safety: thread-safe (the connection of the RedisCommandRunner form must be, when the
// store is shared).
class RedisStateStore final : public StateStore {
 public:
  // Over one connection to a standalone server. Checks the prefix, loads the function library if
  // the server's differs (EnsureRedisLibrary). `connection` is owned.
  static absl::StatusOr<std::unique_ptr<RedisStateStore>> Open(
      std::unique_ptr<RedisCommandRunner> connection, RedisStateStoreOptions options);
  // Over a cluster client (cluster or standalone, as the client detected). Also checks that every
  // slot is served (UNAVAILABLE naming the first unserved range), and loads the library on every
  // primary. `client` is owned.
  static absl::StatusOr<std::unique_ptr<RedisStateStore>> Open(
      std::unique_ptr<redis::RedisClusterClient> client, RedisStateStoreOptions options);

  ~RedisStateStore() override;
  RedisStateStore(const RedisStateStore&) = delete;
  RedisStateStore& operator=(const RedisStateStore&) = delete;

  absl::StatusOr<Outcome> Apply(const Operation& op, const Clock& clock) override;
  // Apply without waiting for Redis: one FCALL when every key is in one slot, else the takes of
  // each slot (and the refunds of a denial) chained through their replies; `done` runs on the
  // client's I/O thread once the answer is known. An operation with records is applied before
  // returning, as Apply.
  void ApplyAsync(const Operation& op, const Clock& clock, ApplyDone done) override;
  // ApplyAsync sends its commands and returns (for operations without records).
  bool ApplyAsyncMayWait() const override { return false; }
  absl::Status Update(absl::Span<const StateKey> keys, DecideFn decide) override;
  // Records (RecordSpec) are Redis keys expiring by themselves (PXAT at expires_at), each in the
  // slot of the states of its operation (the slot's canonical tag, redis::SlotTag; ApplyRecorded
  // calls it for a request_id only when its record's own slot is that slot). Like Update,
  // an optimistic transaction: one MGET reads the states and records, `decide` runs in C++ (with
  // `clock`'s time: the record values, such as signed receipts, are made there), and one FCALL
  // ratelimit_commit writes states and records only if none of them changed since (else it
  // decides again, at most 64 times, then ABORTED). A decision that writes nothing (a present
  // record) stands on the MGET snapshot. On a cluster the states must share a slot:
  // FAILED_PRECONDITION otherwise (a standalone server takes any keys; ApplyRecorded spans slots).
  absl::Status UpdateWithRecords(absl::Span<const StateKey> keys,
                                 absl::Span<const RecordSpec> records, const Clock& clock,
                                 RecordDecideFn decide) override;
  // On one server, or when the keys share a slot (and, for a request_id, its record's slot is
  // theirs): ApplyWithRecords (one UpdateWithRecords). On a cluster otherwise:
  //  - A Settle (every limit settles, one record per limit): each receipt's record lives in the
  //    slot of its state. Every slot's states and records are read in parallel (MGET); any
  //    record present refuses the whole operation (existing_record), nothing written. Else each
  //    slot is decided in C++ and committed with ratelimit_commit, slots in parallel; a slot
  //    whose commit conflicts (or fails) is re-read and decided again alone (at most 64 times,
  //    then ABORTED). Records carry this call's random id, so a re-read recognises its own
  //    commit. A re-read finding a record of another call (two Settles racing on one receipt)
  //    returns that record as existing_record while the slots already committed stay committed:
  //    a receipt still settles at most once, but such a Settle is not all-or-nothing.
  //  - One record, no settlements (a request_id): the record lives in the slot of its own key
  //    (RedisRequestRecordKey), so every request with the id meets it whatever its limits, also
  //    when they share a slot other than the record's. It is claimed first (SET NX GET) with a
  //    pending marker leased for claim_lease: a final record is returned as existing_record; a
  //    pending one within its lease is ABORTED ("in progress"); an expired one is taken over
  //    with the next generation (CAS). Then the slots take as in Apply, under holds named after
  //    the request and the claim's incarnation (kept by takeovers) and kept as long as the
  //    record, which remember each take's reply: a later generation re-running the request
  //    re-uses a take instead of taking again. Finally the record replaces the marker (CAS on
  //    the marker, so an owner that lost its claim writes nothing: ABORTED). A denial refunds
  //    the slots that took. A store error releases the claim (its lease ends at once).
  absl::StatusOr<Outcome> ApplyRecorded(const Operation& op, const Clock& clock) override;
  // Kept in Redis without expiry; created with SET NX, so every replica sharing the store agrees
  // on one secret.
  absl::StatusOr<std::string> Secret(absl::string_view name,
                                     absl::FunctionRef<std::string()> generate) override;
  // Concurrency limits (redis_leases.cc): one FCALL ratelimit_lease (storage/redis/leases.lua)
  // decides the lease op at the primary's TIME (or options.clock_override) and, for an acquire,
  // the rate limits with it, all-or-nothing; a request_id's earlier lease is answered again by
  // the library from the lease set itself. The lease set lives in two keys of the slot of the
  // concurrency key's state (RedisLeaseKeysFor). On a cluster an acquire's rate limits must share
  // that slot (one hash tag, e.g. "{org7}"): FAILED_PRECONDITION naming the first that does not.
  // INVALID_ARGUMENT naming the field for an op that is not valid (LeaseOp), nothing changed.
  absl::StatusOr<LeaseOutcome> ApplyLease(const LeaseOperation& op, const Clock& clock) override;
  // The same FCALL sent without waiting: `done` runs on the client's I/O thread with the
  // outcome (or at once with an error found before sending). Covered by ApplyAsyncMayWait.
  void ApplyLeaseAsync(const LeaseOperation& op, const Clock& clock, LeaseDone done) override;
  // SCANs every primary for the lease sets of `name` and deletes each (one DEL of its two keys).
  absl::StatusOr<uint64_t> DeleteAllLeases(LimitSource source, absl::string_view name,
                                           int64_t now_us) override;
  // A SCAN page (COUNT kLeakScanCount) of one primary for lease sets, then a ZCOUNT of each set's
  // expiries that passed by `now_us` less than kLeaseRecordMarginMicros ago (one round trip for
  // the page's sets): a set is named when one did (a released lease kept for its request_id
  // counts too: its decision then finds no leak). The cursor is "<primary's index> <its SCAN
  // cursor>".
  absl::StatusOr<LeakedLeaseKeys> FindLeakedLeaseKeys(absl::string_view cursor,
                                                      int64_t now_us) override;
  static constexpr int kLeakScanCount = 1000;
  absl::StatusOr<std::optional<State>> Get(const StateKey& key) override;
  absl::StatusOr<uint64_t> Delete(const StateKey& key) override;
  // SCANs the keys of `name` on every primary and deletes them.
  absl::StatusOr<uint64_t> DeleteAll(LimitSource source, absl::string_view name) override;
  // A PING of every primary: OK when at least one answers, UNAVAILABLE naming them otherwise.
  absl::Status Health() override;
  absl::Status Close() override;
  // Groups of keys beside the states (redis_replica_board.h).
  ReplicaBoard* replica_board() override { return &board_; }
  // The runtime overrides, in keys of their own under one hash tag (redis_override_store.h).
  OverrideStore* overrides() override { return &overrides_; }
  // The cluster client's counters (redis_store_metrics.h); none over a plain connection.
  std::vector<MetricFamily> MetricFamilies() override;
  absl::string_view backend_name() const override { return "redis"; }

 private:
  using Router = redis_internal::Router;  // how commands reach Redis
  // Update and the record protocols decide again after a conflicting write, at most this often.
  static constexpr int kMaxUpdateAttempts = 64;

  RedisStateStore(std::unique_ptr<Router> router, RedisStateStoreOptions options);
  absl::StatusOr<redis::Reply> Command(const std::string& routing_key,
                                       std::vector<std::string> argv);
  std::string KeyFor(const StateKey& key) const;
  // One SCAN of `primary` from `cursor` ("0" first) for keys matching `pattern`, COUNT `count`:
  // the keys found and the next cursor ("0" after the last page).
  struct ScannedPage {
    std::string next;
    std::vector<std::string> keys;
  };
  absl::StatusOr<ScannedPage> ScanPage(const std::string& primary, const std::string& cursor,
                                       const std::string& pattern, int count);
  // SCANs every primary for the keys matching `pattern`; for each, `keys_of` gives the keys to
  // delete with it (one slot; none: keep it), and they are deleted with one DEL. The DELs that
  // deleted something.
  absl::StatusOr<uint64_t> DeleteScanned(
      const std::string& pattern,
      absl::FunctionRef<std::vector<std::string>(const std::string&)> keys_of);
  // As DeleteScanned, each group deleted by the command `command_of` makes of its keys instead
  // of a DEL; the groups whose command answered a positive integer.
  absl::StatusOr<uint64_t> DeleteScannedBy(
      const std::string& pattern,
      absl::FunctionRef<std::vector<std::string>(const std::string&)> keys_of,
      absl::FunctionRef<std::vector<std::string>(std::vector<std::string>)> command_of);
  // A request whose keys are in several slots (`groups`: the key indices of each): one take per
  // slot, in parallel, each recording a hold under one request id; if any slot denies or fails,
  // the slots that took (or may have) are refunded before the answer. The async form answers
  // through `done` from the client's I/O thread and never waits; the other waits for it.
  absl::StatusOr<Outcome> ApplyAcrossSlots(const Operation& op, const OperationKeys& keys,
                                           const std::vector<std::string>& redis_keys,
                                           const std::vector<std::vector<size_t>>& groups,
                                           std::optional<int64_t> now);
  void ApplyAcrossSlotsAsync(const Operation& op, const OperationKeys& keys,
                             const std::vector<std::string>& redis_keys,
                             const std::vector<std::vector<size_t>>& groups,
                             std::optional<int64_t> now, ApplyDone done);
  // The takes of an ApplyAcrossSlotsAsync have all been answered: decide, refund, answer.
  struct CrossSlotCall;
  // What ApplyLease and ApplyLeaseAsync send: the checks (a closed store, an invalid op, an
  // acquire's rate limits outside the lease slot on a cluster), then the FCALL of `op`, to send
  // to `*routing_key`; `*rate_keys` is what the reply is checked against.
  absl::StatusOr<std::vector<std::string>> LeaseCommand(const LeaseOperation& op,
                                                        OperationKeys* rate_keys,
                                                        std::string* routing_key);
  void OnCrossSlotTakes(std::shared_ptr<CrossSlotCall> call);

  absl::StatusOr<Outcome> SettleAcrossSlots(const Operation& op, const OperationKeys& keys,
                                            const std::vector<std::string>& redis_keys,
                                            const std::vector<std::vector<size_t>>& groups,
                                            const Clock& clock);
  absl::StatusOr<Outcome> RecordedAcrossSlots(const Operation& op, const OperationKeys& keys,
                                              const std::vector<std::string>& redis_keys,
                                              const std::vector<std::vector<size_t>>& groups,
                                              const Clock& clock);

  const std::unique_ptr<Router> router_;
  const RedisStateStoreOptions options_;
  RedisReplicaBoard board_;
  RedisOverrideStore overrides_;
  std::atomic<bool> closed_{false};
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_REDIS_REDIS_STATE_STORE_H_
