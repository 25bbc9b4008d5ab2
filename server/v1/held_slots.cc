#include "server/v1/held_slots.h"

#include <algorithm>
#include <limits>
#include <map>

#include "absl/hash/hash.h"

namespace ratelimit {

void HeldSlots::Observe(LimitSource source, absl::string_view name, absl::string_view key,
                        int64_t held, int64_t max_lease_ttl_us, uint64_t seq) {
  const int64_t now = clock_.NowMicros();
  const uint64_t hash = absl::HashOf(static_cast<int>(source), name, key);
  absl::MutexLock lock(&mu_);
  auto it = keys_.find(hash);
  if (it == keys_.end()) {
    if (held <= 0) return;
    if (keys_.size() >= sweep_at_size_) {
      SweepLocked(now);
      sweep_at_size_ = std::max(min_sweep_size_, 2 * keys_.size());
    }
    it = keys_.emplace(hash, Entry{0, 0, 0, LimitIndexLocked(name), source}).first;
  } else if (seq != 0 && seq < it->second.seq) {
    return;  // a later decision's count is in already
  }
  it->second.held = std::max<int64_t>(held, 0);
  it->second.forget_at_us = now + max_lease_ttl_us;
  it->second.seq = seq;
}

void HeldSlots::ForgetLimit(LimitSource source, absl::string_view name) {
  absl::MutexLock lock(&mu_);
  const auto it = name_index_.find(name);
  if (it == name_index_.end()) return;
  const uint32_t limit = it->second;
  absl::erase_if(keys_, [&](const auto& kv) {
    return kv.second.limit == limit && kv.second.source == source;
  });
}

void HeldSlots::SweepLocked(int64_t now_us) {
  absl::erase_if(keys_, [now_us](const auto& kv) {
    return kv.second.held == 0 || kv.second.forget_at_us <= now_us;
  });
  if (names_.size() <= kNamesKeptUnchecked) return;
  constexpr uint32_t kDropped = std::numeric_limits<uint32_t>::max();
  std::vector<uint32_t> moved_to(names_.size(), kDropped);
  std::vector<std::string> kept;
  for (auto& [hash, entry] : keys_) {
    uint32_t& to = moved_to[entry.limit];
    if (to == kDropped) {
      to = static_cast<uint32_t>(kept.size());
      kept.push_back(std::move(names_[entry.limit]));
    }
    entry.limit = to;
  }
  names_ = std::move(kept);
  name_index_.clear();
  for (uint32_t i = 0; i < names_.size(); ++i) name_index_.emplace(names_[i], i);
}

uint32_t HeldSlots::LimitIndexLocked(absl::string_view name) {
  auto [it, added] = name_index_.try_emplace(name, static_cast<uint32_t>(names_.size()));
  if (added) names_.emplace_back(name);
  return it->second;
}

std::vector<std::pair<std::string, double>> HeldSlots::PerLimit() {
  const int64_t now = clock_.NowMicros();
  std::map<std::string, double> sums;
  absl::MutexLock lock(&mu_);
  SweepLocked(now);
  for (const auto& [hash, entry] : keys_) {
    sums[names_[entry.limit]] += static_cast<double>(entry.held);
  }
  return {sums.begin(), sums.end()};
}

size_t HeldSlots::TrackedKeys() {
  absl::MutexLock lock(&mu_);
  return keys_.size();
}

size_t HeldSlots::TrackedLimitNames() {
  absl::MutexLock lock(&mu_);
  return names_.size();
}

}  // namespace ratelimit
