// The record of how long a server's limited RLQS assignments last (RlqsHorizon), and what it is
// for: a restart after a crash sends no limited assignment while the previous process's may
// still be enforced; after a graceful stop the next start assigns at once.
#include "server/rlqs/rlqs_horizon.h"

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "server/rlqs/rlqs_buckets.h"
#include "storage/file_util.h"
#include "tests/server/rlqs/rlqs_test_server.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using testing::FakeClock;
using testing::kSecond;
using testing::RlqsTestClient;
using testing::RlqsTestServer;
using testing::TempDir;
using testing::Usage;
namespace rlqs_v3 = envoy::service::rate_limit_quota::v3;

std::string Recorded(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  return text.ok() ? *text : "(none)";
}

TEST(RlqsHorizonTest, TheRecordIsWrittenAheadOnlyWhenAnAssignmentOutlivesIt) {
  TempDir dir;
  const std::string path = dir.File("rlqs-assignments");
  RlqsHorizon horizon(path);
  EXPECT_EQ(horizon.Load(), 0);  // never written
  horizon.Cover(100 * kSecond);
  EXPECT_EQ(Recorded(path), absl::StrCat(100 * kSecond + RlqsHorizon::kSlackMicros, "\n"));
  horizon.Cover(105 * kSecond);  // covered already: not written again
  EXPECT_EQ(horizon.recorded_us(), 100 * kSecond + RlqsHorizon::kSlackMicros);
  ASSERT_TRUE(WriteFileAtomically(path, "stale\n").ok());
  horizon.Cover(109 * kSecond);
  EXPECT_EQ(Recorded(path), "stale\n");
  horizon.Cover(111 * kSecond);
  EXPECT_EQ(Recorded(path), absl::StrCat(111 * kSecond + RlqsHorizon::kSlackMicros, "\n"));
  RlqsHorizon next(path);
  EXPECT_EQ(next.Load(), 111 * kSecond + RlqsHorizon::kSlackMicros);
  next.Close(0);
  EXPECT_EQ(RlqsHorizon(path).Load(), 0);
  next.Cover(200 * kSecond);  // a stream ending after the stop: its assignment was ended
  EXPECT_EQ(RlqsHorizon(path).Load(), 0);
}

TEST(RlqsHorizonTest, AFailingWriteIsTriedAgainAtEachPushAndLoggedOnceNotPerPush) {
  TempDir dir;
  const std::string path = dir.File("gone/rlqs-assignments");  // its directory does not exist
  RlqsHorizon horizon(path);
  ::testing::internal::CaptureStderr();
  for (int i = 1; i <= 100; ++i) horizon.Cover(i * kSecond);
  EXPECT_EQ(horizon.recorded_us(), 0);
  ASSERT_TRUE(std::filesystem::create_directory(dir.File("gone")));
  horizon.Cover(101 * kSecond);  // the disk has room again: written at the next push
  const std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(Recorded(path), absl::StrCat(101 * kSecond + RlqsHorizon::kSlackMicros, "\n"));
  // The first failure in full; the other 99 wait for the interval's summary line.
  const std::vector<absl::string_view> pieces =
      absl::StrSplit(logged, "cannot record the assignments sent");
  EXPECT_EQ(pieces.size(), 2u) << logged;
}

TEST(RlqsHorizonTest, AMalformedOrMissingRecordHoldsNothingBackAndNoPathRecordsNothing) {
  TempDir dir;
  ASSERT_TRUE(WriteFileAtomically(dir.File("bad"), "soon\n").ok());
  EXPECT_EQ(RlqsHorizon(dir.File("bad")).Load(), 0);
  EXPECT_EQ(RlqsHorizon(dir.File("missing")).Load(), 0);
  RlqsHorizon none("");
  none.Cover(100 * kSecond);
  EXPECT_EQ(none.recorded_us(), 0);
}

constexpr char kConfig[] = R"(
rules:
  - {name: tenants, match: {tenant: "*"}, requests_per_unit: 100, unit: second, burst: 100,
     fair_share: {newcomer_reserve: 0, smoothing: 1}}
)";

// Whether the server has sent its subscriber of tenant a an assignment.
bool Sent(RlqsTestServer& server) {
  const RlqsBucketKey a = {{"tenant", "a"}};
  RlqsService::AssignmentsView view = server.service().Assignments("edge", &a, nullptr, 1);
  return !view.buckets.empty() && !view.buckets[0].subscribers.empty() &&
         view.buckets[0].subscribers[0].has_sent;
}

TEST(RlqsHorizonTest, ARestartAfterACrashAssignsOnlyOnceThePreviousAssignmentsHaveEnded) {
  TempDir dir;
  FakeClock clock;
  RlqsServiceOptions options;
  options.horizon_path = dir.File("rlqs-assignments");
  int64_t ttl_us = 0;
  {
    RlqsTestServer first(options, &clock);
    first.SetConfig(kConfig);
    RlqsTestClient envoy(first);
    ASSERT_TRUE(envoy.stream->Write(Usage("edge", {{"tenant", "a"}}, 10, 0, 1)));
    const rlqs_v3::RateLimitQuotaResponse r = envoy.Read();
    EXPECT_EQ(testing::FirstTokensPerFill(r), 100u);
    ttl_us =
        r.bucket_action(0).quota_assignment_action().assignment_time_to_live().seconds() * kSecond;
    first.Kill();  // no time to live of 0: the Envoy keeps enforcing its 100 a second
  }
  RlqsTestServer second(options, &clock);
  second.SetConfig(kConfig);
  RlqsTestClient envoy(second);  // the same Envoy, reconnected
  ASSERT_TRUE(envoy.stream->Write(Usage("edge", {{"tenant", "a"}}, 10, 0, 1)));
  ASSERT_TRUE(testing::Eventually([&] {
    return second.service().Assignments("edge", nullptr, nullptr, 1).buckets.size() == 1;
  }));
  clock.Advance(ttl_us);  // the old assignment has ended by now, but not the second's slack
  second.service().Tick();
  EXPECT_FALSE(Sent(second));
  clock.Advance(kSecond + RlqsHorizon::kSlackMicros);
  second.service().Tick();
  EXPECT_EQ(testing::FirstTokensPerFill(envoy.Read()), 100u);
}

TEST(RlqsHorizonTest, AfterAGracefulStopTheNextStartAssignsAtOnce) {
  TempDir dir;
  FakeClock clock;
  RlqsServiceOptions options;
  options.horizon_path = dir.File("rlqs-assignments");
  {
    RlqsTestServer first(options, &clock);
    first.SetConfig(kConfig);
    RlqsTestClient envoy(first);
    ASSERT_TRUE(envoy.stream->Write(Usage("edge", {{"tenant", "a"}}, 10, 0, 1)));
    EXPECT_EQ(testing::FirstTokensPerFill(envoy.Read()), 100u);
    first.Stop();  // every assignment again with a time to live of 0
  }
  RlqsTestServer second(options, &clock);
  second.SetConfig(kConfig);
  RlqsTestClient envoy(second);
  ASSERT_TRUE(envoy.stream->Write(Usage("edge", {{"tenant", "a"}}, 10, 0, 1)));
  EXPECT_EQ(testing::FirstTokensPerFill(envoy.Read()), 100u);
}

// RlqsBuckets' part of it: a hold sends no limited assignment before its end, and the first
// division after it sends every subscriber its first.
TEST(RlqsHorizonTest, BucketsHeldSendNoLimitedAssignmentUntilTheHoldEnds) {
  auto config = ParseRlqsQuotaBuckets(YAML::Load(kConfig), "edge.yaml");
  ASSERT_TRUE(config.ok());
  RlqsBuckets buckets({}, [&](absl::string_view) { return *config; });
  const int64_t now = 1000 * kSecond;
  buckets.HoldLimitedUntil(now + 10 * kSecond);
  std::vector<RlqsPush> out;
  ASSERT_TRUE(buckets.Report(1, "edge", {{"tenant", "a"}}, 10, 0, kSecond, now, out).ok());
  buckets.Tick(now + 9 * kSecond, out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(buckets.latest_expiry_us(), 0);
  buckets.Tick(now + 10 * kSecond, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].assignment.kind, RlqsAssignment::Kind::kTokenBucket);
  EXPECT_EQ(buckets.latest_expiry_us(),
            now + 10 * kSecond + (out[0].assignment.ttl_seconds + 1) * kSecond);
}

}  // namespace
}  // namespace ratelimit
