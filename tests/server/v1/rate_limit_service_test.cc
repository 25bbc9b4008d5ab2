// ratelimit.v1.RateLimitService seen through its logs while the store fails: every failing call
// is answered (failed_open with the open policy), and the log holds a few lines that account
// for every failure instead of one line per request.
#include "server/v1/rate_limit_service.h"

#include <string>
#include <vector>

#include "client/cpp/client.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "storage/memory/memory_state_store.h"
#include "tests/support/client_server_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FailingStateStore;
using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::kApiLimits;
using ::ratelimit::testing::Lines;
using ::ratelimit::testing::LoggedOccurrences;
using ::ratelimit::testing::StartServerAndClient;
using ::ratelimit::testing::TempDir;

TEST(RateLimitServiceLogTest, AHundredThousandFailingRequestsLogAFewLinesThatAddUp) {
  TempDir dir;
  FakeClock clock;
  auto failing = std::make_unique<FailingStateStore>(std::make_unique<MemoryStateStore>());
  failing->FailWith(absl::UnavailableError("No space left on device"));
  ServerOptions options;
  options.store.failure_policy = FailurePolicy::kOpen;
  ::testing::internal::CaptureStderr();
  {
    auto started = StartServerAndClient(options, dir, kApiLimits, clock, std::move(failing));
    ASSERT_OK(started);
    // 100,000 requests as Batch entries (100 per call, each one decided as its own Consume),
    // then 500 single Consume calls.
    v1::BatchRequest batch;
    for (int i = 0; i < 100; ++i) {
      v1::BatchEntry* e = batch.add_entries();
      e->set_method(v1::BatchEntry::CONSUME);
      *e->mutable_request() = MakeRequest("api", "k" + std::to_string(i));
    }
    for (int call = 0; call < 1000; ++call) {
      auto r = started->client->Batch(batch);
      ASSERT_OK(r);
      ASSERT_TRUE(r->results(99).response().failed_open());
    }
    for (int call = 0; call < 500; ++call) {
      auto r = started->client->Consume(MakeRequest("api", "single"));
      ASSERT_OK(r);
      ASSERT_TRUE(r->failed_open());
    }
    started->server->Shutdown();  // writes the summaries of the last interval
  }
  const std::vector<std::string> lines = Lines(::testing::internal::GetCapturedStderr());
  std::vector<std::string> failures;
  for (const std::string& line : lines) {
    if (line.find("store failure") != std::string::npos) failures.push_back(line);
  }
  EXPECT_LE(failures.size(), 24u) << failures.size() << " lines";
  EXPECT_EQ(LoggedOccurrences(failures, "store failure"), 100500u);
  ASSERT_FALSE(failures.empty());
  EXPECT_NE(failures.front().find("No space left on device"), std::string::npos);
}

}  // namespace
}  // namespace ratelimit
