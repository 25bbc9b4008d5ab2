// Google Benchmark: what overrides add to a decision — resolving a limit's config for a key
// (OverrideIndex::Adjust through ApplyOverrides) with 0, 1,000 and 100,000 overrides present,
// half of them patterns, spread over 100 limits or all on the limit decided.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "storage/limiter.h"
#include "storage/overrides/override_index.h"

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

}  // namespace
}  // namespace ratelimit

BENCHMARK_MAIN();
