#ifndef RATELIMIT_STORAGE_STRIPE_LOCKS_H_
#define RATELIMIT_STORAGE_STRIPE_LOCKS_H_

#include <cstddef>

#include "absl/container/inlined_vector.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace ratelimit {

// Holds a set of stripes of a striped mutex: locks them in the constructor in the order given and
// unlocks them in reverse order in Unlock() or the destructor, whichever comes first. Callers pass
// the indexes sorted and distinct, so that two holders of overlapping sets never deadlock.
//
// The set of mutexes is chosen at run time, which clang's thread-safety analysis cannot follow
// mutex by mutex; the stripes guard no annotated member (they serialize decisions on RocksDB
// keys), so there is nothing for it to check beyond this class pairing each Lock with an Unlock.
//
// Thread safety: one StripeLocks is used by the thread that created it.
class StripeLocks {
 public:
  // REQUIRES: `stripes` outlives this object; every index is in range; indexes sorted, distinct.
  StripeLocks(absl::Mutex* stripes, absl::Span<const size_t> indexes) ABSL_NO_THREAD_SAFETY_ANALYSIS
      : stripes_(stripes),
        indexes_(indexes.begin(), indexes.end()) {
    for (size_t i : indexes_) stripes_[i].Lock();
  }
  StripeLocks(const StripeLocks&) = delete;
  StripeLocks& operator=(const StripeLocks&) = delete;
  ~StripeLocks() { Unlock(); }

  // Unlocks every stripe held. Idempotent.
  void Unlock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    for (auto it = indexes_.rbegin(); it != indexes_.rend(); ++it) stripes_[*it].Unlock();
    indexes_.clear();
  }

 private:
  absl::Mutex* const stripes_;
  absl::InlinedVector<size_t, 4> indexes_;
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_STRIPE_LOCKS_H_
