#include "server/v1/held_slots.h"

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/types/span.h"

namespace ratelimit {

namespace {

// The Deferral living on this thread (null: none), and the observations it holds: the first
// `deferred_count` of `deferred_buffer`, whose strings keep their capacity from burst to burst.
thread_local HeldSlots* deferring_for = nullptr;
thread_local size_t deferred_count = 0;

}  // namespace

std::vector<HeldSlots::Deferred>& HeldSlots::ThreadDeferred() {
  thread_local std::vector<Deferred> buffer;
  return buffer;
}

uint64_t HeldSlots::HashOf(const StateKey& key) {
  return absl::HashOf(static_cast<int>(key.source), key.name, key.key);
}

void HeldSlots::Observe(const StateKey& key, int64_t held, int64_t max_lease_ttl_us) {
  if (deferring_for == this) {
    std::vector<Deferred>& buffer = ThreadDeferred();
    if (deferred_count == buffer.size()) buffer.emplace_back();
    Deferred& d = buffer[deferred_count++];
    d.hash = HashOf(key);
    d.name.assign(key.name);
    d.held = held;
    d.max_lease_ttl_us = max_lease_ttl_us;
    return;
  }
  const int64_t now = clock_.NowMicros();
  const uint64_t hash = HashOf(key);
  absl::MutexLock lock(&mu_);
  ObserveLocked(hash, key.name, held, now + max_lease_ttl_us, now);
}

void HeldSlots::ApplyDeferred(absl::Span<const Deferred> deferred) {
  if (deferred.empty()) return;
  const int64_t now = clock_.NowMicros();
  absl::MutexLock lock(&mu_);
  // The probes' cache misses overlap; then each is applied in order (a later one of a key wins).
  for (const Deferred& d : deferred) keys_.prefetch(d.hash);
  for (const Deferred& d : deferred) {
    ObserveLocked(d.hash, d.name, d.held, now + d.max_lease_ttl_us, now);
  }
}

void HeldSlots::ObserveLocked(uint64_t hash, absl::string_view name, int64_t held,
                              int64_t forget_at_us, int64_t now_us) {
  auto it = keys_.find(hash);
  if (it == keys_.end()) {
    if (held <= 0) return;
    if (keys_.size() >= sweep_at_size_) {
      SweepLocked(now_us);
      sweep_at_size_ = std::max(min_sweep_size_, 2 * keys_.size());
    }
    it = keys_.emplace(hash, Entry{0, 0, LimitIndexLocked(name)}).first;
  }
  it->second.held = std::max<int64_t>(held, 0);
  it->second.forget_at_us = forget_at_us;
}

HeldSlots::Deferral::Deferral(HeldSlots* slots)
    : slots_(slots != nullptr && deferring_for == nullptr ? slots : nullptr) {
  if (slots_ != nullptr) deferring_for = slots_;
}

HeldSlots::Deferral::~Deferral() {
  if (slots_ == nullptr) return;
  deferring_for = nullptr;
  const size_t count = deferred_count;
  deferred_count = 0;
  slots_->ApplyDeferred(absl::MakeConstSpan(ThreadDeferred()).first(count));
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
