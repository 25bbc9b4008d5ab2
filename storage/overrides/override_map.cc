#include "storage/overrides/override_map.h"

#include <cmath>
#include <utility>

#include "absl/hash/hash.h"

namespace ratelimit {
namespace {

// Shards for `n` records: the power of two nearest above sqrt(n), so that a change copies about
// as many entries as it copies shard pointers.
int ShardBitsFor(size_t n) {
  int bits = 0;
  while ((size_t{1} << (2 * bits)) < n && bits < 16) ++bits;
  return bits;
}

}  // namespace

OverrideMap::OverrideMap() : shards_(1, std::make_shared<Shard>()) {}

OverrideMap::OverrideMap(std::vector<Record> records)
    : shard_bits_(ShardBitsFor(records.size())), size_(records.size()) {
  shards_.resize(size_t{1} << shard_bits_);
  for (auto& s : shards_) s = std::make_shared<Shard>();
  for (Record& r : records) {
    Shard& shard = *shards_[ShardOf(r->target.key)];
    const absl::string_view key = r->target.key;
    shard.emplace(key, std::move(r));
  }
}

size_t OverrideMap::ShardOf(absl::string_view key) const {
  if (shard_bits_ == 0) return 0;
  // The hash's top bits: the shard's own table probes by its lower ones.
  return static_cast<size_t>(absl::HashOf(key) >> (64 - shard_bits_));
}

const Override* OverrideMap::Find(absl::string_view key) const {
  const Shard& shard = *shards_[ShardOf(key)];
  const auto it = shard.find(key);
  return it == shard.end() ? nullptr : it->second.get();
}

OverrideMap::Shard& OverrideMap::MutableShard(size_t i, Owned& owned) {
  if (!owned.contains(shards_[i].get())) {
    shards_[i] = std::make_shared<Shard>(*shards_[i]);
    owned.insert(shards_[i].get());
  }
  return *shards_[i];
}

void OverrideMap::Put(Record record, Owned& owned) {
  Shard& shard = MutableShard(ShardOf(record->target.key), owned);
  // Erased first: the key views the record it maps to, which is replaced.
  if (shard.erase(absl::string_view(record->target.key)) == 0) ++size_;
  const absl::string_view key = record->target.key;
  shard.emplace(key, std::move(record));
}

void OverrideMap::Erase(absl::string_view key, Owned& owned) {
  const size_t i = ShardOf(key);
  if (!shards_[i]->contains(key)) return;
  MutableShard(i, owned).erase(key);
  --size_;
}

void OverrideMap::Rebalance() {
  if (ShardBitsFor(size_) <= shard_bits_ + 1) return;
  std::vector<Record> records;
  records.reserve(size_);
  for (const auto& shard : shards_) {
    for (const auto& [key, record] : *shard) records.push_back(record);
  }
  *this = OverrideMap(std::move(records));
}

void OverrideMap::ForEach(absl::FunctionRef<void(const Override&)> fn) const {
  for (const auto& shard : shards_) {
    for (const auto& [key, record] : *shard) fn(*record);
  }
}

}  // namespace ratelimit
