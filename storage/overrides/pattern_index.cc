#include "storage/overrides/pattern_index.h"

#include <algorithm>
#include <tuple>
#include <type_traits>

#include "storage/overrides/override.h"

namespace ratelimit {
namespace {

// A group with at most this many patterns with literals between their '*' is scanned: keying
// them by anchor would cost a lookup per offset of the key instead.
constexpr size_t kMaxScannedMiddles = 8;

// A pattern's literal prefix and suffix. Without '*', the pattern is its prefix.
std::pair<absl::string_view, absl::string_view> Ends(absl::string_view pattern) {
  const size_t first = pattern.find('*');
  if (first == absl::string_view::npos) return {pattern, absl::string_view()};
  return {pattern.substr(0, first), pattern.substr(pattern.rfind('*') + 1)};
}

// The longest literal between a pattern's first and last '*' (the first of the longest), or ""
// when there is none.
absl::string_view Anchor(absl::string_view pattern) {
  const size_t first = pattern.find('*');
  const size_t last = pattern.rfind('*');
  if (first == last) return absl::string_view();  // no '*', or one
  absl::string_view middle = pattern.substr(first + 1, last - first - 1);
  absl::string_view longest;
  while (!middle.empty()) {
    const size_t star = std::min(middle.find('*'), middle.size());
    if (star > longest.size()) longest = middle.substr(0, star);
    middle.remove_prefix(std::min(star + 1, middle.size()));
  }
  return longest;
}

void SortUnique(std::vector<uint32_t>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

}  // namespace

PatternIndex::PatternIndex(std::vector<absl::string_view> patterns)
    : patterns_(std::move(patterns)) {
  // Each pattern's ends and anchor, sorted so that the patterns of a prefix, of a group and of an
  // anchor are runs: one pass over them fills the maps, with no container per group.
  struct Shape {
    absl::string_view prefix, suffix, anchor;
    uint32_t id;
  };
  std::vector<Shape> shapes;
  shapes.reserve(patterns_.size());
  for (uint32_t id = 0; id < patterns_.size(); ++id) {
    const auto [prefix, suffix] = Ends(patterns_[id]);
    shapes.push_back({prefix, suffix, Anchor(patterns_[id]), id});
  }
  std::sort(shapes.begin(), shapes.end(), [](const Shape& a, const Shape& b) {
    return std::tie(a.prefix, a.suffix, a.id) < std::tie(b.prefix, b.suffix, b.id);
  });
  size_t prefixes = 0, groups = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const bool new_prefix = i == 0 || shapes[i].prefix != shapes[i - 1].prefix;
    prefixes += new_prefix;
    groups += new_prefix || shapes[i].suffix != shapes[i - 1].suffix;
  }
  prefixes_.reserve(prefixes);
  groups_.reserve(groups);
  ids_.reserve(shapes.size());

  auto append = [](const std::vector<uint32_t>& from, std::vector<uint32_t>& to) {
    const Range r{static_cast<uint32_t>(to.size()), static_cast<uint32_t>(from.size())};
    to.insert(to.end(), from.begin(), from.end());
    return r;
  };
  auto ids_of = [this](auto begin, auto end) {
    const Range r{static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(end - begin)};
    for (auto s = begin; s != end; ++s) ids_.push_back(s->id);
    return r;
  };
  auto has_anchor = [](const Shape& s) { return !s.anchor.empty(); };
  std::vector<uint32_t> suffix_lengths, anchor_lengths;
  for (auto p = shapes.begin(); p != shapes.end();) {
    const auto p_end =
        std::find_if(p, shapes.end(), [&](const Shape& s) { return s.prefix != p->prefix; });
    suffix_lengths.clear();
    for (auto g = p; g != p_end;) {
      const auto g_end =
          std::find_if(g, p_end, [&](const Shape& s) { return s.suffix != g->suffix; });
      suffix_lengths.push_back(static_cast<uint32_t>(g->suffix.size()));
      Group group;
      group.number = static_cast<uint32_t>(groups_.size());
      if (static_cast<size_t>(std::count_if(g, g_end, has_anchor)) <= kMaxScannedMiddles) {
        group.scan = ids_of(g, g_end);
      } else {
        // Those without an anchor are scanned; the others are found by their anchor.
        const auto anchored =
            std::stable_partition(g, g_end, [&](const Shape& s) { return !has_anchor(s); });
        group.scan = ids_of(g, anchored);
        std::sort(anchored, g_end, [](const Shape& a, const Shape& b) {
          return std::tie(a.anchor, a.id) < std::tie(b.anchor, b.id);
        });
        anchor_lengths.clear();
        for (auto a = anchored; a != g_end;) {
          const auto a_end =
              std::find_if(a, g_end, [&](const Shape& s) { return s.anchor != a->anchor; });
          anchors_.emplace(GroupAnchor(group.number, a->anchor), ids_of(a, a_end));
          anchor_lengths.push_back(static_cast<uint32_t>(a->anchor.size()));
          a = a_end;
        }
        SortUnique(anchor_lengths);
        group.anchor_lengths = append(anchor_lengths, lengths_);
      }
      groups_.emplace(PrefixSuffix(g->prefix, g->suffix), group);
      g = g_end;
    }
    SortUnique(suffix_lengths);
    prefixes_.emplace(p->prefix, append(suffix_lengths, lengths_));
    prefix_lengths_.push_back(static_cast<uint32_t>(p->prefix.size()));
    p = p_end;
  }
  SortUnique(prefix_lengths_);
  patterns_.shrink_to_fit();
  prefix_lengths_.shrink_to_fit();
  lengths_.shrink_to_fit();
}

void PatternIndex::Check(absl::Span<const uint32_t> ids, absl::string_view key,
                         Matches& out) const {
  for (uint32_t id : ids) {
    if (PatternMatches(patterns_[id], key)) out.push_back(id);
  }
}

PatternIndex::Matches PatternIndex::Match(absl::string_view key) const {
  Matches out;
  bool anchored = false;  // an anchor may occur at several offsets: a match may repeat
  for (uint32_t l : prefix_lengths_) {
    if (l > key.size()) break;
    const absl::string_view prefix = key.substr(0, l);
    const auto p = prefixes_.find(prefix);
    if (p == prefixes_.end()) continue;
    for (uint32_t m : Of(p->second, lengths_)) {
      if (l + m > key.size()) break;
      const auto g = groups_.find(PrefixSuffix(prefix, key.substr(key.size() - m)));
      if (g == groups_.end()) continue;
      const Group& group = g->second;
      Check(Of(group.scan, ids_), key, out);
      for (uint32_t a : Of(group.anchor_lengths, lengths_)) {
        if (l + a + m > key.size()) break;
        anchored = true;
        for (size_t at = l; at + a + m <= key.size(); ++at) {
          const auto hit = anchors_.find(GroupAnchor(group.number, key.substr(at, a)));
          if (hit != anchors_.end()) Check(Of(hit->second, ids_), key, out);
        }
      }
    }
  }
  std::sort(out.begin(), out.end());
  if (anchored) out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

size_t PatternIndex::MemoryBytes() const {
  auto map_bytes = [](const auto& map) {
    using Slot = typename std::decay_t<decltype(map)>::value_type;
    return map.capacity() * (sizeof(Slot) + 1);
  };
  return sizeof(*this) + patterns_.capacity() * sizeof(absl::string_view) +
         (prefix_lengths_.capacity() + lengths_.capacity() + ids_.capacity()) * sizeof(uint32_t) +
         map_bytes(prefixes_) + map_bytes(groups_) + map_bytes(anchors_);
}

}  // namespace ratelimit
