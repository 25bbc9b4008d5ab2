#include "storage/memory/memory_state_store.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "storage/leases/apply_lease.h"

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

absl::Status MemoryStateStore::UpdateWithRecords(absl::Span<const StateKey> keys,
                                                 absl::Span<const RecordSpec> records,
                                                 const Clock& clock, RecordDecideFn decide) {
  absl::MutexLock lock(&mu_);
  const int64_t now = clock.NowMicros();
  last_record_time_us_ = std::max(last_record_time_us_, now);
  std::vector<std::optional<State>> current(keys.size());
  std::vector<std::optional<State>> writes(keys.size());
  std::vector<std::optional<std::string>> found(records.size());
  std::vector<std::optional<std::string>> record_writes(records.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = states_.find(Key(keys[i].source, keys[i].name, keys[i].key));
    if (it != states_.end()) current[i] = it->second;
  }
  for (size_t r = 0; r < records.size(); ++r) {
    auto it = records_.find(records[r].key);
    if (it != records_.end() && it->second.expires_at_us > now) found[r] = it->second.value;
  }
  if (absl::Status s =
          decide(current, found, absl::MakeSpan(writes), absl::MakeSpan(record_writes));
      !s.ok()) {
    return s;
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (writes[i]) states_[Key(keys[i].source, keys[i].name, keys[i].key)] = *writes[i];
  }
  for (size_t r = 0; r < records.size(); ++r) {
    if (record_writes[r]) {
      records_[records[r].key] = Record{*std::move(record_writes[r]), records[r].expires_at_us};
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> MemoryStateStore::Secret(absl::string_view name,
                                                     absl::FunctionRef<std::string()> generate) {
  absl::MutexLock lock(&mu_);
  auto it = secrets_.find(name);
  if (it == secrets_.end()) it = secrets_.emplace(std::string(name), generate()).first;
  return it->second;
}

absl::StatusOr<LeaseOutcome> MemoryStateStore::ApplyLease(const LeaseOperation& op,
                                                          const Clock& clock) {
  return ApplyLeaseWithRecords(*this, op, clock);
}

absl::StatusOr<uint64_t> MemoryStateStore::DeleteAllLeases(LimitSource source,
                                                           absl::string_view name, int64_t now_us) {
  const std::string prefix = LeaseRecordPrefix(source, name);
  absl::MutexLock lock(&mu_);
  uint64_t deleted = 0;
  auto it = records_.lower_bound(prefix);
  while (it != records_.end() && absl::StartsWith(it->first, prefix)) {
    if (it->second.expires_at_us > now_us && LeaseRecordHoldsLiveLease(it->second.value, now_us)) {
      ++deleted;
    }
    it = records_.erase(it);
  }
  return deleted;
}

absl::StatusOr<StateStore::LeakedLeaseKeys> MemoryStateStore::FindLeakedLeaseKeys(
    absl::string_view cursor, int64_t now_us) {
  LeakedLeaseKeys page;
  absl::MutexLock lock(&mu_);
  auto it = records_.lower_bound(std::max(std::string(cursor), std::string("L")));
  for (size_t read = 0; it != records_.end() && absl::StartsWith(it->first, "L"); ++it, ++read) {
    if (read == kLeakPageRecords) {
      page.next = it->first;
      break;
    }
    if (it->second.expires_at_us <= now_us) continue;  // expired: reads as absent
    if (!LeaseRecordHoldsLeak(it->second.value, now_us)) continue;
    if (std::optional<StateKey> key = ParseLeaseRecordKey(it->first)) {
      page.keys.push_back(*std::move(key));
    }
  }
  return page;
}

absl::Status MemoryStateStore::CollectGarbage() {
  absl::MutexLock lock(&mu_);
  for (auto it = records_.begin(); it != records_.end();) {
    it = it->second.expires_at_us <= last_record_time_us_ ? records_.erase(it) : std::next(it);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<State>> MemoryStateStore::Get(const StateKey& key) {
  absl::MutexLock lock(&mu_);
  auto it = states_.find(Key(key.source, key.name, key.key));
  if (it == states_.end()) return std::optional<State>();
  return std::optional<State>(it->second);
}

absl::StatusOr<uint64_t> MemoryStateStore::Delete(const StateKey& key) {
  absl::MutexLock lock(&mu_);
  return states_.erase(Key(key.source, key.name, key.key));
}

absl::StatusOr<uint64_t> MemoryStateStore::DeleteAll(LimitSource source, absl::string_view name) {
  absl::MutexLock lock(&mu_);
  uint64_t deleted = 0;
  auto it = states_.lower_bound(Key(source, std::string(name), std::string()));
  while (it != states_.end() && std::get<0>(it->first) == source &&
         std::get<1>(it->first) == name) {
    it = states_.erase(it);
    ++deleted;
  }
  return deleted;
}

size_t MemoryStateStore::Size() const {
  absl::MutexLock lock(&mu_);
  return states_.size();
}

}  // namespace ratelimit
