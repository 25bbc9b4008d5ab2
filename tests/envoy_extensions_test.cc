// ShouldRateLimit beyond the reference: RateLimit-* response headers, store failures, and our
// extensions (token bucket, max_reserved), over real gRPC with a fake clock.
#include "gtest/gtest.h"
#include "storage/memory/memory_state_store.h"
#include "tests/support/envoy_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::EnvoyRequest;
using ::ratelimit::testing::FailingStateStore;
using ::ratelimit::testing::kSecond;
using Response = rlsv3::RateLimitResponse;
using EnvoyExtensionsTest = ::ratelimit::testing::EnvoyServiceTestBase;

TEST_F(EnvoyExtensionsTest, RateLimitResponseHeaders) {
  Start(
      "domain: h\ndescriptors:\n"
      "  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 20}\n"
      "  - key: b\n    rate_limit: {unit: second, requests_per_unit: 5}\n",
      /*headers=*/true);
  const Response r = Call("h", {{{{"a", "x"}}, 18}, {{{"b", "x"}}}});
  ASSERT_EQ(r.response_headers_to_add_size(), 3);
  EXPECT_EQ(r.response_headers_to_add(0).key(), "RateLimit-Limit");
  EXPECT_EQ(r.response_headers_to_add(0).value(), "20");
  EXPECT_EQ(r.response_headers_to_add(1).key(), "RateLimit-Remaining");
  EXPECT_EQ(r.response_headers_to_add(1).value(), "2");
  EXPECT_EQ(r.response_headers_to_add(2).key(), "RateLimit-Reset");
  EXPECT_EQ(r.response_headers_to_add(2).value(), "50");
  // No limited descriptor: no headers.
  EXPECT_EQ(Call("h", {{{{"none", "x"}}}}).response_headers_to_add_size(), 0);
}

TEST_F(EnvoyExtensionsTest, NoHeadersUnlessEnabled) {
  Start(
      "domain: h\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: "
      "20}\n");
  EXPECT_EQ(Call("h", {{{{"a", "x"}}}}).response_headers_to_add_size(), 0);
}

TEST_F(EnvoyExtensionsTest, StoreFailureIsUnavailable) {
  auto failing = std::make_unique<FailingStateStore>(std::make_unique<MemoryStateStore>());
  FailingStateStore* store = failing.get();
  Start(
      "domain: f\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 5}\n",
      false, std::move(failing));
  store->FailWith(absl::UnavailableError("disk on fire"));
  absl::StatusOr<Response> r = client_->ShouldRateLimit(EnvoyRequest("f", {{{{"a", "x"}}}}));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  // Nothing to evaluate: no store access, no failure.
  EXPECT_OK(client_->ShouldRateLimit(EnvoyRequest("f", {{{{"none", "x"}}}})));
  store->Heal();
  EXPECT_EQ(Call("f", {{{{"a", "x"}}}}).statuses(0).limit_remaining(), 4u);
}

TEST_F(EnvoyExtensionsTest, TokenBucketExtension) {
  Start(
      "domain: t\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n"
      "      requests_per_unit: 10\n      algorithm: token_bucket\n      burst: 20\n");
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(Call("t", {{{{"a", "x"}}}}).statuses(0).limit_remaining(),
              static_cast<uint32_t>(19 - i));
  }
  Response over = Call("t", {{{{"a", "x"}}}});
  EXPECT_EQ(over.overall_code(), Response::OVER_LIMIT);
  EXPECT_EQ(over.statuses(0).duration_until_reset().seconds(), 2);  // 20 tokens at 10/s
  clock_.Advance(kSecond / 2);                                      // 5 tokens back, continuously
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(Call("t", {{{{"a", "x"}}}}).overall_code(), Response::OK) << i;
  }
  EXPECT_EQ(Call("t", {{{{"a", "x"}}}}).overall_code(), Response::OVER_LIMIT);
}

TEST_F(EnvoyExtensionsTest, MaxReservedLetsOneRequestGoIntoDebt) {
  Start(
      "domain: r\ndescriptors:\n  - key: tokens\n    rate_limit:\n      unit: minute\n"
      "      requests_per_unit: 60\n      algorithm: token_bucket\n      max_reserved: 100\n"
      "  - key: plain\n    rate_limit: {unit: minute, requests_per_unit: 60}\n");
  // A request larger than what is left is admitted, leaving a debt of 30 ...
  Response r = Call("r", {{{{"tokens", "u"}}, 90}});
  EXPECT_EQ(r.overall_code(), Response::OK);
  EXPECT_EQ(r.statuses(0).limit_remaining(), 0u);
  EXPECT_EQ(r.statuses(0).duration_until_reset().seconds(), 90);  // 90 tokens at 1/s
  // ... after which nothing is admitted until the debt is repaid.
  EXPECT_EQ(Call("r", {{{{"tokens", "u"}}, 1}}).overall_code(), Response::OVER_LIMIT);
  clock_.Advance(30 * kSecond);  // back to 0: still no whole token
  EXPECT_EQ(Call("r", {{{{"tokens", "u"}}, 1}}).overall_code(), Response::OVER_LIMIT);
  clock_.Advance(kSecond);
  EXPECT_EQ(Call("r", {{{{"tokens", "u"}}, 1}}).overall_code(), Response::OK);
  // Debt is bounded by max_reserved, and rules without max_reserved never go into debt.
  clock_.Advance(120 * kSecond);
  EXPECT_EQ(Call("r", {{{{"tokens", "v"}}, 161}}).overall_code(), Response::OVER_LIMIT);
  EXPECT_EQ(Call("r", {{{{"tokens", "v"}}, 160}, {{{"plain", "v"}}, 61}}).overall_code(),
            Response::OVER_LIMIT);
  EXPECT_EQ(Call("r", {{{{"tokens", "v"}}, 160}, {{{"plain", "v"}}, 60}}).overall_code(),
            Response::OK);
}

}  // namespace
}  // namespace ratelimit
