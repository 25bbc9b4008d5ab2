// gRPC's and protobuf's own log lines written as the server's lines, and gRPC's held while the
// server starts.
#include "server/observability/library_log.h"

#include <grpc/grpc.h>
#include <grpc/support/log.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "ratelimit/v1/ratelimit.pb.h"
#include "server/observability/log.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::Lines;

// gRPC writes nothing before it is initialised (its verbosity is read then), as in the server,
// where the first server or channel initialises it.
class LibraryLogTest : public ::testing::Test {
 protected:
  LibraryLogTest() { grpc_init(); }
  ~LibraryLogTest() override { grpc_shutdown(); }
};

TEST_F(LibraryLogTest, AGrpcLineIsOneLineOfTheServersFormat) {
  RouteGrpcLogs();
  ::testing::internal::CaptureStderr();
  gpr_log(GPR_ERROR, "bind failed: %s", "Address already in use");
  SetLogFormat(LogFormat::kJson);
  gpr_log(GPR_ERROR, "a \"quoted\" complaint");
  SetLogFormat(LogFormat::kText);
  const std::vector<std::string> lines = Lines(::testing::internal::GetCapturedStderr());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(absl::StrContains(
      lines[0], " ERROR grpc detail=\"bind failed: Address already in use\" source="))
      << lines[0];
  EXPECT_TRUE(absl::StrContains(lines[0], "library_log_test.cc:")) << lines[0];
  EXPECT_TRUE(absl::StartsWith(lines[1], "{\"ts\":")) << lines[1];
  EXPECT_TRUE(absl::StrContains(
      lines[1], "\"level\":\"ERROR\",\"msg\":\"grpc\",\"detail\":\"a \\\"quoted\\\" complaint\""))
      << lines[1];
}

TEST_F(LibraryLogTest, GrpcsInformationFollowsTheLogLevel) {
  RouteGrpcLogs();
  gpr_set_log_verbosity(GPR_LOG_SEVERITY_INFO);  // as GRPC_VERBOSITY=info sets it
  ::testing::internal::CaptureStderr();
  gpr_log(GPR_INFO, "connected");
  SetLogLevel(LogLevel::kError);
  gpr_log(GPR_INFO, "connected again");
  SetLogLevel(LogLevel::kInfo);
  gpr_set_log_verbosity(GPR_LOG_SEVERITY_ERROR);
  const std::vector<std::string> lines = Lines(::testing::internal::GetCapturedStderr());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(absl::StrContains(lines[0], " INFO grpc detail=connected ")) << lines[0];
}

TEST_F(LibraryLogTest, AHoldKeepsTheLinesForTheFailureOrWritesThemWhenItEnds) {
  RouteGrpcLogs();
  ::testing::internal::CaptureStderr();
  {
    GrpcLogHold hold;
    gpr_log(GPR_ERROR, "first");
    gpr_log(GPR_ERROR, "second");
    EXPECT_EQ(hold.Take(), (std::vector<std::string>{"first", "second"}));
    gpr_log(GPR_ERROR, "third");
  }
  gpr_log(GPR_ERROR, "after");
  const std::vector<std::string> lines = Lines(::testing::internal::GetCapturedStderr());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(absl::StrContains(lines[0], "detail=third")) << lines[0];
  EXPECT_TRUE(absl::StrContains(lines[1], "detail=after")) << lines[1];
}

// A request's string that is not UTF-8 made protobuf write "[libprotobuf ERROR ...]" to standard
// error, one raw line per request; it is a debug line of the server's.
TEST_F(LibraryLogTest, ProtobufsComplaintAboutARequestIsADebugLine) {
  RouteProtobufLogs();
  v1::LimitRequest bad;
  bad.set_key(std::string("k\xff", 2));
  const std::string bytes = bad.SerializePartialAsString();
  ::testing::internal::CaptureStderr();
  v1::LimitRequest parsed;
  EXPECT_FALSE(parsed.ParseFromString(bytes));
  SetLogLevel(LogLevel::kDebug);
  EXPECT_FALSE(parsed.ParseFromString(bytes));
  SetLogLevel(LogLevel::kInfo);
  const std::vector<std::string> lines = Lines(::testing::internal::GetCapturedStderr());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(absl::StrContains(lines[0], " DEBUG protobuf detail=")) << lines[0];
  EXPECT_TRUE(absl::StrContains(lines[0], "invalid UTF-8")) << lines[0];
}

}  // namespace
}  // namespace ratelimit
