#ifndef RATELIMIT_STORAGE_ROCKSDB_ROCKSDB_STATE_STORE_H_
#define RATELIMIT_STORAGE_ROCKSDB_ROCKSDB_STATE_STORE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "storage/clock.h"
#include "storage/rocksdb/group_commit.h"
#include "storage/rocksdb/lease_set_cache.h"
#include "storage/rocksdb/rocksdb_info_log.h"
#include "storage/rocksdb/state_cache.h"
#include "storage/rocksdb/stripe_locks.h"
#include "storage/state_store.h"

namespace rocksdb {
class ColumnFamilyHandle;
class CompactionFilter;
class DB;
class Env;
class FileSystem;
class Status;
class WriteBatch;
}  // namespace rocksdb

namespace ratelimit {

class LeaseWrites;           // lease_writes.h
class RocksDbErrorTracker;   // rocksdb_recovery.h
class RocksDbOverrideStore;  // rocksdb_override_store.h

struct RocksDbStateStoreOptions {
  // The data directory; created if missing. Required.
  std::string path;
  // false (default): every decision is written to the WAL before Update returns, so a killed
  // process loses nothing (the OS has the bytes). true: the WAL is also fsynced, so a power
  // failure loses nothing either, at the cost of one fsync per write group.
  bool sync = false;
  // The clock garbage collection compares `full_at` against. Default: the system clock. Not
  // owned; must outlive the store.
  const Clock* clock = &SystemClock::Default();
  // Mutex stripes serializing decisions per key. Default 4096.
  size_t lock_stripes = 4096;
  // Block cache for the states column family. Default 64 MiB.
  size_t block_cache_bytes = size_t{64} << 20;
  // Memory bound of the cache of hot states (storage/rocksdb/state_cache.h), in bytes. Default 256
  // MiB. 0: no state is kept in memory beyond the decisions waiting for their WAL write.
  size_t state_cache_bytes = size_t{256} << 20;
  // Memory bound of the cache of lease sets (storage/rocksdb/lease_set_cache.h), in bytes.
  // Default 64 MiB. 0: only the sets waiting for their WAL write are kept in memory.
  size_t lease_cache_bytes = size_t{64} << 20;
  // false (default): a WAL that does not replay cleanly (a truncated or corrupted record) makes
  // Open fail with DATA_LOSS, since acknowledged decisions would be lost. true: Open then
  // recovers up to the last consistent record (point-in-time recovery) and drops the rest;
  // open_report() says so.
  bool salvage_wal = false;
  // The file system RocksDB uses. Default (null): the operating system's. Tests inject
  // wrappers that fail on command.
  std::shared_ptr<rocksdb::FileSystem> file_system;
  // true (default): WAL files are written through a shared memory mapping
  // (storage/rocksdb/mapped_wal_file_system.h), as durable as a write(2) per group without the
  // system call; they grow by `wal_map_chunk_bytes` at a time. false: one write(2) per group.
  bool map_wal = true;
  size_t wal_map_chunk_bytes = size_t{1} << 20;
  // Called by the thread about to write a group of decisions to the WAL, before it writes (tests
  // hold a write back with it). Default: none.
  std::function<void()> before_group_write;
};

// What Open found and did, for the operator's log.
struct RocksDbOpenReport {
  // The WAL files replayed and the sequence number recovered to.
  std::string recovery;
  // The WAL was corrupt and was salvaged: writes after the corruption point are lost.
  bool salvaged = false;
  // Things the operator should fix, e.g. a data directory other local users can read.
  std::vector<std::string> warnings;
};

// The production StateStore, on RocksDB.
//
// Layout: column family "states" holds the states (see state_codec.h); "meta" holds the format
// version and the store's secrets; "records" holds idempotency records (value: expires_at_us as
// int64 little-endian, then the record's bytes; a compaction filter drops expired ones);
// "overrides" holds the runtime overrides and their audit history (rocksdb_override_store.h);
// "default" is unused. A hot key's memtable entry is updated in place. Decisions on one
// key are serialized by a striped mutex; a multi-key Update locks its stripes in increasing order
// (so two Updates never deadlock), reads the states (from the cache of hot states, else
// RocksDB), decides, queues its writes for the next group write (storage/rocksdb/group_commit.h)
// and puts its new states into the cache, where later decisions on the keys see them at once; it
// then releases the stripes and returns once its group is in the WAL (and once every state it read
// is). Decisions made meanwhile by other threads share one WAL write. A failed group write fails
// every decision queued until then and invalidates the whole cache, so a state that was never
// written is never read again. UpdateWithRecords keeps its stripes until its write is in the
// WAL (records are not cached: a retry must find the record in RocksDB). A compaction filter
// drops states whose `full_at` has passed: they are equivalent to no state, so idle keys do not
// accumulate on disk; CollectGarbage() runs such a compaction on demand, for a store that sees
// too few writes to compact by itself.
//
// Failures (handled in rocksdb_recovery.{h,cc}): once a write fails or RocksDB reports a
// background error (a full disk, an I/O error), Update, Delete and DeleteAll fail at once with
// UNAVAILABLE without touching RocksDB, and Health() reports the error; reads go on. Once a small
// file can be written and synced in the data directory again, Health() closes the database without
// touching its WAL and reopens it (not DB::Resume(), which never succeeds after errors RocksDB
// deems unrecoverable, such as a failed WAL switch; and RocksDB asserts if a WAL writer that failed
// is used again). The reopen replays the WAL, which holds every acknowledged write; once it and a
// probe write succeed, writes are accepted again. A failed write was never applied.
//
// Files: the data directory is created 0700; an existing one that group or others can access
// is reported in open_report().warnings. RocksDB creates its files with the process umask
// (the server sets 077).
//
// Thread safety: all methods are thread-safe.
class RocksDbStateStore final : public StateStore {
 public:
  // Opens or creates the store. A directory written with state format 1 is upgraded to format
  // 2 first (every state moves to the limits file's namespace; see state_codec.h and
  // UpgradedStates()). Fails with FAILED_PRECONDITION when the directory was written with
  // another format version, DATA_LOSS when a file (e.g. the WAL) is corrupt and
  // salvage_wal is off, UNAVAILABLE when RocksDB cannot open it.
  static absl::StatusOr<std::unique_ptr<RocksDbStateStore>> Open(
      const RocksDbStateStoreOptions& options);

  RocksDbStateStore(const RocksDbStateStore&) = delete;
  RocksDbStateStore& operator=(const RocksDbStateStore&) = delete;
  // Calls Close().
  ~RocksDbStateStore() override;

  // When Open upgraded the directory from format 1: how many states it moved; else nullopt.
  std::optional<uint64_t> UpgradedStates() const { return upgraded_states_; }

  absl::Status Update(absl::Span<const StateKey> keys, DecideFn decide) override;
  // Records live in the "records" column family, under the stripes of their keys, written in
  // the same WriteBatch as the states.
  absl::Status UpdateWithRecords(absl::Span<const StateKey> keys,
                                 absl::Span<const RecordSpec> records, const Clock& clock,
                                 RecordDecideFn decide) override;
  // Leases are records of the records column family, one per lease (lease_record.h), in the WAL
  // like every record, so they survive a restart. A lease decision takes the stripes of its
  // key's set (LeaseRecordKey) and of its rate limits' states, reads the set from the cache of
  // lease sets (else RocksDB's records under the key's prefix, then cached) and the states as
  // Update does, decides (DecideLeaseOperation), queues the records of the leases it changed with
  // the states, caches the new set with its ticket and frees the stripes before the WAL write:
  // decisions on a hot key share WAL groups as Update's do, and are answered once their group (and
  // every group whose set or state they read) is in the WAL. A retried acquire finds its lease in
  // the set (from the cache too), and waits for that set's write before it is answered.
  absl::StatusOr<LeaseOutcome> ApplyLease(const LeaseOperation& op, const Clock& clock) override;
  // ApplyLease decided on the calling thread and answered as ApplyAsync answers.
  void ApplyLeaseAsync(const LeaseOperation& op, const Clock& clock, LeaseDone done) override;
  // Every operation decided and queued (each under its own stripes), then one wait: the batch
  // usually goes to the WAL in one write. The operations are concurrent calls (StateStore), and
  // every one that is not an acquire is decided before the acquires, each kind in the order
  // given: an acquire finds the slots and records the batch's releases freed.
  std::vector<absl::StatusOr<LeaseOutcome>> ApplyLeaseBatch(
      absl::Span<const LeaseOperation* const> ops, const Clock& clock) override;
  // A prefix scan of the records column family, deleting each lease set under its stripe (ordered
  // with ApplyLease on its key); counts those not expired holding a lease.
  absl::StatusOr<uint64_t> DeleteAllLeases(LimitSource source, absl::string_view name,
                                           int64_t now_us) override;
  // A scan of the lease records' keys in key order, at most kLeakPageRecords of them a page (free
  // records count too); the cursor is the record key to read from. The scan reads no value (an
  // in-place update may rewrite it meanwhile): each key it finds has its set read under its
  // stripe, from the cache of lease sets or its records, as a decision reads it (a set read
  // from its records is not cached: a pass must not evict the sets decisions use).
  absl::StatusOr<LeakedLeaseKeys> FindLeakedLeaseKeys(absl::string_view cursor,
                                                      int64_t now_us) override;
  static constexpr size_t kLeakPageRecords = 4096;
  // Kept in the "meta" column family (written with sync).
  absl::StatusOr<std::string> Secret(absl::string_view name,
                                     absl::FunctionRef<std::string()> generate) override;
  absl::StatusOr<std::optional<State>> Get(const StateKey& key) override;
  absl::StatusOr<uint64_t> Delete(const StateKey& key) override;
  absl::StatusOr<uint64_t> DeleteAll(LimitSource source, absl::string_view name) override;
  // OK when a probe write goes through; while failing, reopens the database once the disk
  // takes writes again (see above).
  absl::Status Health() override;
  // Flushes and compacts the states column family, without blocking automatic compactions.
  absl::Status CollectGarbage() override;
  // Flushes memtables and the WAL and closes the database. Later calls of any method fail with
  // UNAVAILABLE. Idempotent.
  absl::Status Close() override;
  // Live states, compaction debt, memtable size, write stalls, SST bytes, the state cache's
  // entries and bytes.
  std::vector<Gauge> Gauges() override;
  // Counters: the state cache's hits, misses and evictions; group commit's WAL writes and the
  // decisions they carried.
  std::vector<MetricFamily> MetricFamilies() override;
  absl::string_view backend_name() const override { return "rocksdb"; }
  // In the "overrides" column family (rocksdb_override_store.h).
  OverrideStore* overrides() override;
  // One pass under each operation's stripes, then one wait: the whole batch usually goes to the
  // WAL in one write.
  std::vector<absl::StatusOr<Outcome>> ApplyBatch(absl::Span<const Operation> ops,
                                                  const Clock& clock) override;
  // Decides and queues the operation under its stripes, then returns without waiting for the
  // WAL: the store's writer thread writes it, in one group with the decisions queued meanwhile,
  // and calls `done` once it is written (or with the error of its failed write).
  void ApplyAsync(const Operation& op, const Clock& clock, ApplyDone done) override;
  // A local store: ApplyAsync waits for no peer (at most for a read of its own disk).
  bool ApplyAsyncMayWait() const override { return false; }
  bool BatchesDecideLocally() const override { return true; }

  // Group commit counters (WAL writes vs decisions) and the state cache, for tests and metrics.
  GroupCommit::Stats group_commit_stats() const { return group_.stats(); }
  // State writes left out of group writes because a later decision of the same group wrote the
  // same key (storage/rocksdb/write_coalesce.h).
  uint64_t coalesced_writes() const { return coalesced_.load(std::memory_order_relaxed); }
  // Lease records written by lease decisions (a record a run changed more than once counts once).
  uint64_t lease_record_writes() const {
    return lease_record_writes_.load(std::memory_order_relaxed);
  }
  // Lines of RocksDB's info log the disk refused (see rocksdb_info_log.h).
  uint64_t info_log_lines_dropped() const { return info_log_ ? info_log_->dropped() : 0; }
  const StateCache& state_cache() const { return *cache_; }
  const LeaseSetCache& lease_cache() const { return *lease_cache_; }

  const RocksDbOpenReport& open_report() const { return open_report_; }

  // Flushes and compacts the states column family (garbage collection runs during compaction).
  absl::Status CompactAll();

  // RocksDB's estimate of the number of stored states.
  uint64_t EstimateNumStates();
  // Bytes of SST files of the states column family.
  uint64_t LiveSstBytes();
  // Reads a RocksDB integer property of the states column family (e.g.
  // "rocksdb.estimate-pending-compaction-bytes"); 0 if unavailable.
  uint64_t IntProperty(const std::string& property);
  // The same of the records column family (lease sets, remembered answers, settlements).
  uint64_t RecordsIntProperty(const std::string& property);

 private:
  RocksDbStateStore(const RocksDbStateStoreOptions& options);
  absl::Status PrepareDirectory();
  // Flushes the states' memtable and compacts every level of the states (garbage collection runs
  // during compaction); `exclusive`: automatic compactions wait meanwhile.
  absl::Status FlushAndCompact(bool exclusive);
  // Opens the database; `after_failure`: a reopen after a write or background error.
  absl::Status OpenDbLocked(bool after_failure) ABSL_EXCLUSIVE_LOCKS_REQUIRED(db_mu_);
  // Closes the database, flushing the WAL and memtables unless a write failed; db_ becomes null.
  absl::Status CloseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(db_mu_);
  // The error for a call made while db_ is null.
  absl::Status NotOpenLocked() ABSL_SHARED_LOCKS_REQUIRED(db_mu_);
  // Writes the health probe key (a failure stops writes like any failed write).
  absl::Status ProbeWriteLocked() ABSL_SHARED_LOCKS_REQUIRED(db_mu_);
  // The stripes of `keys` (and of `records`), sorted and distinct, and the keys' stored names.
  static void StripesAndNames(const StripedMutex& stripes, absl::Span<const StateKey> keys,
                              absl::Span<const RecordSpec> records,
                              absl::InlinedVector<size_t, 4>& out,
                              absl::InlinedVector<std::string, 4>& encoded);
  // A decision queued for the WAL: what its reply waits for (ticket 0: nothing) and the
  // group-commit epoch it read its states in.
  struct Pending {
    uint64_t ticket = 0;
    uint64_t epoch = 0;
  };
  // Reads the states of `keys` (stored under `encoded`), decides, and queues the decision's
  // states: the body of Update, under the keys' stripes.
  absl::StatusOr<Pending> DecideLocked(absl::Span<const StateKey> keys,
                                       absl::Span<const std::string> encoded, DecideFn& decide)
      ABSL_SHARED_LOCKS_REQUIRED(db_mu_) ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripes_);
  // Appends `writes` (states under `encoded`; `fill_more` adds further entries, e.g. records) to
  // the pending group and puts the states into the cache as queued. Returns the ticket (0:
  // nothing to write).
  absl::StatusOr<uint64_t> QueueLocked(uint64_t epoch, absl::Span<const std::string> encoded,
                                       absl::Span<const std::optional<State>> writes,
                                       absl::FunctionRef<void(rocksdb::WriteBatch&)> fill_more)
      ABSL_SHARED_LOCKS_REQUIRED(db_mu_) ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripes_);
  // Waits until `pending` is in the WAL, writing groups when no other thread is.
  absl::Status WaitLocked(const Pending& pending) ABSL_SHARED_LOCKS_REQUIRED(db_mu_);
  // Whether `pending` needs no wait: nothing to write, or written with no failure since.
  bool DurableLocked(const Pending& pending) ABSL_SHARED_LOCKS_REQUIRED(db_mu_);
  // Writes one group to the WAL (the group commit's WriteFn); a failure stops writes.
  absl::Status WriteGroupLocked(rocksdb::WriteBatch& batch) ABSL_SHARED_LOCKS_REQUIRED(db_mu_);
  // Decides `op` under its stripes into `outcome` and queues its writes.
  absl::StatusOr<Pending> DecideOperationLocked(const Operation& op, const Clock& clock,
                                                Outcome& outcome)
      ABSL_SHARED_LOCKS_REQUIRED(db_mu_);
  // Decides consecutive operations of a batch under the stripes of all their keys, in order (a
  // later one reads the states the earlier ones decided) at one time read under those stripes,
  // and queues the last state of each key with one Append. Sets results[i] and pending[i] for
  // each operation.
  void DecideChunkLocked(absl::Span<const Operation> ops, const Clock& clock,
                         absl::Span<absl::StatusOr<Outcome>> results, absl::Span<Pending> pending)
      ABSL_SHARED_LOCKS_REQUIRED(db_mu_);
  // The first half of ApplyAsync and ApplyLeaseAsync: under db_mu_ (shared), unless writes are
  // refused, runs `decide` (which decides under its stripes and queues). Returns the ticket to
  // answer after (0: durable already), or the refusal or the decision's error.
  absl::StatusOr<uint64_t> DecideQueued(absl::FunctionRef<absl::StatusOr<Pending>()> decide);
  // The second half: the completion that gives `done` the decision's `outcome` once written, or
  // the error of its failed write.
  template <typename Outcome, typename Done>
  static GroupCommit::Done AnswerOnceWritten(Outcome outcome, Done done) {
    return [outcome = std::move(outcome), done = std::move(done)](absl::Status written) mutable {
      if (written.ok()) {
        std::move(done)(std::move(outcome));
      } else {
        std::move(done)(std::move(written));
      }
    };
  }
  // Calls `answer` once `ticket` is in the WAL (ticket 0: now): here, leading the group write,
  // under a WritesHereScope when no write is in progress; else on the writer thread. The tail of
  // ApplyAsync and ApplyLeaseAsync, outside every stripe.
  void AnswerWhenWritten(uint64_t ticket, GroupCommit::Done answer);
  // ApplyAsync and ApplyLeaseAsync: `decide(outcome)` (which decides under its stripes into
  // `outcome` and queues, returning its Pending) through DecideQueued, then `done` with the
  // outcome once written, or with the refusal, the decision's error or the write's.
  template <typename Outcome, typename Decide, typename Done>
  void DecideThenAnswer(Decide decide, Done done) {
    Outcome outcome;
    absl::StatusOr<uint64_t> ticket =
        DecideQueued([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {  // DecideQueued holds db_mu_
          return decide(outcome);
        });
    if (!ticket.ok()) {
      std::move(done)(ticket.status());
      return;
    }
    AnswerWhenWritten(*ticket, AnswerOnceWritten(std::move(outcome), std::move(done)));
  }
  // Decides a lease operation under its stripes into `outcome` and queues its writes (see
  // ApplyLease); one without rate limits as a run of one (DecideLeaseRunLocked).
  absl::StatusOr<Pending> DecideLeaseLocked(const LeaseOperation& op, const Clock& clock,
                                            LeaseOutcome& outcome)
      ABSL_SHARED_LOCKS_REQUIRED(db_mu_);
  // Decides ops[k] for each k of `run` (in that order: lease operations on one key without rate
  // limits, each valid) as they would be decided one after another at one time, under one hold
  // of the key's stripe: one read of its set, one queued write of every record they change, one
  // put of the set after the last (a burst of acquires and releases on a hot key). Fills
  // outcomes[k] for each; all share the returned Pending.
  absl::StatusOr<Pending> DecideLeaseRunLocked(absl::Span<const LeaseOperation* const> ops,
                                               absl::Span<const size_t> run, const Clock& clock,
                                               absl::Span<absl::StatusOr<LeaseOutcome>> outcomes)
      ABSL_SHARED_LOCKS_REQUIRED(db_mu_);
  // What every lease decision ends with, under the key's stripe: queues `states` (of `encoded`,
  // the rate limits' states an Acquire changed) and the lease records `lease_writes` holds (counted
  // in lease_record_writes(); trimmed for reuse once added), then puts the key's set after the
  // decisions, `next`, in the cache, in the object read.set (the set as read, or a spare object
  // when `had_set` is false: the key had none), with `book` (true of `next`). `wrote`: whether a
  // decision changed the set (else the entry keeps its expiry and ticket). Returns the queued
  // write's ticket.
  absl::StatusOr<uint64_t> QueueLeaseSetLocked(const std::string& record_key, uint64_t epoch,
                                               LeaseSetCache::Entry& read, bool had_set,
                                               LeaseSet next, const LeaseSetBook& book, bool wrote,
                                               absl::Span<const std::string> encoded,
                                               absl::Span<const std::optional<State>> states,
                                               LeaseWrites& lease_writes)
      ABSL_SHARED_LOCKS_REQUIRED(db_mu_) ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripes_);
  // Reads the lease set of `key` (cached under `record_key`, its LeaseRecordKey) at `now_us` into
  // `*read`, the key's cache entry (its set null: none, or its records expired; the set is the
  // cached object itself): from the cache of lease sets, else RocksDB (then cached, unless
  // `cache_it` is false). `*depends_on`: raised to the ticket of a queued set read.
  absl::Status ReadLeaseSetLocked(const StateKey& key, const std::string& record_key,
                                  uint64_t epoch, int64_t now_us, LeaseSetCache::Entry* read,
                                  uint64_t* depends_on, bool cache_it = true)
      ABSL_SHARED_LOCKS_REQUIRED(db_mu_) ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripes_);
  // Whether the set of `key` holds a lease that expired unreleased by `now_us` less than
  // kLeaseRecordMarginMicros ago: the set read under the key's stripe, as a decision reads it,
  // without caching it (FindLeakedLeaseKeys).
  absl::StatusOr<bool> HoldsLeakLocked(const StateKey& key, int64_t now_us)
      ABSL_SHARED_LOCKS_REQUIRED(db_mu_);
  // DeleteAllLeases for a batch of keys, each with the lease records the scan found for it: under
  // the keys' stripes, deletes those and the records of the key's set (queued ones included),
  // and waits for the WAL. Returns how many keys held a lease.
  absl::StatusOr<uint64_t> DeleteLeaseKeysLocked(
      const std::vector<std::pair<StateKey, std::vector<std::string>>>& keys, int64_t now_us)
      ABSL_SHARED_LOCKS_REQUIRED(db_mu_);
  // The writer thread: writes the groups of decisions whose callers did not wait (ApplyAsync).
  void WriterLoop();
  // The body of UpdateWithRecords, under the stripes of the keys and the records.
  absl::Status DecideWithRecordsLocked(absl::Span<const StateKey> keys,
                                       absl::Span<const std::string> encoded,
                                       absl::Span<const RecordSpec> records, const Clock& clock,
                                       RecordDecideFn& decide) ABSL_SHARED_LOCKS_REQUIRED(db_mu_)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripes_);
  // Reads the latest states of `keys` (under `encoded`) into `current` (nullopt: none): from
  // the cache, else from RocksDB (then cached). `*depends_on`: the largest ticket of a queued
  // state read. Keys that already hold a state in `current` (a caller's newer one) are left as
  // they are.
  absl::Status ReadStatesLocked(absl::Span<const StateKey> keys,
                                absl::Span<const std::string> encoded, uint64_t epoch,
                                absl::Span<std::optional<State>> current, uint64_t* depends_on)
      ABSL_SHARED_LOCKS_REQUIRED(db_mu_) ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripes_);
  // UNAVAILABLE while writes are stopped by an earlier failure.
  absl::Status WritesAllowed();
  // Records a failed write (stopping writes) and returns it as a status.
  absl::Status WriteFailed(const absl::Status& error);
  absl::Status UpgradeFromV1Locked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(db_mu_);
  // At open: moves the leases of every set record of an earlier version (lease_record.h) to
  // records of their own and deletes the set records, in synced batches. DATA_LOSS naming the
  // record for one that does not decode (nothing of it is lost: it stays, and the open fails).
  absl::Status MigrateLeaseSetsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(db_mu_);

  const RocksDbStateStoreOptions options_;
  // options_.file_system, or the operating system's: what the WAL mapping wraps and where the
  // disk probes write.
  const std::shared_ptr<rocksdb::FileSystem> file_system_;
  std::unique_ptr<rocksdb::Env> env_;  // over the WAL mapping, or options_.file_system, if any
  std::shared_ptr<RocksDbErrorTracker> errors_;
  // RocksDB's info log (LOG), made by the first open and kept across reopens (so that its count
  // of dropped lines is the store's).
  std::shared_ptr<RocksDbInfoLog> info_log_;
  RocksDbOpenReport open_report_;
  std::unique_ptr<rocksdb::CompactionFilter> gc_filter_;
  std::unique_ptr<rocksdb::CompactionFilter> record_filter_;
  absl::Mutex secret_mu_;  // serializes Secret's read-or-create
  // Serializes decisions per key (see above); held through StripeLocks.
  StripedMutex stripes_;
  // The pending WAL group, and the hot states (entries made under the keys' stripes).
  GroupCommit group_;
  std::unique_ptr<StateCache> cache_;
  std::unique_ptr<LeaseSetCache> lease_cache_;    // the lease sets (entries under their stripes)
  std::atomic<uint64_t> coalesced_{0};            // see coalesced_writes()
  std::atomic<uint64_t> lease_record_writes_{0};  // see lease_record_writes()

  // Guards the DB's lifetime (shared: in use; exclusive: Close).
  absl::Mutex db_mu_;
  std::unique_ptr<rocksdb::DB> db_ ABSL_GUARDED_BY(db_mu_);
  bool closed_ ABSL_GUARDED_BY(db_mu_) = false;  // by Close(); a failed reopen leaves it false
  std::vector<rocksdb::ColumnFamilyHandle*> handles_ ABSL_GUARDED_BY(db_mu_);
  rocksdb::ColumnFamilyHandle* states_ = nullptr;
  rocksdb::ColumnFamilyHandle* meta_ = nullptr;
  rocksdb::ColumnFamilyHandle* records_ = nullptr;
  rocksdb::ColumnFamilyHandle* overrides_ = nullptr;
  // The overrides, on this store's database (created by Open).
  friend class RocksDbOverrideStore;
  std::unique_ptr<RocksDbOverrideStore> override_store_;
  std::optional<uint64_t> upgraded_states_;

  // The writer thread (WriterLoop), started by Open, stopped and joined by Close.
  absl::Mutex writer_mu_;
  std::thread writer_ ABSL_GUARDED_BY(writer_mu_);
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_ROCKSDB_ROCKSDB_STATE_STORE_H_
