#ifndef RATELIMIT_STORAGE_ROCKSDB_GROUP_COMMIT_H_
#define RATELIMIT_STORAGE_ROCKSDB_GROUP_COMMIT_H_

// Group commit for the RocksDB store: decisions made concurrently append their writes to one
// pending WriteBatch and are written to the WAL together, by one DB::Write.
//
// A decision, under its keys' stripe locks, appends its writes (Append) and gets a ticket, a
// number increasing in append order; it releases its locks, then waits for its ticket (Wait).
// The first waiter that finds no write in progress becomes the leader: it takes the whole
// pending batch, writes it with one call, and marks every ticket in it resolved, in order; the
// others wake up. So a ticket is durable only once every earlier ticket is, and a decision that
// read the not-yet-written state of an earlier one (same key: it was appended earlier) is never
// acknowledged before that one is written.
//
// A failed write fails its group and every ticket appended before the failure was handled, and
// bumps the epoch: state derived from anything appended before it (the store's cache) must not be
// used again, and an Append made with an older epoch fails instead of queueing a write computed
// from such state.
//
// A caller that must not block (a gRPC handler: its thread serves other calls meanwhile) does not
// Wait: it registers a completion with OnResolved and returns. Such tickets are written by a
// writer thread of the store's (AwaitAsyncWork, then WritePending), in one group with whatever
// was appended meanwhile, so the decisions of every call a server thread handles in a row share
// one WAL write instead of one each; each completion runs once its ticket is resolved.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace rocksdb {
class WriteBatch;
}  // namespace rocksdb

namespace ratelimit {

// Thread safety: all methods are thread-safe.
class GroupCommit {
 public:
  // Writes one group; its status decides every ticket of the group.
  using WriteFn = absl::FunctionRef<absl::Status(rocksdb::WriteBatch& batch)>;

  GroupCommit();
  ~GroupCommit();
  GroupCommit(const GroupCommit&) = delete;
  GroupCommit& operator=(const GroupCommit&) = delete;

  // The current epoch. A decision reads it before it reads any state.
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }

  // Appends what `fill` adds to the pending batch (called under the group's lock: it must only
  // add to the batch) and returns its ticket, or 0 when `fill` added nothing. UNAVAILABLE, with
  // nothing appended, when the epoch is no longer `epoch` (a write failed since the caller read
  // its states).
  absl::StatusOr<uint64_t> Append(uint64_t epoch,
                                  absl::FunctionRef<void(rocksdb::WriteBatch&)> fill);

  // Waits until `ticket` is resolved, writing groups with `write` when no other caller is; OK
  // when it was written, the error of its group's write otherwise. Ticket 0: OK at once.
  // REQUIRES: `write` stays usable for the call (the caller keeps the database open).
  absl::Status Wait(uint64_t ticket, WriteFn write);

  // Called once with a ticket's outcome (OK: written; else its group's write error).
  using Done = absl::AnyInvocable<void(absl::Status) &&>;

  // Calls `done` with the outcome of `ticket` once it is resolved: before returning when it is
  // already (ticket 0: OK), else on the writer thread (RunReady), outside every lock, so `done`
  // may use the store again.
  void OnResolved(uint64_t ticket, Done done);

  // Completions with their outcomes, to run outside every lock (RunCompletions).
  using Completions = std::vector<std::pair<Done, absl::Status>>;

  // OnResolved for a caller that writes on its own thread: registers `done` for `ticket` and,
  // unless a write is in progress, writes the pending tickets with `write` right here, group
  // after group while a completion waits for a ticket no write has taken (a few groups at most:
  // then the writer thread goes on). Every completion resolved meanwhile, `done` included, is
  // moved to `*ready`, for the caller to run once it holds no lock (RunCompletions). With a write
  // in progress elsewhere, that write's leader or the writer thread writes `ticket` and runs
  // `done`. So a caller that finds the store idle answers from its own thread with no hand-off
  // (no wake-up of the writer thread, no context switch), and decisions made while a write is in
  // progress still share the next one. REQUIRES: as for Wait.
  void OnResolvedWriteHere(uint64_t ticket, Done done, WriteFn write, Completions* ready);

  // Runs `ready`'s completions in order, on the calling thread.
  static void RunCompletions(Completions& ready);

  // For the writer thread: blocks until there is work, then returns true: a ticket with a
  // completion pending with no write in progress (WritePending), or completions to run
  // (RunReady). Returns false once Stop() was called and no completion is left.
  bool AwaitAsyncWork();

  // Writes every pending ticket as one group with `write`, unless nothing is pending or another
  // write is in progress. REQUIRES: as for Wait.
  void WritePending(WriteFn write);

  // Runs the completions of resolved tickets, on the calling thread (the writer thread).
  void RunReady();

  // Makes AwaitAsyncWork return false once no completion is left.
  void Stop();

  // Inside a WriteFn: how many Appends the group being written holds. A group of one holds what
  // one `fill` wrote, so it repeats a key only if that fill did; only a group of several can
  // repeat a key that each of its fills wrote once.
  size_t writing_appends() const { return writing_appends_.load(std::memory_order_relaxed); }

  // Every ticket up to this one is resolved (written, or failed).
  uint64_t resolved() const { return resolved_.load(std::memory_order_acquire); }
  // The resolved counter itself, for a cache that must not evict unresolved entries.
  const std::atomic<uint64_t>& resolved_counter() const { return resolved_; }

  // Fails every ticket appended and not yet written and bumps the epoch (the store was reopened:
  // nothing derived from earlier appends may be used). REQUIRES: no write in progress (the caller
  // excludes every writer, e.g. holds the database lock exclusively).
  void Invalidate();

  struct Stats {
    uint64_t writes = 0;         // DB writes made (groups), successful or not
    uint64_t tickets = 0;        // tickets handed out (decisions with writes)
    uint64_t failed_writes = 0;  // groups whose write failed
    uint64_t pending = 0;        // tickets appended and not yet taken by a leader
  };
  Stats stats() const;

 private:
  struct Waiter {
    GroupCommit* self;
    uint64_t ticket;
  };
  static bool ReadyOrIdle(Waiter* w);
  bool AsyncWorkOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A completion waits for a ticket that no write has taken yet.
  bool CompletionAwaitsWriteLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Inserts `done` for unresolved `ticket` into done_, in ticket order.
  void InsertCompletionLocked(uint64_t ticket, Done done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Leads one group write of everything pending (REQUIRES: something pending, no write in
  // progress); releases mu_ while writing.
  void LeadLocked(WriteFn write) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the completions of resolved tickets to ready_.
  void TakeResolvedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails tickets first..last_ (everything appended) with `error` and bumps the epoch.
  void FailPendingLocked(uint64_t first, const absl::Status& error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The outcome of resolved `ticket`.
  absl::Status OutcomeLocked(uint64_t ticket) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::unique_ptr<rocksdb::WriteBatch> pending_ ABSL_GUARDED_BY(mu_);
  // A written batch, emptied, to become the next pending_ (null when none is kept).
  std::unique_ptr<rocksdb::WriteBatch> spare_batch_ ABSL_GUARDED_BY(mu_);
  uint64_t last_ ABSL_GUARDED_BY(mu_) = 0;     // the last ticket handed out
  uint64_t taken_ ABSL_GUARDED_BY(mu_) = 0;    // the last ticket taken by a leader
  bool writing_ ABSL_GUARDED_BY(mu_) = false;  // a leader is writing a group
  // The Appends of the group being written (set by its leader before the write).
  std::atomic<size_t> writing_appends_{0};
  // Ticket ranges [first, last] that failed and their error, oldest first (a failure needs a disk
  // error, so there are few; the oldest are dropped past a bound, long after their waiters woke).
  struct Failed {
    uint64_t first = 0;
    uint64_t last = 0;
    absl::Status error;
  };
  std::vector<Failed> failed_ ABSL_GUARDED_BY(mu_);
  // Completions of unresolved tickets, sorted by ticket (equal tickets in registration order).
  // Tickets are registered in about the order they are handed out, so an insertion is at or near
  // the end, and the resolved ones are a prefix: a vector reuses its memory where a map would
  // allocate a node per completion.
  std::vector<std::pair<uint64_t, Done>> done_ ABSL_GUARDED_BY(mu_);
  // Completions of resolved tickets with their outcomes, for the writer thread to run.
  Completions ready_ ABSL_GUARDED_BY(mu_);
  // An empty vector with the capacity of an earlier ready_, to become the next ready_.
  Completions spare_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t writes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t failed_writes_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> resolved_{0};
  std::atomic<uint64_t> epoch_{1};
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_ROCKSDB_GROUP_COMMIT_H_
