#ifndef RATELIMIT_STORAGE_OVERRIDES_OVERRIDE_INDEX_H_
#define RATELIMIT_STORAGE_OVERRIDES_OVERRIDE_INDEX_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "storage/limit_config.h"
#include "storage/overrides/override.h"
#include "storage/overrides/override_map.h"
#include "storage/overrides/override_store.h"
#include "storage/overrides/pattern_index.h"

namespace ratelimit {

struct LimitRequest;  // storage/limiter.h

// Every override of a store at one version, indexed for the decision path: by limit name, an
// exact-key map and the patterns in precedence order (MorePreciseThan) behind PatternIndexes that
// find the few a key matches without trying each. A decision reads it without any store call.
// Tombstones and expired overrides are kept: a key's change back to its limit is computed from them
// (docs/overrides.md).
//
// Versions. An index is immutable; a new version is made from the previous one by Apply, which
// shares everything the changes do not touch, so that one change costs microseconds with 100,000
// overrides instead of a rebuild (Build):
// - the records (shared_ptr<const Override>) are shared, never copied;
// - each limit's keys and patterns are OverrideMaps, copy-on-write in about sqrt(n) shards: a
//   change copies one shard;
// - a limit's patterns are indexed in two PatternIndexes: `base`, built by Build or by the last
//   compaction, and `recent`, of the patterns added since, rebuilt by each Apply that adds one
//   (it holds at most max(64, sqrt(|base|)) of them); past that bound both are rebuilt into one
//   `base` (a compaction, amortized over the sqrt(n) changes before it). A lookup merges the
//   matches of both in precedence order. A pattern whose record was removed may stay in a
//   PatternIndex until the next compaction; its lookup finds no record and skips it.
// Readers hold a version through a shared_ptr (ConfigSnapshot); the refresher swaps in the next
// one. A reader never sees a half-applied change and never waits for one being applied.
//
// Thread safety: immutable once made by Build or Apply; thread-safe.
class OverrideIndex {
 public:
  // The empty index (no override at version 0).
  OverrideIndex() = default;

  // An index of `overrides` (at most one per target), read from a store at `version`.
  static std::shared_ptr<const OverrideIndex> Build(std::vector<Override> overrides,
                                                    uint64_t version);
  // This index with `changed` applied (each target's record replaced by the one given, or removed
  // when none is), at `version`: the index Build would make of the records this one was made of
  // with the same changes. This index is unchanged and shares most of its memory with the result.
  std::shared_ptr<const OverrideIndex> Apply(absl::Span<const OverrideStore::ChangedTarget> changed,
                                             uint64_t version) const;

  // Adjusts `config`, the configured limit `name` of the limits file, for `key` at `now_us`: the
  // override that applies (an exact key, else the most precise pattern, among those in force)
  // replaces its fields, and LimitConfig::adjustment carries the key's latest change (an
  // override set, or ended by deletion or expiry) so that its state crosses it exactly. Returns
  // the override that applies, or nullptr (the configured limit decides; `config` may still
  // carry the change back to it). An override that would make an invalid limit of `config` (the
  // file changed under it) is inert: it is skipped.
  const Override* Adjust(absl::string_view name, absl::string_view key, int64_t now_us,
                         LimitConfig& config) const {
    return AdjustIndexed(name, key, now_us, config);
  }
  // As above, for the limit `name` of `source` (kDefined: the limits file, as above; kEnvoy: an
  // Envoy rule by its state name; kInline limits take no override: nullptr).
  const Override* Adjust(LimitSource source, absl::string_view name, absl::string_view key,
                         int64_t now_us, LimitConfig& config) const {
    if (source == LimitSource::kDefined) return AdjustIndexed(name, key, now_us, config);
    if (source != LimitSource::kEnvoy) return nullptr;
    return AdjustIndexed(IndexName(source, name), key, now_us, config);
  }

  // Whether no limit has an override (the decision path then does nothing).
  bool empty() const { return by_name_.empty(); }
  uint64_t version() const { return version_; }
  // How many overrides, tombstones included.
  size_t size() const { return size_; }
  // Calls `fn` on every override, tombstones included, in no particular order.
  void ForEach(absl::FunctionRef<void(const Override&)> fn) const;
  // Every override, tombstones included, in (source, name, exact keys by key, then patterns most
  // precise first) order: a copy, for listing and tests, not for the decision path.
  std::vector<Override> All() const;

 private:
  // The name a limit of `source` is indexed under: a limits file's limit by its name, any other
  // source's behind a control character and the source (names hold no control characters).
  static std::string IndexName(LimitSource source, absl::string_view name) {
    if (source == LimitSource::kDefined) return std::string(name);
    std::string out = {'\x01', static_cast<char>(source)};
    out.append(name.data(), name.size());
    return out;
  }

  // Patterns in precedence order and their index (immutable, shared between versions).
  struct PatternLevel {
    std::vector<std::string> patterns;  // most precise first
    PatternIndex index;                 // of `patterns`, numbered alike
  };
  struct PerLimit {
    OverrideMap exact;
    OverrideMap patterns;
    // Every pattern of `patterns` is in one of the two (and a removed one may linger in either).
    std::shared_ptr<const PatternLevel> base, recent;
  };

  static std::shared_ptr<const PatternLevel> MakeLevel(std::vector<std::string> patterns);
  const Override* AdjustIndexed(absl::string_view index_name, absl::string_view key, int64_t now_us,
                                LimitConfig& config) const;

  absl::flat_hash_map<std::string, std::shared_ptr<PerLimit>> by_name_;
  uint64_t version_ = 0;
  size_t size_ = 0;
};

// Adjusts every limit of `limits` that comes from the limits file by `index` at `now_us`
// (OverrideIndex::Adjust), recording in LimitRequest::override_target the key or pattern of the
// override that applies.
void ApplyOverrides(const OverrideIndex& index, int64_t now_us, absl::Span<LimitRequest> limits);

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_OVERRIDES_OVERRIDE_INDEX_H_
