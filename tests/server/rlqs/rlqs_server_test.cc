// The RLQS service as part of the server (server/server.cc): enabled by --rlqs with the Envoy
// configuration's quota_buckets, on the same port, and its TTL 0 on shutdown.
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/cpp/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "storage/memory/memory_state_store.h"
#include "tests/server/rlqs/rlqs_test_server.h"
#include "tests/support/redis_standalone.h"
#include "tests/support/redis_test_store.h"
#include "tests/support/reload_recorder.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::ReloadRecorder;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::Usage;
using ::testing::HasSubstr;
namespace rlqs_v3 = envoy::service::rate_limit_quota::v3;

class RlqsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_.File("envoy"));
    testing::WriteFileAtomically(dir_.File("envoy/edge.yaml"), R"(domain: edge
quota_buckets:
  rules:
    - {name: tenants, match: {tenant: "*"}, requests_per_unit: 100, unit: second,
       fair_share: {newcomer_reserve: 0}}
)");
  }

  ServerOptions Options() {
    ServerOptions o;
    o.listen.address = "127.0.0.1:0";
    o.limits.envoy_config_dir = dir_.File("envoy");
    o.rlqs.enabled = true;
    return o;
  }

  std::unique_ptr<rlqs_v3::RateLimitQuotaService::Stub> Stub(const RateLimitServer& s) {
    return rlqs_v3::RateLimitQuotaService::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(s.port()), grpc::InsecureChannelCredentials()));
  }

  TempDir dir_;
  FakeClock clock_;
};

TEST_F(RlqsServerTest, ServesTheQuotaBucketsOfTheEnvoyDomains) {
  auto server = RateLimitServer::Start(Options(), clock_, std::make_unique<MemoryStateStore>());
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_NE((*server)->rlqs_service(), nullptr);
  auto stub = Stub(**server);
  grpc::ClientContext context;
  auto stream = stub->StreamRateLimitQuotas(&context);
  ASSERT_TRUE(stream->Write(Usage("edge", {{"tenant", "a"}}, 0, 0, 0)));
  rlqs_v3::RateLimitQuotaResponse r;
  ASSERT_TRUE(stream->Read(&r));
  const auto& tb =
      r.bucket_action(0).quota_assignment_action().rate_limit_strategy().token_bucket();
  EXPECT_EQ(tb.tokens_per_fill().value(), 100u);
  EXPECT_EQ(tb.fill_interval().seconds(), 1);
  // Graceful shutdown: the assignment again with a time to live of 0, then the stream ends.
  (*server)->Shutdown();
  ASSERT_TRUE(stream->Read(&r));
  EXPECT_EQ(r.bucket_action(0).quota_assignment_action().assignment_time_to_live().seconds(), 0);
  EXPECT_FALSE(stream->Read(&r));
  EXPECT_TRUE(stream->Finish().ok());
}

// A reload of the Envoy directory that halves the limit reaches the subscribers at once.
TEST_F(RlqsServerTest, ReloadIsPushedAtOnce) {
  ReloadRecorder reloads;
  ServerOptions o = Options();
  o.limits.reload_interval = absl::Milliseconds(10);
  o.limits.on_config_reload = reloads.Callback();
  o.rlqs.reallocation_interval = absl::Hours(1);  // no periodic division during the test
  auto server = RateLimitServer::Start(o, clock_, std::make_unique<MemoryStateStore>());
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = Stub(**server);
  grpc::ClientContext context;
  // Without the push, the read below fails at this deadline instead of blocking.
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = stub->StreamRateLimitQuotas(&context);
  ASSERT_TRUE(stream->Write(Usage("edge", {{"tenant", "a"}}, 0, 0, 0)));
  rlqs_v3::RateLimitQuotaResponse r;
  ASSERT_TRUE(stream->Read(&r));
  testing::WriteFileAtomically(dir_.File("envoy/edge.yaml"), R"(domain: edge
quota_buckets:
  rules:
    - {name: tenants, match: {tenant: "*"}, requests_per_unit: 50, unit: second,
       fair_share: {newcomer_reserve: 0}}
)");
  ASSERT_TRUE(reloads.WaitFor("envoy", true));
  ASSERT_TRUE(stream->Read(&r));
  EXPECT_EQ(r.bucket_action(0)
                .quota_assignment_action()
                .rate_limit_strategy()
                .token_bucket()
                .tokens_per_fill()
                .value(),
            50u);
  (*server)->Shutdown();
}

// The token bucket rate of the first action of `r`.
double AssignedRate(const rlqs_v3::RateLimitQuotaResponse& r) {
  const auto& tb =
      r.bucket_action(0).quota_assignment_action().rate_limit_strategy().token_bucket();
  return static_cast<double>(tb.tokens_per_fill().value()) /
         static_cast<double>(tb.fill_interval().seconds());
}

// Two servers on one Redis store share a bucket's global rate: the second server's first Envoy
// gets the newcomer reserve at once, and after a division has settled the two halves.
TEST_F(RlqsServerTest, TwoServersOnOneRedisStoreShareABucketsGlobalRate) {
  ASSERT_TRUE(testing::RedisServerInstalled()) << "redis-server is required";
  auto target = testing::StartRedisTestTarget(testing::RedisTopology::kCluster);
  ASSERT_TRUE(target.ok()) << target.status();
  testing::WriteFileAtomically(dir_.File("envoy/edge.yaml"), R"(domain: edge
quota_buckets:
  rules:
    - {name: tenants, match: {tenant: "*"}, requests_per_unit: 100, unit: second}
)");
  ServerOptions o = Options();
  o.rlqs.reallocation_interval = absl::Hours(1);  // the test ticks
  std::vector<std::unique_ptr<RateLimitServer>> servers;
  for (int i = 0; i < 2; ++i) {
    auto store = testing::OpenRedisTestStore(*target, nullptr);
    ASSERT_TRUE(store.ok()) << store.status();
    auto server = RateLimitServer::Start(o, clock_, *std::move(store));
    ASSERT_TRUE(server.ok()) << server.status();
    servers.push_back(*std::move(server));
  }
  std::unique_ptr<rlqs_v3::RateLimitQuotaService::Stub> stubs[2] = {Stub(*servers[0]),
                                                                    Stub(*servers[1])};
  grpc::ClientContext contexts[2];
  std::unique_ptr<grpc::ClientReaderWriter<rlqs_v3::RateLimitQuotaUsageReports,
                                           rlqs_v3::RateLimitQuotaResponse>>
      streams[2];
  double rates[2] = {0, 0};
  rlqs_v3::RateLimitQuotaResponse r;
  for (int i = 0; i < 2; ++i) {
    contexts[i].set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    streams[i] = stubs[i]->StreamRateLimitQuotas(&contexts[i]);
    ASSERT_TRUE(streams[i]->Write(Usage("edge", {{"tenant", "a"}}, 0, 0, 0)));
    ASSERT_TRUE(streams[i]->Read(&r));
    rates[i] = AssignedRate(r);
  }
  EXPECT_EQ(rates[0], 95) << "alone: all but the 5% reserve";
  EXPECT_EQ(rates[1], 5) << "the reserve, at once";
  // Later (the division settled), both report a demand above the rate; each server's tick
  // hands out its half.
  clock_.Advance(2 * 3600 * testing::kSecond);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(streams[i]->Write(Usage("edge", {{"tenant", "a"}}, 500, 0, 1)));
  }
  // Each server has read its report before it ticks (else the tick finds the bucket idle for
  // the two hours and abandons it).
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  for (int i = 0; i < 2; ++i) {
    while (servers[i]->rlqs_service()->stats().messages < 2) {
      ASSERT_LT(absl::Now(), deadline) << "server " << i << " did not read the report";
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 2; ++i) servers[i]->rlqs_service()->Tick();
  }
  // 47.5 each, as whole-second token buckets: the first server's falls, the second's grows.
  while (rates[0] > 50) {
    ASSERT_TRUE(streams[0]->Read(&r)) << "the first server last sent " << rates[0];
    rates[0] = AssignedRate(r);
  }
  while (rates[1] < 45) {
    ASSERT_TRUE(streams[1]->Read(&r)) << "the second server last sent " << rates[1];
    rates[1] = AssignedRate(r);
  }
  EXPECT_NEAR(rates[0], 47.5, 0.5);
  EXPECT_NEAR(rates[1], 47.5, 0.5);
  for (auto& server : servers) server->Shutdown();
}

// Envoy's periodic report carries every bucket of its stream: 3,000 buckets (about 100 KB) are
// served, up to --rlqs_max_message_bytes, while every unary call keeps its bound of 64 KiB.
TEST_F(RlqsServerTest, AReportOfThousandsOfBucketsIsServedPastTheUnaryBound) {
  ServerOptions o = Options();
  o.admin.token = "s3cret";
  auto server = RateLimitServer::Start(o, clock_, std::make_unique<MemoryStateStore>());
  ASSERT_TRUE(server.ok()) << server.status();
  rlqs_v3::RateLimitQuotaUsageReports report;
  report.set_domain("edge");
  for (int i = 0; i < 3000; ++i) {
    auto* u = report.add_bucket_quota_usages();
    (*u->mutable_bucket_id()->mutable_bucket())["tenant"] = absl::StrCat("tenant-", 100000 + i);
    u->mutable_time_elapsed()->set_seconds(1);
    u->set_num_requests_allowed(1);
  }
  ASSERT_GT(report.ByteSizeLong(), kMaxRequestBytes);
  auto stub = Stub(**server);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto stream = stub->StreamRateLimitQuotas(&context);
  ASSERT_TRUE(stream->Write(report));
  size_t assigned = 0;
  rlqs_v3::RateLimitQuotaResponse r;
  while (assigned < 3000 && stream->Read(&r)) assigned += r.bucket_action_size();
  EXPECT_GE(assigned, 3000u) << "the stream ended: " << stream->Finish().error_message();

  // A unary call as large is refused as the transport refused it before.
  auto client = RateLimitClient::Connect("127.0.0.1:" + std::to_string((*server)->port()),
                                         ClientOptions{absl::Seconds(10), "s3cret"});
  v1::RateLimitRequest big;
  v1::LimitRequest* limit = big.add_limits();
  limit->set_name("api");
  limit->set_key(std::string(kMaxRequestBytes, 'k'));
  const absl::Status refused = client->Consume(big).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("larger than max"));
  (*server)->Shutdown();
}

TEST_F(RlqsServerTest, OffByDefault) {
  ServerOptions o = Options();
  o.rlqs.enabled = false;
  auto server = RateLimitServer::Start(o, clock_, std::make_unique<MemoryStateStore>());
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->rlqs_service(), nullptr);
  auto stub = Stub(**server);
  grpc::ClientContext context;
  auto stream = stub->StreamRateLimitQuotas(&context);
  stream->Write(Usage("edge", {{"tenant", "a"}}, 0, 0, 0));
  stream->WritesDone();
  rlqs_v3::RateLimitQuotaResponse r;
  EXPECT_FALSE(stream->Read(&r));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNIMPLEMENTED);
}

TEST_F(RlqsServerTest, OptionsAreChecked) {
  ServerOptions o = Options();
  o.limits.envoy_config_dir.clear();
  EXPECT_THAT(ValidateServerOptions(o).message(), HasSubstr("--rlqs: needs the Envoy"));
  o = Options();
  o.rlqs.reporting_interval = absl::Milliseconds(500);
  EXPECT_THAT(ValidateServerOptions(o).message(), HasSubstr("--rlqs_reporting_interval"));
  // Upper bounds against a typo (100000h is no interval anyone means).
  o.rlqs.reporting_interval = absl::Seconds(301);
  EXPECT_EQ(ValidateServerOptions(o).message(), "--rlqs_reporting_interval: must be 1s .. 5m");
  o.rlqs.reporting_interval = absl::Minutes(5);
  EXPECT_TRUE(ValidateServerOptions(o).ok());
  o = Options();
  o.rlqs.reallocation_interval = absl::Hours(1) + absl::Seconds(1);
  EXPECT_EQ(ValidateServerOptions(o).message(),
            "--rlqs_reallocation_interval: must be positive and at most 1h");
  o = Options();
  o.rlqs.idle_abandon = absl::Hours(25);
  EXPECT_EQ(ValidateServerOptions(o).message(), "--rlqs_idle_abandon: must be 1s .. 24h");
  o = Options();
  o.rlqs.max_buckets_per_stream = 0;
  EXPECT_THAT(ValidateServerOptions(o).message(), HasSubstr("--rlqs_max_buckets_per_stream"));
  o = Options();
  o.rlqs.max_streams_per_connection = 0;
  EXPECT_EQ(ValidateServerOptions(o).message(),
            "--rlqs_max_streams_per_connection: must be at least 1");
  o = Options();
  o.rlqs.reallocation_interval = absl::ZeroDuration();
  EXPECT_THAT(ValidateServerOptions(o).message(), HasSubstr("--rlqs_reallocation_interval"));
  o = Options();
  o.rlqs.max_message_bytes = 65535;
  EXPECT_THAT(ValidateServerOptions(o).message(), HasSubstr("--rlqs_max_message_bytes"));
  o = Options();
  o.rlqs.idle_abandon = absl::ZeroDuration();
  EXPECT_THAT(ValidateServerOptions(o).message(), HasSubstr("--rlqs_idle_abandon"));
  EXPECT_TRUE(ValidateServerOptions(Options()).ok());
}

}  // namespace
}  // namespace ratelimit
