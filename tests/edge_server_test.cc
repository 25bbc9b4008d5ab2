// The gRPC server's edge, in process: an exclusive port, per-connection limits (concurrent
// streams, idle connections), valid Timestamp/Duration values for retry times past year 9999.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "client/client.h"
#include "client/output.h"
#include "google/protobuf/util/time_util.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "storage/memory_state_store.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::google::protobuf::util::TimeUtil;
using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::TempDir;

class EdgeServerTest : public ::testing::Test {
 protected:
  std::unique_ptr<RateLimitServer> Start(ServerOptions options) {
    options.listen_address =
        options.listen_address.empty() ? "127.0.0.1:0" : options.listen_address;
    auto server = RateLimitServer::Start(options, clock_, std::make_unique<MemoryStateStore>());
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }
  static ServerOptions Options() {
    ServerOptions o;
    o.listen_address = "127.0.0.1:0";
    return o;
  }
  FakeClock clock_;
};

TEST_F(EdgeServerTest, SecondServerOnTheSamePortFailsToStart) {
  auto first = Start(Options());
  ASSERT_NE(first, nullptr);
  ServerOptions o = Options();
  o.listen_address = "127.0.0.1:" + std::to_string(first->port());
  auto second = RateLimitServer::Start(o, clock_, std::make_unique<MemoryStateStore>());
  EXPECT_FALSE(second.ok()) << "a second server shares port " << first->port();
}

// Reads the server's first SETTINGS frame on a raw HTTP/2 connection and returns the value of
// SETTINGS_MAX_CONCURRENT_STREAMS (nullopt when it is not advertised).
std::optional<uint32_t> AdvertisedMaxConcurrentStreams(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  const unsigned char settings[9] = {0, 0, 0, 4, 0, 0, 0, 0, 0};  // empty SETTINGS
  EXPECT_EQ(write(fd, preface, sizeof preface - 1), static_cast<ssize_t>(sizeof preface - 1));
  EXPECT_EQ(write(fd, settings, sizeof settings), static_cast<ssize_t>(sizeof settings));
  std::string in;
  std::optional<uint32_t> result;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
    if (in.size() < 9) continue;
    const auto* h = reinterpret_cast<const unsigned char*>(in.data());
    const size_t len = size_t{h[0]} << 16 | size_t{h[1]} << 8 | h[2];
    if (in.size() < 9 + len) continue;
    EXPECT_EQ(h[3], 4) << "the server's first frame is SETTINGS";
    for (size_t i = 0; i + 6 <= len; i += 6) {
      const unsigned char* e = h + 9 + i;
      const int id = e[0] << 8 | e[1];
      const uint32_t value =
          uint32_t{e[2]} << 24 | uint32_t{e[3]} << 16 | uint32_t{e[4]} << 8 | e[5];
      if (id == 3) result = value;
    }
    break;
  }
  close(fd);
  return result;
}

TEST_F(EdgeServerTest, AdvertisesMaxConcurrentStreams) {
  ServerOptions o = Options();
  o.max_concurrent_streams = 7;
  auto server = Start(o);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(AdvertisedMaxConcurrentStreams(server->port()), std::optional<uint32_t>(7));
}

TEST_F(EdgeServerTest, DefaultLimitsConcurrentStreamsTo100) {
  auto server = Start(Options());
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(AdvertisedMaxConcurrentStreams(server->port()), std::optional<uint32_t>(100));
}

TEST_F(EdgeServerTest, IdleConnectionIsClosedByTheServer) {
  ServerOptions o = Options();
  o.max_connection_idle = absl::Milliseconds(200);
  auto server = Start(o);
  ASSERT_NE(server, nullptr);
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server->port()),
                                     grpc::InsecureChannelCredentials());
  ASSERT_TRUE(
      channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(20)));
  // Connected (READY); the server's GOAWAY then moves the channel out of READY (to IDLE)
  // without any call from us.
  EXPECT_TRUE(channel->WaitForStateChange(
      GRPC_CHANNEL_READY, std::chrono::system_clock::now() + std::chrono::seconds(20)))
      << "the idle connection was kept open";
  EXPECT_NE(channel->GetState(false), GRPC_CHANNEL_READY);
}

TEST_F(EdgeServerTest, ReserveFarBeyondYear9999AnswersValidTimestampAndDuration) {
  auto server = Start(Options());
  ASSERT_NE(server, nullptr);
  auto client = RateLimitClient::Connect("127.0.0.1:" + std::to_string(server->port()),
                                         ClientOptions{absl::Seconds(10), ""});
  // 1e9 tokens at 1 per hour: the second reservation may run in ~114,000 years.
  v1::RateLimitRequest request = MakeRequest("far", "k", 1e9);
  v1::LimitConfig* c = request.mutable_limits(0)->mutable_config();
  c->set_kind(v1::TOKEN_BUCKET);
  c->set_rate(1);
  c->mutable_period()->set_seconds(3600);
  c->set_capacity(1e9);
  ASSERT_OK(client->Reserve(request));
  auto r = client->Reserve(request);
  ASSERT_OK(r);
  ASSERT_TRUE(r->allowed());
  ASSERT_TRUE(r->has_retry_at());
  EXPECT_EQ(r->retry_at().seconds(), TimeUtil::kTimestampMaxSeconds);
  EXPECT_EQ(r->retry_at().nanos(), 999999999);
  EXPECT_LE(r->retry_after().seconds(), TimeUtil::kDurationMaxSeconds);
  EXPECT_EQ(r->results(0).retry_at().seconds(), TimeUtil::kTimestampMaxSeconds);
  EXPECT_LE(r->results(0).retry_after().seconds(), TimeUtil::kDurationMaxSeconds);
  EXPECT_OK(FormatJson(*r));
}

// Sends `body` (raw bytes) to `method` and returns the status of the call.
grpc::Status CallWithRawBody(int port, const std::string& method, const std::string& body) {
  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::Slice slice(body);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

TEST_F(EdgeServerTest, MalformedBodyIsInvalidArgumentNamingTheProblem) {
  ServerOptions o = Options();
  TempDir dir;
  o.envoy_config_dir = dir.path();  // serve the Envoy API too (no domains)
  auto server = Start(o);
  ASSERT_NE(server, nullptr);
  // A truncated length-delimited field and an invalid wire type: not a protobuf message.
  for (const std::string& body : {std::string("\x0a\x7f\x01", 3), std::string("\xff\xff\xff")}) {
    for (const char* method :
         {"/ratelimit.v1.RateLimitService/Consume", "/ratelimit.v1.RateLimitService/Check",
          "/ratelimit.v1.RateLimitService/Reserve", "/ratelimit.v1.RateLimitService/Reset",
          "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}) {
      const grpc::Status s = CallWithRawBody(server->port(), method, body);
      EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
      EXPECT_TRUE(absl::StrContains(s.error_message(), "request body is not a valid"))
          << method << ": " << s.error_message();
    }
  }
  // A valid body still works through the same path.
  v1::RateLimitRequest request = MakeRequest("api", "k");
  v1::LimitConfig* c = request.mutable_limits(0)->mutable_config();
  c->set_kind(v1::TOKEN_BUCKET);
  c->set_rate(10);
  c->mutable_period()->set_seconds(1);
  EXPECT_TRUE(CallWithRawBody(server->port(), "/ratelimit.v1.RateLimitService/Consume",
                              request.SerializeAsString())
                  .ok());
}

}  // namespace
}  // namespace ratelimit
