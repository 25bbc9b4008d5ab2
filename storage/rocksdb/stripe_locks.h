#ifndef RATELIMIT_STORAGE_ROCKSDB_STRIPE_LOCKS_H_
#define RATELIMIT_STORAGE_ROCKSDB_STRIPE_LOCKS_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace ratelimit {

// A striped mutex: a fixed number of mutexes ("stripes"), each guarding the keys that hash to
// it. Lock stripes with StripeLocks.
//
// For clang's thread-safety analysis the stripes together are one capability: which stripes a
// holder has is chosen at run time, and the analysis cannot follow that mutex by mutex, but it
// checks that code declared ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripes) runs only inside a
// StripeLocks scope on them.
//
// Thread safety: thread-safe (it is a lock).
class ABSL_LOCKABLE StripedMutex {
 public:
  // At least one stripe.
  explicit StripedMutex(size_t stripes)
      : size_(std::max<size_t>(1, stripes)), mutexes_(std::make_unique<absl::Mutex[]>(size_)) {}
  StripedMutex(const StripedMutex&) = delete;
  StripedMutex& operator=(const StripedMutex&) = delete;

  size_t size() const { return size_; }
  // The stripe of a key with hash `hash`.
  size_t StripeOf(uint64_t hash) const { return hash % size_; }

 private:
  friend class StripeLocks;

  const size_t size_;
  const std::unique_ptr<absl::Mutex[]> mutexes_;
};

// Holds a set of stripes of a StripedMutex: locks them in the constructor in the order given and
// unlocks them in reverse order in Unlock() or the destructor, whichever comes first. Callers pass
// the indexes sorted and distinct, so that two holders of overlapping sets never deadlock.
//
// Thread safety: one StripeLocks is used by the thread that created it.
class ABSL_SCOPED_LOCKABLE StripeLocks {
 public:
  // REQUIRES: `stripes` outlives this object; every index is below stripes.size(); indexes
  // sorted and distinct.
  // (The body locks mutexes chosen at run time, which the analysis cannot follow.)
  StripeLocks(StripedMutex& stripes, absl::Span<const size_t> indexes)
      ABSL_EXCLUSIVE_LOCK_FUNCTION(stripes) ABSL_NO_THREAD_SAFETY_ANALYSIS
      : stripes_(stripes),
        indexes_(indexes.begin(), indexes.end()) {
    for (size_t i : indexes_) stripes_.mutexes_[i].Lock();
  }
  StripeLocks(const StripeLocks&) = delete;
  StripeLocks& operator=(const StripeLocks&) = delete;
  ~StripeLocks() ABSL_UNLOCK_FUNCTION() { UnlockHeld(); }

  // Unlocks every stripe held. Call at most once; the destructor then does nothing.
  void Unlock() ABSL_UNLOCK_FUNCTION() { UnlockHeld(); }

 private:
  void UnlockHeld() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    for (auto it = indexes_.rbegin(); it != indexes_.rend(); ++it) stripes_.mutexes_[*it].Unlock();
    indexes_.clear();
  }

  StripedMutex& stripes_;
  absl::InlinedVector<size_t, 4> indexes_;
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_ROCKSDB_STRIPE_LOCKS_H_
