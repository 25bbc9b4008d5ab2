#include "server/v1/held_slots.h"

#include <algorithm>
#include <map>

namespace ratelimit {

void HeldSlots::Observe(const StateKey& key, int64_t held, int64_t max_lease_ttl_us) {
  const int64_t now = clock_.NowMicros();
  absl::MutexLock lock(&mu_);
  auto it = keys_.find(KeyView{key.name, key.key, key.source});
  if (it == keys_.end()) {
    if (held <= 0) return;
    if (keys_.size() >= sweep_at_size_) {
      SweepLocked(now);
      sweep_at_size_ = std::max(min_sweep_size_, 2 * keys_.size());
    }
    it = keys_.emplace(key, Entry{}).first;
  }
  it->second.held = std::max<int64_t>(held, 0);
  it->second.forget_at_us = now + max_lease_ttl_us;
}

void HeldSlots::SweepLocked(int64_t now_us) {
  absl::erase_if(keys_, [now_us](const auto& kv) {
    return kv.second.held == 0 || kv.second.forget_at_us <= now_us;
  });
}

std::vector<std::pair<std::string, double>> HeldSlots::PerLimit() {
  const int64_t now = clock_.NowMicros();
  std::map<std::string, double> sums;
  absl::MutexLock lock(&mu_);
  SweepLocked(now);
  for (const auto& [key, entry] : keys_) sums[key.name] += static_cast<double>(entry.held);
  return {sums.begin(), sums.end()};
}

size_t HeldSlots::TrackedKeys() {
  absl::MutexLock lock(&mu_);
  return keys_.size();
}

}  // namespace ratelimit
