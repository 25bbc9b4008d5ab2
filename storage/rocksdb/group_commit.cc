#include "storage/rocksdb/group_commit.h"

#include <iterator>
#include <utility>

#include "rocksdb/write_batch.h"

namespace ratelimit {
namespace {

// Failed ranges kept for waiters that have not looked at their outcome yet.
constexpr size_t kMaxFailedRanges = 1024;

// A written group's batch is kept for reuse up to this size (its buffer's capacity is about as
// large); a larger one is freed.
constexpr size_t kMaxReusedBatchBytes = size_t{1} << 20;

}  // namespace

GroupCommit::GroupCommit() : pending_(std::make_unique<rocksdb::WriteBatch>()) {}

GroupCommit::~GroupCommit() = default;

absl::StatusOr<uint64_t> GroupCommit::Append(uint64_t epoch,
                                             absl::FunctionRef<void(rocksdb::WriteBatch&)> fill) {
  absl::MutexLock lock(&mu_);
  if (epoch_.load(std::memory_order_relaxed) != epoch) {
    return absl::UnavailableError(
        "state store write failed while this decision was made; nothing was taken");
  }
  const uint32_t before = pending_->Count();
  fill(*pending_);
  if (pending_->Count() == before) return uint64_t{0};
  return ++last_;
}

bool GroupCommit::ReadyOrIdle(Waiter* w) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // Called by absl::Mutex with mu_ held.
  return w->self->resolved_.load(std::memory_order_relaxed) >= w->ticket || !w->self->writing_;
}

absl::Status GroupCommit::Wait(uint64_t ticket, WriteFn write) {
  if (ticket == 0) return absl::OkStatus();
  Waiter waiter{this, ticket};
  absl::MutexLock lock(&mu_);
  while (true) {
    mu_.Await(absl::Condition(&ReadyOrIdle, &waiter));
    if (resolved_.load(std::memory_order_relaxed) >= ticket) break;
    // No write in progress and our ticket is pending: lead.
    LeadLocked(write);
  }
  return OutcomeLocked(ticket);
}

void GroupCommit::LeadLocked(WriteFn write) {
  // Everything appended so far (tickets taken_ + 1 .. last_) goes in one write.
  writing_ = true;
  std::unique_ptr<rocksdb::WriteBatch> next =
      spare_batch_ ? std::move(spare_batch_) : std::make_unique<rocksdb::WriteBatch>();
  std::unique_ptr<rocksdb::WriteBatch> batch = std::exchange(pending_, std::move(next));
  const uint64_t first = taken_ + 1;
  const uint64_t last = last_;
  taken_ = last;
  writing_appends_.store(last - first + 1, std::memory_order_relaxed);  // a ticket per Append
  ++writes_;
  mu_.Unlock();
  absl::Status status = write(*batch);
  // Emptied for the group after next: its buffer is reused unless a large group grew it.
  if (batch->GetDataSize() <= kMaxReusedBatchBytes) {
    batch->Clear();
  } else {
    batch.reset();
  }
  mu_.Lock();
  if (batch) spare_batch_ = std::move(batch);
  writing_ = false;
  if (status.ok()) {
    resolved_.store(last, std::memory_order_release);
  } else {
    ++failed_writes_;
    FailPendingLocked(first, status);
  }
  TakeResolvedLocked();
}

void GroupCommit::TakeResolvedLocked() {
  const uint64_t resolved = resolved_.load(std::memory_order_relaxed);
  auto end = done_.begin();
  for (; end != done_.end() && end->first <= resolved; ++end) {
    ready_.emplace_back(std::move(end->second), OutcomeLocked(end->first));
  }
  done_.erase(done_.begin(), end);
}

void GroupCommit::InsertCompletionLocked(uint64_t ticket, Done done) {
  auto at = done_.end();
  while (at != done_.begin() && std::prev(at)->first > ticket) --at;
  done_.emplace(at, ticket, std::move(done));
}

void GroupCommit::OnResolved(uint64_t ticket, Done done) {
  absl::Status outcome;
  {
    absl::MutexLock lock(&mu_);
    if (ticket > resolved_.load(std::memory_order_relaxed)) {
      InsertCompletionLocked(ticket, std::move(done));
      return;
    }
    if (ticket != 0) outcome = OutcomeLocked(ticket);
  }
  std::move(done)(std::move(outcome));
}

void GroupCommit::OnResolvedWriteHere(uint64_t ticket, Done done, WriteFn write,
                                      Completions* ready) {
  // Groups led here beyond the one that writes `ticket`, for completions registered while those
  // were written: bounded, so that this caller's own answer is not held back by a stream of
  // others' (the writer thread takes over).
  constexpr int kMaxExtraGroups = 4;
  absl::MutexLock lock(&mu_);
  if (ticket <= resolved_.load(std::memory_order_relaxed)) {
    ready->emplace_back(std::move(done), ticket == 0 ? absl::OkStatus() : OutcomeLocked(ticket));
  } else {
    // Registered and led under one hold of mu_: the writer thread never sees a completion
    // waiting with no write in progress, so it is not woken for it.
    InsertCompletionLocked(ticket, std::move(done));
    int extra = 0;
    while (!writing_ && last_ > taken_ &&
           (ticket > resolved_.load(std::memory_order_relaxed) ||
            (CompletionAwaitsWriteLocked() && extra++ < kMaxExtraGroups))) {
      LeadLocked(write);
      // Taken before mu_ is released again (by the next write, or on return), or the writer
      // thread would wake to run them.
      for (auto& entry : ready_) ready->push_back(std::move(entry));
      ready_.clear();
    }
  }
}

void GroupCommit::RunCompletions(Completions& ready) {
  for (auto& [done, status] : ready) std::move(done)(std::move(status));
  ready.clear();
}

bool GroupCommit::CompletionAwaitsWriteLocked() const {
  // The earliest completion decides: done_ is sorted by ticket.
  return !done_.empty() && done_.front().first > taken_;
}

bool GroupCommit::AsyncWorkOrStopping() const {
  const bool to_write = !writing_ && CompletionAwaitsWriteLocked();
  return to_write || !ready_.empty() || (stopping_ && done_.empty());
}

bool GroupCommit::AwaitAsyncWork() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &GroupCommit::AsyncWorkOrStopping));
  return !done_.empty() || !ready_.empty();
}

void GroupCommit::WritePending(WriteFn write) {
  absl::MutexLock lock(&mu_);
  if (!writing_ && last_ > taken_) LeadLocked(write);
}

void GroupCommit::RunReady() {
  Completions ready;
  {
    absl::MutexLock lock(&mu_);
    ready.swap(ready_);
    ready_.swap(spare_);
  }
  RunCompletions(ready);
  absl::MutexLock lock(&mu_);
  if (spare_.capacity() < ready.capacity()) spare_.swap(ready);
}

void GroupCommit::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
}

void GroupCommit::FailPendingLocked(uint64_t first, const absl::Status& error) {
  if (last_ >= first) failed_.push_back(Failed{first, last_, error});
  if (failed_.size() > kMaxFailedRanges) failed_.erase(failed_.begin());
  taken_ = last_;
  pending_->Clear();
  epoch_.fetch_add(1, std::memory_order_acq_rel);
  resolved_.store(last_, std::memory_order_release);
}

absl::Status GroupCommit::OutcomeLocked(uint64_t ticket) const {
  for (auto it = failed_.rbegin(); it != failed_.rend(); ++it) {
    if (ticket > it->last) break;
    if (ticket >= it->first) return it->error;
  }
  return absl::OkStatus();
}

void GroupCommit::Invalidate() {
  absl::MutexLock lock(&mu_);
  FailPendingLocked(
      taken_ + 1, absl::UnavailableError("state store reopened before this decision was written"));
  TakeResolvedLocked();
}

GroupCommit::Stats GroupCommit::stats() const {
  absl::MutexLock lock(&mu_);
  Stats s;
  s.writes = writes_;
  s.tickets = last_;
  s.failed_writes = failed_writes_;
  s.pending = last_ - taken_;
  return s;
}

}  // namespace ratelimit
