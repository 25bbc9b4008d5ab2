#ifndef RATELIMIT_SERVER_V1_HELD_SLOTS_H_
#define RATELIMIT_SERVER_V1_HELD_SLOTS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "storage/clock.h"
#include "storage/operation.h"

namespace ratelimit {

// The slots of concurrency limits held, as this server last saw them (the gauge
// ratelimit_lease_slots_held{limit}): each decision on a key reports the slots held on it after
// the decision, and the gauge is their sum per limit. A key's count is forgotten once it is 0, or
// once max_lease_ttl has passed since this server's last decision on it (every lease it saw then
// has expired, or was extended through another server, which reports it). Replicas each report
// the keys they decided; ListLeases reads the store's truth.
//
// Thread safety: thread-safe.
class HeldSlots {
 public:
  // `clock` is not owned and must outlive the object.
  explicit HeldSlots(const Clock& clock) : clock_(clock) {}
  HeldSlots(const HeldSlots&) = delete;
  HeldSlots& operator=(const HeldSlots&) = delete;

  // `held` slots of `key` after a decision of a limit whose leases last at most
  // `max_lease_ttl_us`.
  void Observe(const StateKey& key, int64_t held, int64_t max_lease_ttl_us);

  // Slots held per limit name (limits with none are absent), dropping forgotten keys.
  std::vector<std::pair<std::string, double>> PerLimit();

 private:
  struct Entry {
    std::string limit;
    int64_t held = 0;
    int64_t forget_at_us = 0;
  };
  const Clock& clock_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> keys_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_V1_HELD_SLOTS_H_
