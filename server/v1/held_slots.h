#ifndef RATELIMIT_SERVER_V1_HELD_SLOTS_H_
#define RATELIMIT_SERVER_V1_HELD_SLOTS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
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
// A decision on a key seen before allocates nothing: a key at 0 keeps its entry (counted as
// nothing) until a scrape or a sweep drops it. Sweeps run when the map has doubled since the last
// one, so keys at 0 or past their time never pile up between scrapes.
//
// Thread safety: thread-safe.
class HeldSlots {
 public:
  // Keys tracked before the first sweep: ~100 bytes each plus the name and key.
  static constexpr size_t kDefaultMinSweepSize = 16384;

  // `clock` is not owned and must outlive the object. Sweeps run once the map has
  // `min_sweep_size` keys and twice as many as the last sweep left.
  explicit HeldSlots(const Clock& clock, size_t min_sweep_size = kDefaultMinSweepSize)
      : clock_(clock), min_sweep_size_(min_sweep_size), sweep_at_size_(min_sweep_size) {}
  HeldSlots(const HeldSlots&) = delete;
  HeldSlots& operator=(const HeldSlots&) = delete;

  // `held` slots of `key` after a decision of a limit whose leases last at most
  // `max_lease_ttl_us`.
  void Observe(const StateKey& key, int64_t held, int64_t max_lease_ttl_us);

  // Slots held per limit name (limits with none are absent), dropping forgotten keys.
  std::vector<std::pair<std::string, double>> PerLimit();

  // Keys with an entry (held or not yet dropped): for tests of the memory bound.
  size_t TrackedKeys();

 private:
  // A key of the map, or a view of one to look it up without building it.
  struct KeyView {
    absl::string_view name;
    absl::string_view key;
    LimitSource source;
  };
  static KeyView View(const StateKey& k) { return KeyView{k.name, k.key, k.source}; }
  static KeyView View(const KeyView& k) { return k; }
  struct Hash {
    using is_transparent = void;
    template <typename K>
    size_t operator()(const K& k) const {
      const KeyView v = View(k);
      return absl::HashOf(v.name, v.key, static_cast<int>(v.source));
    }
  };
  struct Eq {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      const KeyView x = View(a), y = View(b);
      return x.source == y.source && x.name == y.name && x.key == y.key;
    }
  };
  struct Entry {
    int64_t held = 0;
    int64_t forget_at_us = 0;
  };
  // Drops the entries at 0 or past their time.
  void SweepLocked(int64_t now_us) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock& clock_;
  const size_t min_sweep_size_;
  absl::Mutex mu_;
  absl::flat_hash_map<StateKey, Entry, Hash, Eq> keys_ ABSL_GUARDED_BY(mu_);
  size_t sweep_at_size_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_V1_HELD_SLOTS_H_
