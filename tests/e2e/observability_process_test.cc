// The server's health and logs observed on a real ratelimit-server process: the health stream
// across SIGTERM, and JSON log lines carrying trace ids.
#include <signal.h>

#include <string>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "ratelimit/v1/ratelimit.grpc.pb.h"
#include "tests/support/fake_collector.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeCollector;
using ::ratelimit::testing::ServerProcess;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WriteFileAtomically;

using ::ratelimit::testing::kApiLimits;
constexpr char kTraceparent[] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
constexpr char kCallerTraceId[] = "0af7651916cd43dd8448eb211c80319c";

TEST(HealthProcessTest, DrainingIsNotServingUntilExit) {
  // A real server: SIGTERM while a watcher streams grpc.health.v1 status: the stream reports
  // NOT_SERVING before the process exits.
  TempDir dir;
  WriteFileAtomically(dir.File("limits.yaml"), kApiLimits);
  auto server = ServerProcess::Start(
      {"--data_dir=" + dir.File("data"), "--limits_file=" + dir.File("limits.yaml")}, dir.path());
  ASSERT_OK(server);
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel((*server)->target(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  grpc::health::v1::HealthCheckRequest req;
  auto reader = stub->Watch(&ctx, req);
  grpc::health::v1::HealthCheckResponse resp;
  ASSERT_TRUE(reader->Read(&resp));
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  ::kill((*server)->pid(), SIGTERM);
  std::vector<int> seen;
  while (reader->Read(&resp)) seen.push_back(resp.status());
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  (*server)->StopWith(SIGTERM);
}

// ---- Logs ---------------------------------------------------------------------------------

TEST(LogProcessTest, JsonLinesCarryTheTraceIdOfRequestScopedEvents) {
  TempDir dir;
  WriteFileAtomically(dir.File("limits.yaml"), kApiLimits);
  WriteFileAtomically(dir.File("token"), "tok\n");
  FakeCollector collector;
  auto server = ServerProcess::Start(
      {"--data_dir=" + dir.File("data"), "--limits_file=" + dir.File("limits.yaml"),
       "--admin_token_file=" + dir.File("token"), "--log_format=json",
       "--otel_endpoint=" + collector.target()},
      dir.path());
  ASSERT_OK(server);
  auto stub = v1::RateLimitService::NewStub(
      grpc::CreateChannel((*server)->target(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer tok");
  ctx.AddMetadata("traceparent", kTraceparent);
  v1::ResetRequest req;
  req.set_name("api");
  req.set_key("u1");
  v1::ResetResponse resp;
  ASSERT_TRUE(stub->Reset(&ctx, req, &resp).ok());
  const std::string log = (*server)->Stderr();
  EXPECT_NE(log.find("\"level\":\"INFO\",\"msg\":\"listening\""), std::string::npos) << log;
  EXPECT_NE(log.find(std::string("\"msg\":\"reset\",\"peer\":\"ipv4:127.0.0.1:")),
            std::string::npos)
      << log;
  EXPECT_NE(log.find(std::string("\"trace_id\":\"") + kCallerTraceId + "\""), std::string::npos)
      << log;
  // Every line is one JSON object. A last line without its newline is still being written by a
  // thread of the server (its exporter, a background task) and is not looked at.
  size_t start = 0;
  for (size_t end = log.find('\n'); end != std::string::npos; end = log.find('\n', start)) {
    const std::string line = log.substr(start, end - start);
    EXPECT_FALSE(line.empty());
    if (!line.empty()) {
      EXPECT_EQ(line.front(), '{') << line;
      EXPECT_EQ(line.back(), '}') << line;
    }
    start = end + 1;
  }
  ASSERT_TRUE(collector.WaitForSpans(2));
}

}  // namespace
}  // namespace ratelimit
