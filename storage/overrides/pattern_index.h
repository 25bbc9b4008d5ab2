#ifndef RATELIMIT_STORAGE_OVERRIDES_PATTERN_INDEX_H_
#define RATELIMIT_STORAGE_OVERRIDES_PATTERN_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ratelimit {

// The patterns of one limit (PatternMatches), indexed to find those a key matches without trying
// each: a lookup costs a few hash probes per distinct length of the patterns' literal prefixes
// and suffixes, not one match per pattern.
//
// How. A pattern is its literal prefix (the bytes before its first '*'), its literal suffix (the
// bytes after its last '*') and what lies between. Patterns are grouped by (prefix, suffix). A key
// can only match a pattern whose prefix starts it and whose suffix ends it, with room for both: so
// for each distinct prefix length L that fits, the key's first L bytes are looked up among the
// prefixes, and for each distinct suffix length M of that prefix that fits beside it, the
// (prefix, key's last M bytes) group is looked up; its patterns are then checked by
// PatternMatches (a pattern with literals between its '*' needs it). Patterns sharing a prefix
// and suffix differ in those middle literals only (or in runs of '*'), so a group holding more
// than a few of them keys them further by their longest middle literal (the anchor): the key's
// substrings between the prefix and the suffix, one per distinct anchor length and offset, are
// looked up. A lookup thus never walks more than a few patterns that do not match, whatever the
// shapes: many prefixes ("tenant-<i>-*"), one empty prefix and many suffixes ("*-<i>"), or one
// prefix and suffix and many middles ("*-<i>-*"). Its cost grows with the number of distinct
// lengths (at most the key's length) and, for anchored groups, with the key's length.
//
// Memory: the patterns' bytes are not copied (the index holds views); about 100 to 200 bytes per
// pattern in hash slots and arrays (MemoryBytes).
//
// Thread safety: immutable after construction; thread-safe.
class PatternIndex {
 public:
  // The empty index.
  PatternIndex() = default;
  // An index of `patterns`, numbered by their position. REQUIRES: the bytes `patterns` view
  // outlive the index (they are not copied). A "pattern" without '*' matches only itself, as
  // PatternMatches has it.
  explicit PatternIndex(std::vector<absl::string_view> patterns);

  PatternIndex(PatternIndex&&) = default;
  PatternIndex& operator=(PatternIndex&&) = default;
  PatternIndex(const PatternIndex&) = delete;
  PatternIndex& operator=(const PatternIndex&) = delete;

  // The numbers of the patterns `key` matches (PatternMatches), in increasing order: given in
  // precedence order (MorePreciseThan), the most precise first.
  using Matches = absl::InlinedVector<uint32_t, 8>;
  Matches Match(absl::string_view key) const;

  size_t size() const { return patterns_.size(); }
  bool empty() const { return patterns_.empty(); }
  // The bytes the index holds beyond the patterns' own, approximately (hash slots and control
  // bytes at their capacity, arrays at theirs).
  size_t MemoryBytes() const;

 private:
  // A run of `lengths_` or `ids_`.
  struct Range {
    uint32_t begin = 0;
    uint32_t size = 0;
  };
  // The patterns of one (prefix, suffix).
  struct Group {
    // Numbered for `anchors_`.
    uint32_t number = 0;
    // In `ids_`: patterns checked one by one (all of them, unless the group is anchored).
    Range scan;
    // In `lengths_`: the distinct lengths of the anchors of the group's other patterns (in
    // `anchors_`), ascending; empty when the group is not anchored.
    Range anchor_lengths;
  };
  using PrefixSuffix = std::pair<absl::string_view, absl::string_view>;
  using GroupAnchor = std::pair<uint32_t, absl::string_view>;

  absl::Span<const uint32_t> Of(Range r, const std::vector<uint32_t>& v) const {
    return absl::MakeConstSpan(v.data() + r.begin, r.size);
  }
  // Adds to `out` the patterns of `ids` that match `key`.
  void Check(absl::Span<const uint32_t> ids, absl::string_view key, Matches& out) const;

  std::vector<absl::string_view> patterns_;
  // The distinct prefix lengths, ascending.
  std::vector<uint32_t> prefix_lengths_;
  // Prefix -> its distinct suffix lengths (in `lengths_`, ascending).
  absl::flat_hash_map<absl::string_view, Range> prefixes_;
  absl::flat_hash_map<PrefixSuffix, Group> groups_;
  // (group number, anchor) -> the anchored patterns (in `ids_`).
  absl::flat_hash_map<GroupAnchor, Range> anchors_;
  std::vector<uint32_t> lengths_;
  std::vector<uint32_t> ids_;
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_OVERRIDES_PATTERN_INDEX_H_
