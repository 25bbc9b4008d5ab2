#ifndef RATELIMIT_STORAGE_OVERRIDES_OVERRIDE_MAP_H_
#define RATELIMIT_STORAGE_OVERRIDES_OVERRIDE_MAP_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "storage/overrides/override.h"

namespace ratelimit {

// Overrides by their target's key (one key, or one pattern's text), copy-on-write in shards: a
// copy of the map shares every shard with the original, and a change made to the copy copies the
// one shard it touches first (about sqrt(size) entries; the records themselves are shared, never
// copied). So a new version of a map of 100,000 overrides costs microseconds per change, and the
// version it was made from stays unchanged and valid for whoever still reads it.
//
// A change is made under an Owned set: the shards made by earlier changes of the same edit, which
// only the map being edited holds, are changed in place; every other shard is copied first. Start
// each edit (a copy of a published map) with an empty Owned set and publish the map when done.
//
// Thread safety: const methods are thread-safe; an edit must not run concurrently with anything
// else on the same map (edit a copy nobody else reads yet).
class OverrideMap {
 public:
  using Record = std::shared_ptr<const Override>;
  // Shards (and other parts) that an edit made and owns.
  using Owned = absl::flat_hash_set<const void*>;

  // The empty map.
  OverrideMap();
  // A map of `records`, each under its target.key. REQUIRES: no two share a key, none is null.
  explicit OverrideMap(std::vector<Record> records);

  // The record under `key`, or nullptr. Valid while this map (or a copy sharing it) lives.
  const Override* Find(absl::string_view key) const;
  // Puts `record` under its target.key, replacing the one there. REQUIRES: not null.
  void Put(Record record, Owned& owned);
  // Removes the record under `key` (nothing when there is none).
  void Erase(absl::string_view key, Owned& owned);
  // Resizes the shards when the map outgrew them (a rebuild of every shard, rarely: when the size
  // quadruples); call at the end of an edit.
  void Rebalance();

  size_t size() const { return size_; }
  // Calls `fn` on every record, in no particular order.
  void ForEach(absl::FunctionRef<void(const Override&)> fn) const;

 private:
  // Keys are views of the target.key of the record they map to.
  using Shard = absl::flat_hash_map<absl::string_view, Record>;

  size_t ShardOf(absl::string_view key) const;
  Shard& MutableShard(size_t i, Owned& owned);

  // A power of two of them; never empty.
  std::vector<std::shared_ptr<Shard>> shards_;
  int shard_bits_ = 0;
  size_t size_ = 0;
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_OVERRIDES_OVERRIDE_MAP_H_
