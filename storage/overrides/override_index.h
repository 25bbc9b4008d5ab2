#ifndef RATELIMIT_STORAGE_OVERRIDES_OVERRIDE_INDEX_H_
#define RATELIMIT_STORAGE_OVERRIDES_OVERRIDE_INDEX_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "storage/limit_config.h"
#include "storage/overrides/override.h"
#include "storage/overrides/pattern_index.h"

namespace ratelimit {

struct LimitRequest;  // storage/limiter.h

// Every override of a store at one version, indexed for the decision path: by limit name, an
// exact-key map and a PatternIndex of the patterns in precedence order (MorePreciseThan), which
// finds the few a key matches without trying each. A decision reads it without any store call.
// Tombstones and expired overrides are kept: a key's change back to its limit is computed from them
// (docs/overrides.md).
//
// Thread safety: immutable after Build; thread-safe.
class OverrideIndex {
 public:
  // The empty index (no override at version 0).
  OverrideIndex() = default;

  // An index of `overrides` (at most one per target), read from a store at `version`: those of
  // the limits file and of Envoy rules.
  static std::shared_ptr<const OverrideIndex> Build(std::vector<Override> overrides,
                                                    uint64_t version);

  // Adjusts `config`, the configured limit `name` of the limits file, for `key` at `now_us`: the
  // override that applies (an exact key, else the most precise pattern, among those in force)
  // replaces its fields, and LimitConfig::adjustment carries the key's latest change (an
  // override set, or ended by deletion or expiry) so that its state crosses it exactly. Returns
  // the override that applies, or nullptr (the configured limit decides; `config` may still
  // carry the change back to it). An override that would make an invalid limit of `config` (the
  // file changed under it) is inert: it is skipped.
  const Override* Adjust(absl::string_view name, absl::string_view key, int64_t now_us,
                         LimitConfig& config) const;
  // As above, for the limit `name` of `source` (kDefined: the limits file, as above; kEnvoy: an
  // Envoy rule by its state name).
  const Override* Adjust(LimitSource source, absl::string_view name, absl::string_view key,
                         int64_t now_us, LimitConfig& config) const {
    if (source == LimitSource::kDefined) return Adjust(name, key, now_us, config);
    return Adjust(IndexName(source, name), key, now_us, config);
  }

  // Whether no limit has an override (the decision path then does nothing).
  bool empty() const { return by_name_.empty(); }
  uint64_t version() const { return version_; }
  // Every override, tombstones included, in (name, exact keys, then patterns) order.
  const std::vector<Override>& all() const { return all_; }

 private:
  // The name a limit of `source` is indexed under: a limits file's limit by its name, any other
  // source's behind a control character and the source (names hold no control characters).
  static std::string IndexName(LimitSource source, absl::string_view name) {
    std::string out = {'\x01', static_cast<char>(source)};
    out.append(name.data(), name.size());
    return out;
  }

  struct PerLimit {
    absl::flat_hash_map<std::string, const Override*> exact;
    std::vector<const Override*> patterns;  // most precise first
    PatternIndex pattern_index;             // of `patterns`' keys, numbered alike
  };

  std::vector<Override> all_;
  absl::flat_hash_map<std::string, PerLimit> by_name_;
  uint64_t version_ = 0;
};

// Adjusts every limit of `limits` that comes from the limits file by `index` at `now_us`
// (OverrideIndex::Adjust), recording in LimitRequest::override_target the key or pattern of the
// override that applies.
void ApplyOverrides(const OverrideIndex& index, int64_t now_us, absl::Span<LimitRequest> limits);

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_OVERRIDES_OVERRIDE_INDEX_H_
