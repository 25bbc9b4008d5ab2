#include "storage/memory_state_store.h"

#include <vector>

namespace ratelimit {

absl::Status MemoryStateStore::Update(absl::Span<const StateKey> keys, DecideFn decide) {
  absl::MutexLock lock(&mu_);
  std::vector<std::optional<State>> current(keys.size());
  std::vector<std::optional<State>> writes(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = states_.find(Key(keys[i].source, keys[i].name, keys[i].key));
    if (it != states_.end()) current[i] = it->second;
  }
  if (absl::Status s = decide(current, absl::MakeSpan(writes)); !s.ok()) return s;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (writes[i]) states_[Key(keys[i].source, keys[i].name, keys[i].key)] = *writes[i];
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<State>> MemoryStateStore::Get(const StateKey& key) {
  absl::MutexLock lock(&mu_);
  auto it = states_.find(Key(key.source, key.name, key.key));
  if (it == states_.end()) return std::optional<State>();
  return std::optional<State>(it->second);
}

absl::Status MemoryStateStore::Delete(const StateKey& key) {
  absl::MutexLock lock(&mu_);
  states_.erase(Key(key.source, key.name, key.key));
  return absl::OkStatus();
}

absl::Status MemoryStateStore::DeleteAll(LimitSource source, absl::string_view name) {
  absl::MutexLock lock(&mu_);
  auto it = states_.lower_bound(Key(source, std::string(name), std::string()));
  while (it != states_.end() && std::get<0>(it->first) == source &&
         std::get<1>(it->first) == name) {
    it = states_.erase(it);
  }
  return absl::OkStatus();
}

size_t MemoryStateStore::Size() const {
  absl::MutexLock lock(&mu_);
  return states_.size();
}

}  // namespace ratelimit
