#ifndef RATELIMIT_STORAGE_STATE_STORE_H_
#define RATELIMIT_STORAGE_STATE_STORE_H_

// The contract between the service and a backend that keeps the (value, ts) states.
//
// Writing a backend. Implement the five REQUIRED methods (pure virtual): Update, Get, Delete,
// DeleteAll and backend_name. That is a complete, correct store: every OPTIONAL method below has
// a default built on the required ones (or a refusal, for a capability the store does not have),
// and the service works with it unchanged. Override an optional method for one of two reasons:
//  - to provide a capability the default refuses: idempotency records (UpdateWithRecords) and
//    secrets (Secret) answer UNIMPLEMENTED by default, so receipts and request_id are refused;
//  - to do what the default does, better: decide where the states live (Apply), without blocking
//    the caller (ApplyAsync), many operations per write (ApplyBatch), or report health, garbage
//    collection, closing and metrics of its own.
// storage/memory/ is the smallest complete backend (the required methods, records and secrets);
// storage/rocksdb/ and storage/redis/ override most optional methods. A new backend is a folder
// of its own and one line in storage/factory/state_store_factory.cc.
//
// Every implementation guarantees, for every method:
//  - Update is atomic and isolated: the states `decide` sees are not changed by anyone else
//    until its writes are applied, and its writes are applied all together or not at all.
//  - A successful Update is durable to the implementation's promise (RocksDB: in the WAL).
//  - Errors come back as a status (UNAVAILABLE for I/O trouble); nothing throws.
//  - Once a write fails (full disk, I/O error), writes are refused with UNAVAILABLE until
//    Health() finds the store writable again; a failed write was never applied.
//
// Thread safety: a StateStore is thread-safe. Every method may be called concurrently from any
// number of threads, and an override must keep it so; the methods below say only what they add.
//
// Dispatch: the service makes one virtual call per decision (Apply, ApplyAsync or ApplyBatch); a
// default makes the calls it needs of the required methods (the default Apply: one Update).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "storage/algebra.h"
#include "storage/clock.h"
#include "storage/operation.h"
#include "storage/replica_board.h"

namespace ratelimit {

class OverrideStore;    // storage/overrides/override_store.h
struct LeaseOperation;  // storage/leases/lease.h
struct LeaseOutcome;

class StateStore {
 public:
  // Called with the current states of the keys passed to Update (same order; nullopt where there
  // is none). It fills `writes` (same size, initially all nullopt) with the states to store;
  // nullopt leaves a key unchanged. If it returns an error, nothing is written and Update
  // returns that error.
  //
  // An implementation may call it more than once in one Update (e.g. a remote backend retrying
  // after a conflicting write); only the writes of the last call are applied. It must therefore
  // be a pure function of `current` and what it captured: no side effects, and everything it
  // reports to its caller must be recomputed on every call. REQUIRES: it does not call back into
  // the store.
  using DecideFn = absl::FunctionRef<absl::Status(absl::Span<const std::optional<State>> current,
                                                  absl::Span<std::optional<State>> writes)>;

  // Called inside UpdateWithRecords with the current states (as DecideFn) and the stored value of
  // each record (nullopt when absent or expired). It fills `writes` like DecideFn and
  // `record_writes` (same size as the records, initially nullopt) with the values of the records
  // to store. Same purity rules as DecideFn.
  using RecordDecideFn = absl::FunctionRef<absl::Status(
      absl::Span<const std::optional<State>> current,
      absl::Span<const std::optional<std::string>> records, absl::Span<std::optional<State>> writes,
      absl::Span<std::optional<std::string>> record_writes)>;

  // Called once with the result of ApplyAsync.
  using ApplyDone = absl::AnyInvocable<void(absl::StatusOr<Outcome>) &&>;

  virtual ~StateStore() = default;

  // ---------------------------------------------------------------------------------------------
  // REQUIRED: every backend implements these.

  // Reads, decides and writes `keys` as one transaction: calls `decide` with their current states
  // and applies the writes it returns, atomically and in isolation (see above). Returns OK once the
  // writes are as durable as the store promises; `decide`'s error, with nothing written; or the
  // store's error, with nothing written. REQUIRES: keys are distinct, 1..N.
  // Required: the transaction every default of the decision path is built on.
  virtual absl::Status Update(absl::Span<const StateKey> keys, DecideFn decide) = 0;

  // The current state of `key`, or nullopt when it has none. Sees every write acknowledged
  // before the call. Required.
  virtual absl::StatusOr<std::optional<State>> Get(const StateKey& key) = 0;

  // Removes the state of one key (it becomes full). Returns how many states it removed: 1, or 0
  // when the key had none (not an error). Ordered with Update on the key: a decision lands either
  // before the removal or after it. Required.
  virtual absl::StatusOr<uint64_t> Delete(const StateKey& key) = 0;

  // Removes the state of every key of limit `name` of `source`, and nothing else. Returns how
  // many states it removed. Each key's removal is ordered with Update on that key, as Delete;
  // the removals need not be one transaction. Required.
  virtual absl::StatusOr<uint64_t> DeleteAll(LimitSource source, absl::string_view name) = 0;

  // The backend's name as OpenTelemetry's `db.system` attribute spells it (e.g. "rocksdb"), for
  // traces, logs and error messages. A literal; valid for the store's lifetime. Required.
  virtual absl::string_view backend_name() const = 0;

  // ---------------------------------------------------------------------------------------------
  // OPTIONAL, the decision path: how an Operation is decided. The defaults decide with
  // storage/algebra in C++ over Update (storage/apply.h); a backend overrides them to decide
  // elsewhere or to write less often. Each override must give the outcome the default would.

  // Decides `op` with storage/algebra and applies it, all-or-nothing, as one transaction: when
  // every limit is allowed and the mode is not kCheck, every limit's tokens are taken; otherwise
  // nothing is written. The time of the decision is read inside the transaction, so it is never
  // older than a state's own time unless the clock itself steps back (the algebra's guard then
  // applies). `clock` is that time's source, except for a store that decides inside a remote
  // engine, which uses the engine's clock (documented by that store). `clock` need only live for
  // the call. A store error comes back as the store's status; nothing was taken then.
  // REQUIRES: `op` has no records and no settlements; those go through ApplyRecorded.
  // Default: one Update running the algebra (ApplyWithUpdate, storage/apply.h). Override to decide
  // where the states live (Redis: one server-side function call instead of a read and a write).
  virtual absl::StatusOr<Outcome> Apply(const Operation& op, const Clock& clock);

  // Apply, answered through `done` instead of a return value, for a caller whose thread must not
  // wait for a write (a server thread that handles other calls meanwhile). `done` gets what Apply
  // would return, once the decision is as durable as Apply makes it: before ApplyAsync returns,
  // or later on a thread of the store's (RocksDB: the thread that wrote the decision's WAL group,
  // shared with the decisions queued meanwhile; Redis: the client's I/O thread), outside the
  // store's locks. `done` must not wait for the store (on the store's I/O thread that would wait
  // forever); it may hand further store work to another thread. `op` and `clock` need only live
  // for the call. REQUIRES: as for Apply.
  // Default: done(Apply(op, clock)) before returning. Override when the store can answer later
  // without holding the calling thread (then also override ApplyAsyncMayWait).
  virtual void ApplyAsync(const Operation& op, const Clock& clock, ApplyDone done);

  // Whether ApplyAsync of an operation without records can wait on the calling thread for a peer
  // (a network round trip): a server then calls it from a thread of its own, not from one of
  // gRPC's few threads. Constant for the store's lifetime.
  // Default: true (the default ApplyAsync is Apply, which may wait). Override with false when
  // ApplyAsync never waits for a peer (a local store, or one that answers from its I/O thread).
  virtual bool ApplyAsyncMayWait() const { return true; }

  // Applies independent operations, as Apply would one after the other in order: each is
  // all-or-nothing on its own and sees the effect of the earlier ones of the batch; one result per
  // operation, in order (an operation's store error fails that operation only). Every result is
  // returned only once its operation is as durable as Apply makes it. REQUIRES: the operations
  // carry no records and no settlements.
  // Default: Apply for each operation, in order. Override when the store can decide and write the
  // whole batch together (RocksDB: one WAL write), so a batch costs far less than its operations.
  virtual std::vector<absl::StatusOr<Outcome>> ApplyBatch(absl::Span<const Operation> ops,
                                                          const Clock& clock);

  // Whether ApplyBatch decides on this machine, never waiting for a peer (a network round trip):
  // a server thread may then decide a burst of calls with one ApplyBatch (one write for all of
  // them) instead of one ApplyAsync each. Constant for the store's lifetime.
  // Default: false. Override with true for a local store.
  virtual bool BatchesDecideLocally() const { return false; }

  // While a WritesHereScope lives, ApplyAsync on its thread may do the store's write itself and
  // call `done` before returning (RocksDB: lead the WAL group here when no write is in progress)
  // instead of handing the write to a thread of the store's and returning at once. For a thread
  // that serves requests one after another and would otherwise pay a hand-off per decision (the
  // server's request handlers: two thread wake-ups and the context switches of each group,
  // costlier than the write when the threads share a core); decisions made while a write is in
  // progress still join the next group. Without the scope, ApplyAsync hands the write over, so a
  // caller that keeps many decisions in flight overlaps its work with the store's writes. Nests.
  // A store that has no such hand-off ignores it.
  //
  // Thread safety: a scope belongs to the thread that made it (a thread-local flag).
  class WritesHereScope {
   public:
    WritesHereScope();
    ~WritesHereScope();
    WritesHereScope(const WritesHereScope&) = delete;
    WritesHereScope& operator=(const WritesHereScope&) = delete;

    // Whether the calling thread is inside a WritesHereScope.
    static bool Active();

   private:
    const bool outer_;
  };

  // ---------------------------------------------------------------------------------------------
  // OPTIONAL, idempotency records (receipts, request_id). The default keeps none: an operation
  // with records is refused with UNIMPLEMENTED. Override UpdateWithRecords to keep them; the
  // default ApplyRecorded then works as it is.

  // Update with idempotency records: reads `keys` and `records` (a record whose expires_at_us is
  // not after `clock`'s time reads as absent), decides and writes states and records as one
  // transaction, with the guarantees of Update. REQUIRES: keys distinct, records distinct.
  // Default: UNIMPLEMENTED naming backend_name() (the store keeps no records). Override to keep
  // records (in the transaction of the states they guard).
  virtual absl::Status UpdateWithRecords(absl::Span<const StateKey> keys,
                                         absl::Span<const RecordSpec> records, const Clock& clock,
                                         RecordDecideFn decide);

  // Applies an operation that may carry records and settlements, with the guarantees of
  // storage/apply.h ApplyWithRecords: a present record is returned (nothing decided), else the
  // operation is decided and its records written.
  // Default: ApplyWithRecords on UpdateWithRecords (UNIMPLEMENTED where that is). Override only
  // when the keys of one operation may not meet in one transaction (a Redis Cluster), with a
  // protocol of the store's own (documented there).
  virtual absl::StatusOr<Outcome> ApplyRecorded(const Operation& op, const Clock& clock);

  // ---------------------------------------------------------------------------------------------
  // OPTIONAL, secrets.

  // A secret of the store's own, created once with `generate` and kept with the states (so it
  // survives restarts where the states do, and every server sharing the states agrees on it).
  // Concurrent first calls agree on one secret.
  // Default: UNIMPLEMENTED naming backend_name() (the store keeps none; receipts are refused).
  virtual absl::StatusOr<std::string> Secret(absl::string_view name,
                                             absl::FunctionRef<std::string()> generate);

  // ---------------------------------------------------------------------------------------------
  // OPTIONAL, runtime overrides.

  // The store's overrides of configured limits, kept beside the states
  // (storage/overrides/override_store.h); owned by the store and valid until it is destroyed.
  // Default: nullptr (the store keeps none; the override API is refused).
  virtual OverrideStore* overrides() { return nullptr; }

  // ---------------------------------------------------------------------------------------------
  // OPTIONAL, concurrency limits (storage/leases/lease.h, docs/leases.md). The default keeps no
  // leases: both methods answer UNIMPLEMENTED naming backend_name(), and the server refuses
  // concurrency limits. A store that keeps records can keep leases with
  // storage/leases/apply_lease.h (the lease set of a key as a record, in the transaction of the
  // rate limits' states); a store that decides elsewhere (Redis) does it there.

  // Decides `op` as one transaction at the store's clock (`clock`, or the engine's for a store
  // that decides in a remote engine): DecideLease on the key's lease set and, for an acquire,
  // the rate limits' decisions (storage/algebra, mode kConsume); all-or-nothing: the lease set
  // and the rate limits' states are written only when the lease decision and every rate limit
  // allow. Durable as Apply. `op` and `clock` need only live for the call.
  virtual absl::StatusOr<LeaseOutcome> ApplyLease(const LeaseOperation& op, const Clock& clock);

  // Called once with the result of ApplyLeaseAsync, which it may move from (a LeaseOutcome is
  // about 550 bytes: taken by reference, it is not moved once more into a parameter).
  using LeaseDone = absl::AnyInvocable<void(absl::StatusOr<LeaseOutcome>&&) &&>;

  // ApplyLease, calling `done` with what ApplyLease would return once the decision is as durable
  // as ApplyLease makes it, as ApplyAsync does for Apply (the same threads, the same rules for
  // `done`). `op` and `clock` need only live for the call. Default: ApplyLease, then `done`,
  // before returning (so it may wait as ApplyLease does: see ApplyAsyncMayWait). RocksDB
  // overrides it to free the calling thread during the WAL write.
  virtual void ApplyLeaseAsync(const LeaseOperation& op, const Clock& clock, LeaseDone done);

  // Applies concurrent lease operations (calls none of which is answered before the batch is:
  // a serving burst's) as ApplyLease would one after the other, each all-or-nothing on its own
  // and seeing the effect of those decided before it; one result per operation, in the order
  // given. Being concurrent, any order of them is one the callers could have seen: a store may
  // choose it. Default: ApplyLease for each, in order. RocksDB decides every operation that is not
  // an acquire first, then the acquires (each kind in the order given), and waits once: one WAL
  // write for the batch. The operations need only live for the call.
  virtual std::vector<absl::StatusOr<LeaseOutcome>> ApplyLeaseBatch(
      absl::Span<const LeaseOperation* const> ops, const Clock& clock);

  // Ends every lease of every key of concurrency limit `name` of `source`. Returns how many keys
  // held a lease at `now_us` (neither released nor expired; Redis judges at its primary's time,
  // as its decisions do), the same on every store whatever released or expired leases a set
  // still keeps. Default: UNIMPLEMENTED.
  virtual absl::StatusOr<uint64_t> DeleteAllLeases(LimitSource source, absl::string_view name,
                                                   int64_t now_us);

  // The leak sweep's search (docs/leases.md, the leak detector): the concurrency keys whose lease
  // sets hold a lease that expired unreleased by `now_us` (held, never released, its expiry
  // passed) and is still kept (kLeaseRecordMarginMicros past its expiry, storage/leases/
  // apply_lease.h), one page of them, from `cursor` on ("" for the first page). It only reads:
  // the caller makes a decision on each key, which drops and counts the key's expired leases
  // once, whoever else decides on it meanwhile. A page may name a key whose leases a decision
  // has dropped since (its decision then finds none), and a key may appear on two pages; a lease
  // that expires while the pages are read may be missed until the next search. `next` is the
  // next page's cursor, "" after the last page. A page reads a bounded part of the store, so
  // that a search never holds up decisions for long. Default: UNIMPLEMENTED (no leases kept).
  struct LeakedLeaseKeys {
    std::vector<StateKey> keys;
    std::string next;
  };
  virtual absl::StatusOr<LeakedLeaseKeys> FindLeakedLeaseKeys(absl::string_view cursor,
                                                              int64_t now_us);

  // ---------------------------------------------------------------------------------------------
  // OPTIONAL, lifecycle and maintenance. Called by the server's background threads, never on the
  // decision path.

  // Whether the store can take decisions now: OK, or the error that stops it (UNAVAILABLE after
  // a failed write or a background error, or when closed). Checks that a write goes through
  // and, when the store is failing, tries to recover (so calling it periodically is what brings
  // a store back after, say, a full disk was cleared).
  // Default: a Get of one key. Override when a read does not show that writes go through.
  virtual absl::Status Health();

  // Drops states that have refilled (equivalent to no state) now, instead of waiting for
  // writes to trigger it. Called periodically by the server.
  // Default: nothing to do (right for a store whose states expire by themselves, or that keeps
  // them only in memory).
  virtual absl::Status CollectGarbage() { return absl::OkStatus(); }

  // Makes everything written durable and releases the store; later calls fail with
  // UNAVAILABLE. Idempotent. Default: nothing to release (the store closes in its destructor).
  virtual absl::Status Close() { return absl::OkStatus(); }

  // The board replicas sharing this store coordinate through (storage/replica_board.h), or null
  // when the store belongs to one process. Valid while the store lives. Default: none.
  virtual ReplicaBoard* replica_board() { return nullptr; }

  // ---------------------------------------------------------------------------------------------
  // OPTIONAL, monitoring. Called when the server starts; the `read` functions are called when
  // metrics are scraped, from any thread, and must not block on a decision.

  // A number the store reports for monitoring.
  struct Gauge {
    std::string name;  // metric name without the "ratelimit_" prefix, e.g. "store_live_states"
    std::string help;
    std::function<double()> read;  // valid while the store lives; 0 once closed
  };
  // The store's own gauges. Default: none.
  virtual std::vector<Gauge> Gauges() { return {}; }

  // A labelled metric the store reports: one sample per label value tuple (e.g. per Redis
  // primary).
  struct MetricFamily {
    std::string name;  // without the "ratelimit_" prefix, e.g. "redis_round_trips_total"
    std::string help;
    std::string type;                 // "counter" or "gauge"
    std::vector<std::string> labels;  // label names; may be empty
    using Samples = std::vector<std::pair<std::vector<std::string>, double>>;
    std::function<Samples()> read;  // valid while the store lives
  };
  // The store's labelled metrics. Default: none.
  virtual std::vector<MetricFamily> MetricFamilies() { return {}; }
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_STATE_STORE_H_
