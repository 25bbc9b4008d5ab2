#ifndef RATELIMIT_STORAGE_STATE_STORE_H_
#define RATELIMIT_STORAGE_STATE_STORE_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "storage/algebra.h"
#include "storage/clock.h"

namespace ratelimit {

// Identifies one state: a limit name and a key within it, in the namespace of the limit's source
// (states of different sources never meet, whatever their names).
struct StateKey {
  std::string name;
  std::string key;
  LimitSource source = LimitSource::kDefined;

  friend bool operator==(const StateKey&, const StateKey&) = default;
};

// One limit of an Operation.
struct LimitOp {
  StateKey key;
  // REQUIRES: ValidateLimitConfig(config) is OK.
  LimitConfig config;
  // REQUIRES: finite and > 0.
  double count = 1;
  // Set: this limit settles an earlier take (storage/algebra Settle) instead of being decided
  // by the operation's mode; `count` is ignored. A settlement is always allowed.
  struct Settlement {
    double taken = 0;  // REQUIRES: finite and > 0
    double used = 0;   // REQUIRES: finite and >= 0
    int64_t taken_at_us = 0;
    // The balance the take left (storage/algebra Settle); unset when not known.
    std::optional<double> value_after_take = std::nullopt;
  };
  std::optional<Settlement> settle = std::nullopt;
};

// An idempotency record, decided atomically with an Operation: when one of an operation's
// records is present (and not expired), the store returns it without deciding or writing
// anything; when none is, the store decides and writes the states and every record together.
struct RecordSpec {
  // Opaque key, in one namespace shared by all records of the store. 1..256 bytes.
  std::string key;
  // After this time the record reads as absent and the store may drop it.
  int64_t expires_at_us = 0;
};

struct Outcome;

// A whole request, stated declaratively so that a store can decide it where the states live.
struct Operation {
  // 1..N limits, in request order. The same key may appear more than once: it names one state,
  // and each later mention decides against the state the earlier ones left.
  absl::Span<const LimitOp> limits;
  Mode mode = Mode::kConsume;
  // Idempotency records (none by default); see RecordSpec. Not with kCheck.
  absl::Span<const RecordSpec> records = {};
  // The bytes stored in every record of `records`, computed from the outcome inside the
  // transaction (possibly more than once: it must be a pure function of the outcome and what it
  // captured). Unset: empty bytes.
  std::function<std::string(const Outcome&)> record_value = nullptr;
};

// One decision per limit of an operation; inline for the common single-limit request.
using Decisions = absl::InlinedVector<Decision, 1>;

// What a store answers to an Operation.
struct Outcome {
  // Every limit allowed (and, unless checking, every one was taken, all in one transaction).
  bool allowed = false;
  // One per limit, in operation order, as storage/algebra `Decide` gives it for the state the
  // limit saw and `now_us`. When the operation is denied, nothing is taken anywhere, and the
  // `value` of each limit that alone would have been allowed is its balance as it is.
  Decisions decisions;
  // The time the decision was made at.
  int64_t now_us = 0;
  // Set when a record of the operation was already present: the index of the first such record
  // in Operation::records and its stored bytes. Nothing was decided then (`decisions` is empty).
  std::optional<size_t> existing_record = std::nullopt;
  std::string existing_value = std::string();
};

// Where the (value, ts) states live. Every implementation guarantees:
//  - Update is atomic and isolated: the states `decide` sees are not changed by anyone else
//    until its writes are applied, and its writes are applied all together or not at all.
//  - A successful Update is durable to the implementation's promise (RocksDB: in the WAL).
//  - Errors come back as a status (UNAVAILABLE for I/O trouble); nothing throws.
//  - Once a write fails (full disk, I/O error), writes are refused with UNAVAILABLE until
//    Health() finds the store writable again; a failed write was never applied.
//
// Thread safety: all methods may be called concurrently from any number of threads.
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

  virtual ~StateStore() = default;

  // Reads, decides and writes `keys` as one transaction. REQUIRES: keys are distinct, 1..N.
  virtual absl::Status Update(absl::Span<const StateKey> keys, DecideFn decide) = 0;

  // Decides `op` with storage/algebra and applies it, all-or-nothing, as one transaction: when
  // every limit is allowed and the mode is not kCheck, every limit's tokens are taken; otherwise
  // nothing is written. The time of the decision is read inside the transaction, so it is never
  // older than a state's own time unless the clock itself steps back (the algebra's guard then
  // applies). `clock` is that time's source, except for a store that decides inside a remote
  // engine, which uses the engine's clock (documented by that store). `clock` need only live for
  // the call. A store error comes back as the store's status; nothing was taken then.
  // Default: Update with the algebra, in C++ (storage/apply.h). REQUIRES: `op` has no records
  // and no settlements; those go through ApplyWithRecords (storage/apply.h), on
  // UpdateWithRecords.
  virtual absl::StatusOr<Outcome> Apply(const Operation& op, const Clock& clock);

  // Called once with the result of ApplyAsync.
  using ApplyDone = absl::AnyInvocable<void(absl::StatusOr<Outcome>) &&>;

  // Apply, answered through `done` instead of a return value, for a caller whose thread must not
  // wait for a write (a server thread that handles other calls meanwhile). `done` gets what Apply
  // would return, once the decision is as durable as Apply makes it: before ApplyAsync returns,
  // or later on a thread of the store's (RocksDB: the thread that wrote the decision's WAL group,
  // shared with the decisions queued meanwhile; Redis: the client's I/O thread), outside the
  // store's locks. `done` must not wait for the store (on the store's I/O thread that would wait
  // forever); it may hand further store work to another thread. `op` and `clock` need only live
  // for the call. REQUIRES: as for Apply. Default: done(Apply(op, clock)) before returning.
  virtual void ApplyAsync(const Operation& op, const Clock& clock, ApplyDone done);
  // Whether ApplyAsync of an operation without records can wait on the calling thread for a peer
  // (a network round trip): a server then calls it from a thread of its own, not from one of
  // gRPC's few threads. Default (ApplyAsync is Apply): true.
  virtual bool ApplyAsyncMayWait() const { return true; }

  // Whether ApplyBatch decides on this machine, never waiting for a peer (a network round trip):
  // a server thread may then decide a burst of calls with one ApplyBatch (one write for all of
  // them) instead of one ApplyAsync each. Default: false.
  virtual bool BatchesDecideLocally() const { return false; }

  // While a WritesHereScope lives, ApplyAsync on its thread may do the store's write itself and
  // call `done` before returning (RocksDB: lead the WAL group here when no write is in progress)
  // instead of handing the write to a thread of the store's and returning at once. For a thread
  // that serves requests one after another and would otherwise pay a hand-off per decision (the
  // server's request handlers: two thread wake-ups and the context switches of each group,
  // costlier than the write when the threads share a core); decisions made while a write is in
  // progress still join the next group. Without the scope, ApplyAsync hands the write over, so a
  // caller that keeps many decisions in flight overlaps its work with the store's writes. Nests.
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

  // Applies independent operations, as Apply would one after the other in order: each is
  // all-or-nothing on its own and sees the effect of the earlier ones of the batch; one result per
  // operation, in order (an operation's store error fails that operation only). A store may
  // decide and write the whole batch together (RocksDB: one WAL write), so a batch costs far less
  // than its operations one by one; every result is returned only once its operation is as
  // durable as Apply makes it. REQUIRES: the operations carry no records and no settlements.
  // Default: Apply for each operation, in order.
  virtual std::vector<absl::StatusOr<Outcome>> ApplyBatch(absl::Span<const Operation> ops,
                                                          const Clock& clock);

  // Called inside UpdateWithRecords with the current states (as DecideFn) and the stored value of
  // each record (nullopt when absent or expired). It fills `writes` like DecideFn and
  // `record_writes` (same size as the records, initially nullopt) with the values of the records
  // to store. Same purity rules as DecideFn.
  using RecordDecideFn = absl::FunctionRef<absl::Status(
      absl::Span<const std::optional<State>> current,
      absl::Span<const std::optional<std::string>> records, absl::Span<std::optional<State>> writes,
      absl::Span<std::optional<std::string>> record_writes)>;

  // Update with idempotency records: reads `keys` and `records` (a record whose expires_at_us is
  // not after `clock`'s time reads as absent), decides and writes states and records as one
  // transaction. REQUIRES: keys distinct, records distinct. Default: UNIMPLEMENTED (the store
  // keeps no records).
  virtual absl::Status UpdateWithRecords(absl::Span<const StateKey> keys,
                                         absl::Span<const RecordSpec> records, const Clock& clock,
                                         RecordDecideFn decide);

  // Applies an operation that may carry records and settlements, with the guarantees of
  // storage/apply.h ApplyWithRecords: a present record is returned (nothing decided), else the
  // operation is decided and its records written. A store whose keys may not meet in one
  // transaction (a Redis Cluster) overrides it with a protocol of its own (documented there).
  // Default: ApplyWithRecords on UpdateWithRecords.
  virtual absl::StatusOr<Outcome> ApplyRecorded(const Operation& op, const Clock& clock);

  // A secret of the store's own, created once with `generate` and kept with the states (so it
  // survives restarts where the states do). Default: UNIMPLEMENTED (the store keeps none).
  virtual absl::StatusOr<std::string> Secret(absl::string_view name,
                                             absl::FunctionRef<std::string()> generate);

  // The current state of `key`, or nullopt when it has none.
  virtual absl::StatusOr<std::optional<State>> Get(const StateKey& key) = 0;

  // Removes the state of one key (it becomes full). Returns how many states it removed: 1, or 0
  // when the key had none (not an error).
  virtual absl::StatusOr<uint64_t> Delete(const StateKey& key) = 0;

  // Removes the state of every key of limit `name` of `source`, and nothing else. Returns how
  // many states it removed.
  virtual absl::StatusOr<uint64_t> DeleteAll(LimitSource source, absl::string_view name) = 0;

  // Whether the store can take decisions now: OK, or the error that stops it (UNAVAILABLE after
  // a failed write or a background error, or when closed). Checks that a write goes through
  // and, when the store is failing, tries to recover (so calling it periodically is what brings
  // a store back after, say, a full disk was cleared). Default: a read of one key.
  virtual absl::Status Health() { return Get(StateKey{"ratelimit.health", "probe"}).status(); }

  // Drops states that have refilled (equivalent to no state) now, instead of waiting for
  // writes to trigger it. Called periodically by the server. Default: nothing to do.
  virtual absl::Status CollectGarbage() { return absl::OkStatus(); }

  // Makes everything written durable and releases the store; later calls fail with
  // UNAVAILABLE. Idempotent. Default: nothing to release.
  virtual absl::Status Close() { return absl::OkStatus(); }

  // A number the store reports for monitoring, read when metrics are scraped.
  struct Gauge {
    std::string name;  // metric name without the "ratelimit_" prefix, e.g. "store_live_states"
    std::string help;
    std::function<double()> read;  // valid while the store lives; 0 once closed
  };
  // The store's own gauges. Default: none.
  virtual std::vector<Gauge> Gauges() { return {}; }

  // A labelled metric the store reports, read when metrics are scraped: one sample per label
  // value tuple (e.g. per Redis primary).
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

  // The backend's name as OpenTelemetry's `db.system` attribute spells it (e.g. "rocksdb"), for
  // traces and logs. A literal; valid for the store's lifetime.
  virtual absl::string_view backend_name() const = 0;
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_STATE_STORE_H_
