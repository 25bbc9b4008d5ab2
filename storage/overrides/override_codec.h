#ifndef RATELIMIT_STORAGE_OVERRIDES_OVERRIDE_CODEC_H_
#define RATELIMIT_STORAGE_OVERRIDES_OVERRIDE_CODEC_H_

// How a store lays out the overrides and their audit history: keys that sort by (source, name,
// exact keys before patterns, key), and versioned values of fixed-width little-endian numbers and
// length-prefixed strings.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "storage/overrides/override.h"
#include "storage/overrides/override_store.h"

namespace ratelimit {

// "o" source name '\0' ('k' | 'p') key: every record of one limit is one contiguous range
// (OverrideNamePrefix), since names hold no control characters.
std::string EncodeOverrideKey(const OverrideTarget& target);
std::string OverrideNamePrefix(LimitSource source, absl::string_view name);
// "o": every record.
inline constexpr char kOverrideKeyPrefix[] = "o";
// "a" + the sequence as 8 big-endian bytes: the audit entries in order.
std::string EncodeAuditKey(uint64_t sequence);
inline constexpr char kAuditKeyPrefix[] = "a";
// The version counter's key; its value is 8 little-endian bytes.
inline constexpr char kOverrideVersionKey[] = "v";

std::string EncodeOverride(const Override& o);
// nullopt when `bytes` is not an encoding of this format.
std::optional<Override> DecodeOverride(absl::string_view bytes);

std::string EncodeAuditEntry(const OverrideAuditEntry& e);
std::optional<OverrideAuditEntry> DecodeAuditEntry(absl::string_view bytes);

// The targets of `entries` (in sequence order, each with its target set), one per target at its
// latest entry, in the order of those entries; records unset. Both stores' ChangesSince read the
// history through it.
std::vector<OverrideStore::ChangedTarget> LatestPerTarget(std::vector<OverrideAuditEntry> entries);

std::string EncodeU64(uint64_t v);
std::optional<uint64_t> DecodeU64(absl::string_view bytes);

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_OVERRIDES_OVERRIDE_CODEC_H_
