#include "server/v1/held_slots.h"

#include <map>

#include "absl/strings/str_cat.h"

namespace ratelimit {
namespace {

// The map key of a state: its source, then name and key, length-prefixed (unambiguous).
std::string KeyOf(const StateKey& key) {
  return absl::StrCat(std::string(1, static_cast<char>(key.source)), key.name.size(), ":", key.name,
                      key.key);
}

}  // namespace

void HeldSlots::Observe(const StateKey& key, int64_t held, int64_t max_lease_ttl_us) {
  const std::string k = KeyOf(key);
  absl::MutexLock lock(&mu_);
  if (held <= 0) {
    keys_.erase(k);
    return;
  }
  Entry& e = keys_[k];
  if (e.limit.empty()) e.limit = key.name;
  e.held = held;
  e.forget_at_us = clock_.NowMicros() + max_lease_ttl_us;
}

std::vector<std::pair<std::string, double>> HeldSlots::PerLimit() {
  const int64_t now = clock_.NowMicros();
  std::map<std::string, double> sums;
  absl::MutexLock lock(&mu_);
  for (auto it = keys_.begin(); it != keys_.end();) {
    if (it->second.forget_at_us <= now) {
      keys_.erase(it++);
      continue;
    }
    sums[it->second.limit] += static_cast<double>(it->second.held);
    ++it;
  }
  return {sums.begin(), sums.end()};
}

}  // namespace ratelimit
