// Google Benchmark: what overrides add to a decision — resolving a limit's config for a key
// (OverrideIndex::Adjust through ApplyOverrides) with 0, 1,000 and 100,000 overrides present,
// half of them patterns, spread over 100 limits or all on the limit decided; and with patterns of
// realistic shapes all on the limit decided, for a key that matches none or one of them.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "storage/limiter.h"
#include "storage/overrides/override_index.h"
#include "storage/overrides/pattern_index.h"

namespace ratelimit {
namespace {

constexpr int64_t kNow = 1'700'000'000'000'000;

// `n` overrides over `limits` limits ("l0".."l<limits-1>"): exact keys "k<i>" and patterns
// "p<i>-*", alternately.
std::shared_ptr<const OverrideIndex> Index(int n, int limits) {
  std::vector<Override> all;
  all.reserve(n);
  for (int i = 0; i < n; ++i) {
    Override o;
    o.target.name = absl::StrCat("l", i % limits);
    o.target.pattern = i % 2 == 1;
    o.target.key = o.target.pattern ? absl::StrCat("p", i, "-*") : absl::StrCat("k", i);
    o.action.capacity = 100;
    o.set_at_us = kNow - 1;
    all.push_back(std::move(o));
  }
  return OverrideIndex::Build(std::move(all), 1);
}

// Adjusts limit "l0" for a key that no override matches (the common case: every pattern of the
// limit is tried), as the service does for each limit of a request.
void BM_ApplyOverrides(benchmark::State& state) {
  const auto index = Index(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  LimitConfig base;
  base.rate = 10;
  base.period_us = 1'000'000;
  LimitRequests limits(1);
  for (auto _ : state) {
    limits[0].name = "l0";
    limits[0].key = "user-1234567";
    limits[0].config = base;
    ApplyOverrides(*index, kNow, absl::MakeSpan(limits));
    benchmark::DoNotOptimize(limits);
  }
}
BENCHMARK(BM_ApplyOverrides)
    ->Args({0, 1})
    ->Args({1000, 100})
    ->Args({100000, 100})
    ->Args({1000, 1})
    ->Args({100000, 1});

// `n` overrides on limit "l0": exact keys "k<i>" and patterns alternately, the patterns of three
// shapes in turn: a tenant's keys "tenant-<i>-*", a region's keys "*-<i>" (an empty literal
// prefix), and "p<i>-*-x" (a literal prefix and suffix).
std::shared_ptr<const OverrideIndex> ShapedIndex(int n) {
  std::vector<Override> all;
  all.reserve(n);
  for (int i = 0; i < n; ++i) {
    Override o;
    o.target.name = "l0";
    o.target.pattern = i % 2 == 1;
    if (!o.target.pattern) {
      o.target.key = absl::StrCat("k", i);
    } else if (i / 2 % 3 == 0) {
      o.target.key = absl::StrCat("tenant-", i, "-*");
    } else if (i / 2 % 3 == 1) {
      o.target.key = absl::StrCat("*-", i);
    } else {
      o.target.key = absl::StrCat("p", i, "-*-x");
    }
    o.action.capacity = 100;
    o.set_at_us = kNow - 1;
    all.push_back(std::move(o));
  }
  return OverrideIndex::Build(std::move(all), 1);
}

// Adjusts limit "l0" among ShapedIndex(range(0)) for a key that matches no override (range(1) 0)
// or exactly one pattern, "p<i>-*-x" (range(1) 1: the override then applies).
void BM_ApplyShapedOverrides(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const auto index = ShapedIndex(n);
  // The last "p<i>-*-x" pattern: i odd, i / 2 % 3 == 2.
  int last = -1;
  for (int i = 0; i < n; ++i) {
    if (i % 2 == 1 && i / 2 % 3 == 2) last = i;
  }
  const std::string key =
      state.range(1) == 1 && last >= 0 ? absl::StrCat("p", last, "-user-7-x") : "user-1234567";
  LimitConfig base;
  base.rate = 10;
  base.period_us = 1'000'000;
  LimitRequests limits(1);
  for (auto _ : state) {
    limits[0].name = "l0";
    limits[0].key = key;
    limits[0].config = base;
    limits[0].override_target.clear();
    ApplyOverrides(*index, kNow, absl::MakeSpan(limits));
    benchmark::DoNotOptimize(limits);
  }
  if (state.range(1) == 1 && limits[0].override_target != absl::StrCat("p", last, "-*-x")) {
    state.SkipWithError("the key did not get its pattern");
  }
}
BENCHMARK(BM_ApplyShapedOverrides)
    ->Args({0, 0})
    ->Args({1000, 0})
    ->Args({100000, 0})
    ->Args({1000, 1})
    ->Args({100000, 1});

// Builds the index of ShapedIndex(range(0))'s overrides, as a server does at each new version
// of the store.
void BM_BuildShapedIndex(benchmark::State& state) {
  const std::vector<Override> all = ShapedIndex(static_cast<int>(state.range(0)))->All();
  for (auto _ : state) {
    benchmark::DoNotOptimize(OverrideIndex::Build(all, 1));
  }
}
BENCHMARK(BM_BuildShapedIndex)->Arg(100000)->Unit(benchmark::kMillisecond);

// Makes the next version of ShapedIndex(range(0)) by one change (OverrideIndex::Apply), as a
// replica does for each change it reads: range(1) 0 replaces an exact key's override, 1 sets a
// new pattern (the recent patterns' index rebuilt, and every max(64, sqrt(n)) such changes the
// limit's whole pattern index: a compaction, included at its rate), 2 replaces a pattern's.
void BM_ApplyOneChange(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  std::shared_ptr<const OverrideIndex> index = ShapedIndex(n);
  std::vector<OverrideStore::ChangedTarget> change(1);
  Override& o = change[0].record.emplace();
  o.target.name = "l0";
  o.action.capacity = 7;
  o.set_at_us = kNow - 1;
  uint64_t version = 1;
  int64_t i = 0;
  for (auto _ : state) {
    switch (state.range(1)) {
      case 0:
        o.target.pattern = false;
        o.target.key = absl::StrCat("k", 2 * (i % (n / 2)));
        break;
      case 1:
        o.target.pattern = true;
        o.target.key = absl::StrCat("new-", i, "-*");
        break;
      default:
        o.target.pattern = true;
        o.target.key = absl::StrCat("tenant-", 1 + 6 * (i % (n / 6)), "-*");
    }
    ++i;
    change[0].target = o.target;
    index = index->Apply(change, ++version);
    benchmark::DoNotOptimize(index);
  }
}
BENCHMARK(BM_ApplyOneChange)
    ->Args({100000, 0})
    ->Args({100000, 1})
    ->Args({100000, 2})
    ->Unit(benchmark::kMicrosecond);

// The memory of the PatternIndex of ShapedIndex(range(0))'s patterns, per pattern (the counter
// bytes_per_pattern; the patterns' own bytes, held by their overrides, not included).
void BM_PatternIndexMemory(benchmark::State& state) {
  const auto index = ShapedIndex(static_cast<int>(state.range(0)));
  std::vector<absl::string_view> patterns;
  for (const Override& o : index->All()) {
    if (o.target.pattern) patterns.push_back(o.target.key);
  }
  const PatternIndex pattern_index(patterns);
  for (auto _ : state) {
    benchmark::DoNotOptimize(pattern_index.Match("user-1234567"));
  }
  state.counters["bytes_per_pattern"] =
      static_cast<double>(pattern_index.MemoryBytes()) / static_cast<double>(patterns.size());
}
BENCHMARK(BM_PatternIndexMemory)->Arg(1000)->Arg(100000);

}  // namespace
}  // namespace ratelimit

BENCHMARK_MAIN();
