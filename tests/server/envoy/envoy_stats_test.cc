// The per-rule statistics of the Envoy API, the reference's near_limit arithmetic included.
#include "server/envoy/envoy_stats.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ratelimit {
namespace {

EnvoyRateLimit FixedWindow(uint32_t rpu) {
  EnvoyRateLimit r;
  r.limit_name = "d.k";
  EnvoyLimit& l = r.limits.emplace_back();
  l.requests_per_unit = rpu;
  l.unit = EnvoyUnit::kMinute;
  return r;
}

EnvoyDescriptorPlan Limited(const EnvoyRateLimit& rule, uint64_t hits = 1) {
  EnvoyDescriptorPlan p;
  p.kind = EnvoyDescriptorPlan::Kind::kLimited;
  p.config_rule = &rule;
  p.stat_key = rule.limit_name;
  p.hits = hits;
  p.check_only = hits == 0;
  p.shadow = rule.shadow_mode;
  return p;
}

// One request with one descriptor of `rule`, allowed with `left` tokens after it, or over with
// `left` tokens before it.
void Hit(EnvoyStats& stats, const EnvoyRateLimit& rule, uint64_t hits, bool over, double left) {
  const std::vector<EnvoyDescriptorPlan> plan = {Limited(rule, hits)};
  const std::vector<EnvoyOutcome> outcomes = {{over, left, 0}};
  stats.Record(plan, outcomes);
}

// The reference's scenario: a limit of 10 and NEAR_LIMIT_RATIO 0.8 (threshold 8). Hits 9 and 10
// are near the limit; the 11th and later are over it and not near.
TEST(EnvoyStatsTest, NearLimitCountsHitsPastTheRatio) {
  const EnvoyRateLimit rule = FixedWindow(10);
  EnvoyStats stats;
  for (int used = 1; used <= 10; ++used) Hit(stats, rule, 1, false, 10 - used);
  Hit(stats, rule, 1, true, 0);
  Hit(stats, rule, 1, true, 0);
  const EnvoyRuleCounters c = stats.Snapshot().at("d.k");
  EXPECT_EQ(c.total_hits, 12u);
  EXPECT_EQ(c.within_limit, 10u);
  EXPECT_EQ(c.over_limit, 2u);
  EXPECT_EQ(c.near_limit, 2u);
}

TEST(EnvoyStatsTest, NearLimitCountsOnlyThePartOfHitsAddendPastTheThreshold) {
  const EnvoyRateLimit rule = FixedWindow(10);
  // 5 -> 9: the 9th is past 8.
  EXPECT_EQ(EnvoyNearLimitHits(rule.limits[0], {false, 1, 0}, 4, true, 0.8), 1u);
  // 8 -> 10 from past the threshold: all of them.
  EXPECT_EQ(EnvoyNearLimitHits(rule.limits[0], {false, 0, 0}, 2, true, 0.8), 2u);
  // 2 -> 8: not past it.
  EXPECT_EQ(EnvoyNearLimitHits(rule.limits[0], {false, 2, 0}, 6, true, 0.8), 0u);
  // Over: 7 used and 5 more asked; the 9th and 10th would have been near (the reference's
  // limit - max(threshold, before)).
  EXPECT_EQ(EnvoyNearLimitHits(rule.limits[0], {true, 3, 0}, 5, false, 0.8), 2u);
  // Over with the limit reached before: none.
  EXPECT_EQ(EnvoyNearLimitHits(rule.limits[0], {true, 0, 0}, 3, false, 0.8), 0u);
  // hits_addend 0 (a check) adds nothing.
  EXPECT_EQ(EnvoyNearLimitHits(rule.limits[0], {false, 1, 0}, 0, true, 0.8), 0u);
  // The ratio moves the threshold: 0.5 of 10 is 5; 4 -> 6 has one hit past it.
  EXPECT_EQ(EnvoyNearLimitHits(rule.limits[0], {false, 4, 0}, 2, true, 0.5), 1u);
  // Ratio 1: nothing is near.
  EXPECT_EQ(EnvoyNearLimitHits(rule.limits[0], {false, 0, 0}, 1, true, 1.0), 0u);
}

// A token bucket's "used" is what is missing from a full bucket (burst), in whole tokens.
TEST(EnvoyStatsTest, NearLimitOfATokenBucketIsWhatIsMissingFromAFullBucket) {
  EnvoyRateLimit rule = FixedWindow(10);
  rule.limits[0].algorithm = EnvoyAlgorithm::kTokenBucket;
  rule.limits[0].burst = 20;  // threshold 16
  // 3.5 tokens left after one hit: 3 whole ones, so 17 used, past 16.
  EXPECT_EQ(EnvoyNearLimitHits(rule.limits[0], {false, 3.5, 0}, 1, true, 0.8), 1u);
  // 4.5 left: 16 used, not past the threshold.
  EXPECT_EQ(EnvoyNearLimitHits(rule.limits[0], {false, 4.5, 0}, 1, true, 0.8), 0u);
}

// When another descriptor denied the request, nothing was consumed and an allowed descriptor's
// value is its balance before the hits: the hits it would have taken are judged from there.
TEST(EnvoyStatsTest, NearLimitOfAnUnconsumedRequestCountsFromTheBalanceBefore) {
  const EnvoyRateLimit a = FixedWindow(10);
  EnvoyRateLimit b = FixedWindow(1);
  b.limit_name = "d.b";
  const std::vector<EnvoyDescriptorPlan> plan = {Limited(a), Limited(b)};
  EnvoyStats stats;
  // a has 2 left before (8 used): its hit would be the 9th, near. b is over.
  const std::vector<EnvoyOutcome> outcomes = {{false, 2, 0}, {true, 0, 0}};
  stats.Record(plan, outcomes);
  EXPECT_EQ(stats.Snapshot().at("d.k").near_limit, 1u);
  EXPECT_EQ(stats.Snapshot().at("d.b").near_limit, 0u);
}

TEST(EnvoyStatsTest, ShadowOverLimitIsCountedAsTheReferenceDoes) {
  EnvoyRateLimit rule = FixedWindow(2);
  rule.shadow_mode = true;
  EnvoyStats stats;
  Hit(stats, rule, 1, false, 1);  // 1 of 2: threshold floor(1.6) = 1, not past it
  Hit(stats, rule, 1, false, 0);  // 2 of 2: near
  Hit(stats, rule, 1, true, 0);   // over, reported OK
  const EnvoyRuleCounters c = stats.Snapshot().at("d.k");
  EXPECT_EQ(c.total_hits, 3u);
  EXPECT_EQ(c.within_limit, 2u);
  EXPECT_EQ(c.over_limit, 1u);
  EXPECT_EQ(c.shadow_mode, 1u);
  EXPECT_EQ(c.near_limit, 1u);
}

// Requests for domains the configuration lacks are counted by domain, the first
// kMaxUnknownDomains apart and the rest together, so callers cannot grow the counters unbounded.
TEST(EnvoyStatsTest, DomainsNotFoundAreCountedUpToABound) {
  EnvoyStats stats;
  stats.RecordDomainNotFound("egde");
  stats.RecordDomainNotFound("egde");
  EXPECT_EQ(stats.DomainsNotFound().at("egde"), 2u);
  for (size_t i = 0; i < 2 * EnvoyStats::kMaxUnknownDomains; ++i) {
    stats.RecordDomainNotFound(absl::StrCat("d", i));
  }
  const auto counted = stats.DomainsNotFound();
  EXPECT_EQ(counted.size(), EnvoyStats::kMaxUnknownDomains);
  EXPECT_EQ(counted.at("egde"), 2u);
  // 62 more got places of their own; the other 66 share the last.
  EXPECT_EQ(counted.at(EnvoyStats::kOtherDomains), 2 * EnvoyStats::kMaxUnknownDomains - 62);
  stats.RecordDomainNotFound("egde");
  EXPECT_EQ(stats.DomainsNotFound().at("egde"), 3u);
}

}  // namespace
}  // namespace ratelimit
