// The RLQS admin view through the real binaries: a ratelimit-server child process with --rlqs
// (port 0, its own directories), an RLQS stream from the test, and `ratelimit rlqs assignments`.
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "envoy/service/rate_limit_quota/v3/rlqs.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::ServerProcess;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WriteFileAtomically;
namespace rlqs_v3 = envoy::service::rate_limit_quota::v3;

std::pair<int, std::string> RunCli(const std::string& args) {
  return ::ratelimit::testing::RunCommand(::ratelimit::testing::BinaryPath("ratelimit") + " " +
                                          args);
}

TEST(RlqsProcessTest, CliShowsTheLiveAssignmentsOfABucket) {
  TempDir dir;
  std::filesystem::create_directories(dir.File("envoy"));
  WriteFileAtomically(dir.File("envoy/edge.yaml"), R"(domain: edge
quota_buckets:
  rules:
    - {name: tenants, match: {tenant: "*"}, requests_per_unit: 100, unit: second, burst: 40,
       fair_share: {newcomer_reserve: 0}}
)");
  WriteFileAtomically(dir.File("token"), "t0ken-for-tests\n");
  std::filesystem::permissions(
      dir.File("token"), std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  auto server = ServerProcess::Start(
      {"--data_dir=" + dir.File("data"), "--envoy_config_dir=" + dir.File("envoy"), "--rlqs",
       "--admin_token_file=" + dir.File("token")},
      dir.path());
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = rlqs_v3::RateLimitQuotaService::NewStub(
      grpc::CreateChannel((*server)->target(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  auto stream = stub->StreamRateLimitQuotas(&context);
  rlqs_v3::RateLimitQuotaUsageReports report;
  report.set_domain("edge");
  auto* usage = report.add_bucket_quota_usages();
  (*usage->mutable_bucket_id()->mutable_bucket())["tenant"] = "a";
  (*usage->mutable_bucket_id()->mutable_bucket())["route"] = "r";
  usage->mutable_time_elapsed()->set_seconds(0);
  ASSERT_TRUE(stream->Write(report));
  rlqs_v3::RateLimitQuotaResponse assigned;
  ASSERT_TRUE(stream->Read(&assigned));

  const std::string common = "rlqs assignments --target=" + (*server)->target() +
                             " --domain=edge --bucket=tenant=a,route=r";
  const std::string admin = " --admin_token_file=" + dir.File("token");
  auto [code, out] = RunCli(common + admin);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("route=r,tenant=a  rule tenants: token bucket 100/s burst 40\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("  stream 1  ipv4:127.0.0.1:"), std::string::npos) << out;
  // max_tokens is raised to one fill (rlqs_allocator.h).
  EXPECT_NE(out.find("demand unknown  assigned 100/s burst 40 (100 per 1s, max 40)  ttl 15s"),
            std::string::npos)
      << out;

  std::tie(code, out) = RunCli(common + admin + " --json");
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("\"tokens_per_fill\":100"), std::string::npos) << out;
  std::tie(code, out) = RunCli(common);  // no token
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("UNAUTHENTICATED"), std::string::npos) << out;
  std::tie(code, out) = RunCli("rlqs assignments --target=" + (*server)->target() + admin);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("--domain is required"), std::string::npos) << out;
  std::tie(code, out) = RunCli(common + ",tenant" + admin);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("--bucket: \"tenant\" is not key=value"), std::string::npos) << out;
  stream->WritesDone();
}

}  // namespace
}  // namespace ratelimit
