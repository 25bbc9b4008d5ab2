#ifndef RATELIMIT_SERVER_V1_HELD_SLOTS_H_
#define RATELIMIT_SERVER_V1_HELD_SLOTS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
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
// A key's entry keeps the number of the decision its count is from, so that an earlier decision
// reported late does not replace a later one's count (until the entry is dropped: a count of 0
// reported late then is lost, and one above 0 comes back until the key's next decision).
//
// Every lease call reports here, so an entry is small and found with one probe: keys are told
// apart by a 64-bit hash of (source, name, key) and an entry holds its limit as an index into the
// names seen, not the key's strings (a map of strings cost a lease call about 0.4 µs in cache
// misses at 10,000 keys). Two keys whose hashes collide share an entry, so the gauge would show
// the later one's count for both: with a million keys tracked, a chance of about 3e-8.
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
  // `max_lease_ttl_us`, numbered `seq` by the store (LeaseDecision::seq). A decision numbered
  // below the last one seen on the key is ignored: decisions are reported in the order their
  // answers are handed back, which is not the order they were made in (a burst answers in the
  // order its calls came, its store decides releases first; two serving threads race). With seq
  // 0 (a decision not numbered) the last reported wins.
  void Observe(const StateKey& key, int64_t held, int64_t max_lease_ttl_us, uint64_t seq = 0) {
    Observe(key.source, key.name, key.key, held, max_lease_ttl_us, seq);
  }
  // The same for the key `key` of limit `name` of `source` (a name other than the key's own: an
  // Envoy rule's state seen under the rule's name).
  void Observe(LimitSource source, absl::string_view name, absl::string_view key, int64_t held,
               int64_t max_lease_ttl_us, uint64_t seq = 0);

  // Forgets every key of limit `name` of `source`: a Reset of all its keys ended their leases.
  void ForgetLimit(LimitSource source, absl::string_view name);

  // Slots held per limit name (limits with none are absent), dropping forgotten keys.
  std::vector<std::pair<std::string, double>> PerLimit();

  // Keys with an entry (held or not yet dropped), and limit names kept: for tests of the memory
  // bound.
  size_t TrackedKeys();
  size_t TrackedLimitNames();

 private:
  struct Entry {
    int64_t held = 0;
    int64_t forget_at_us = 0;
    uint64_t seq = 0;    // of the decision `held` is from
    uint32_t limit = 0;  // index into names_
    LimitSource source = LimitSource::kDefined;
  };
  // Names a sweep keeps without looking whether an entry still refers to them.
  static constexpr size_t kNamesKeptUnchecked = 64;

  // Drops the entries at 0 or past their time, and the names no entry refers to once they are
  // more than kNamesKeptUnchecked (inline limits can bring any number of names).
  void SweepLocked(int64_t now_us) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The index of `name` in names_, added when new.
  uint32_t LimitIndexLocked(absl::string_view name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock& clock_;
  const size_t min_sweep_size_;
  absl::Mutex mu_;
  // By absl::HashOf(source, name, key).
  absl::flat_hash_map<uint64_t, Entry> keys_ ABSL_GUARDED_BY(mu_);
  // The limit names of the entries, each once.
  std::vector<std::string> names_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint32_t> name_index_ ABSL_GUARDED_BY(mu_);
  size_t sweep_at_size_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_V1_HELD_SLOTS_H_
