// The gRPC server's edge, in process: an exclusive port, per-connection limits (concurrent
// streams, idle connections), valid Timestamp/Duration values for retry times past year 9999.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "client/cpp/client.h"
#include "client/cpp/output.h"
#include "google/protobuf/util/time_util.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "storage/memory/memory_state_store.h"
#include "tests/support/fake_collector.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::google::protobuf::util::TimeUtil;
using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::TempDir;

class EdgeServerTest : public ::testing::Test {
 protected:
  std::unique_ptr<RateLimitServer> Start(ServerOptions options) {
    options.listen.address =
        options.listen.address.empty() ? "127.0.0.1:0" : options.listen.address;
    auto server = RateLimitServer::Start(options, clock_, std::make_unique<MemoryStateStore>());
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }
  static ServerOptions Options() {
    ServerOptions o;
    o.listen.address = "127.0.0.1:0";
    return o;
  }
  FakeClock clock_;
};

TEST_F(EdgeServerTest, SecondServerOnTheSamePortFailsToStart) {
  auto first = Start(Options());
  ASSERT_NE(first, nullptr);
  ServerOptions o = Options();
  o.listen.address = "127.0.0.1:" + std::to_string(first->port());
  auto second = RateLimitServer::Start(o, clock_, std::make_unique<MemoryStateStore>());
  EXPECT_FALSE(second.ok()) << "a second server shares port " << first->port();
}

// What a data directory holds, each file with its size.
std::map<std::string, uintmax_t> Listing(const std::string& dir) {
  std::map<std::string, uintmax_t> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    out[e.path().string()] = e.is_regular_file() ? e.file_size() : 0;
  }
  return out;
}

TEST_F(EdgeServerTest, AStartThatFailsOnItsConfigurationLeavesTheDataDirectoryAsItWas) {
  TempDir dir;
  ServerOptions o = Options();
  o.store.open.backend = "rocksdb";
  o.store.open.rocksdb.path = dir.File("data");
  // A directory the server never opened is not created.
  ::ratelimit::testing::WriteFileAtomically(dir.File("bad.yaml"),
                                            "limits:\n  - name: api\n    kind: nonsense\n");
  o.limits.file = dir.File("bad.yaml");
  auto refused = RateLimitServer::Start(o, clock_);
  ASSERT_FALSE(refused.ok());
  EXPECT_FALSE(std::filesystem::exists(o.store.open.rocksdb.path));

  // One that holds a store keeps its files as they were, whichever check fails.
  o.limits.file.clear();
  {
    auto opened = RateLimitServer::Start(o, clock_);
    ASSERT_TRUE(opened.ok()) << opened.status();
    (*opened)->Shutdown();
  }
  const std::map<std::string, uintmax_t> before = Listing(o.store.open.rocksdb.path);
  o.limits.file = dir.File("bad.yaml");
  EXPECT_FALSE(RateLimitServer::Start(o, clock_).ok());
  o.limits.file.clear();
  std::filesystem::create_directories(dir.File("envoy"));
  ::ratelimit::testing::WriteFileAtomically(dir.File("envoy/web.yaml"), "domain: [web\n");
  o.limits.envoy_config_dir = dir.File("envoy");
  EXPECT_FALSE(RateLimitServer::Start(o, clock_).ok());
  o.limits.envoy_config_dir.clear();
  o.receipts.key_file = dir.File("no-such-key-file");
  EXPECT_FALSE(RateLimitServer::Start(o, clock_).ok());
  o.receipts.key_file.clear();
  auto holder = Start(Options());
  ASSERT_NE(holder, nullptr);
  o.listen.address = "127.0.0.1:" + std::to_string(holder->port());
  EXPECT_FALSE(RateLimitServer::Start(o, clock_).ok());
  EXPECT_EQ(Listing(o.store.open.rocksdb.path), before);
}

// A bare HTTP/2 client on a TCP socket, for what a gRPC client refuses to send (bytes that are
// not printable ASCII in a header) and to read the server's SETTINGS.
class RawHttp2 {
 public:
  struct Frame {
    int type = -1;
    int flags = 0;
    uint32_t stream = 0;
    std::string payload;
  };

  // Connects to the loopback `port` and sends the client preface and an empty SETTINGS.
  explicit RawHttp2(int port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    Send("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    SendFrame(4, 0, 0, "");
  }
  ~RawHttp2() { close(fd_); }

  // The next frame from the server; type -1 when none came within 20 s or the peer closed.
  Frame Read() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      if (in_.size() >= 9) {
        const auto* h = reinterpret_cast<const unsigned char*>(in_.data());
        const size_t len = size_t{h[0]} << 16 | size_t{h[1]} << 8 | h[2];
        if (in_.size() >= 9 + len) {
          Frame f;
          f.type = h[3];
          f.flags = h[4];
          f.stream = (uint32_t{h[5]} << 24 | uint32_t{h[6]} << 16 | uint32_t{h[7]} << 8 | h[8]) &
                     0x7fffffff;
          f.payload = in_.substr(9, len);
          in_.erase(0, 9 + len);
          return f;
        }
      }
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      const ssize_t n = read(fd_, buf, sizeof buf);
      if (n <= 0) break;
      in_.append(buf, static_cast<size_t>(n));
    }
    return Frame{};
  }

  // Sends a gRPC unary call on stream 1 (HPACK literals, never indexed or Huffman-coded) with
  // `extra` headers, and reads until the server ends the stream. True when it did.
  bool Unary(const std::string& path, const std::vector<std::pair<std::string, std::string>>& extra,
             const std::string& message) {
    std::string block;
    std::vector<std::pair<std::string, std::string>> headers = {
        {":method", "POST"},
        {":scheme", "http"},
        {":path", path},
        {":authority", "localhost"},
        {"content-type", "application/grpc"},
        {"te", "trailers"}};
    headers.insert(headers.end(), extra.begin(), extra.end());
    for (const auto& [name, value] : headers) {
      block.push_back('\0');  // literal header field without indexing, new name
      PutHpackString(block, name);
      PutHpackString(block, value);
    }
    SendFrame(1, 0x4, 1, block);  // HEADERS, END_HEADERS
    std::string body(5, '\0');
    for (int i = 0; i < 4; ++i) body[1 + i] = static_cast<char>(message.size() >> (24 - 8 * i));
    SendFrame(0, 0x1, 1, body + message);  // DATA, END_STREAM
    while (true) {
      const Frame f = Read();
      if (f.type < 0) return false;
      if (f.type == 4 && !(f.flags & 0x1)) SendFrame(4, 0x1, 0, "");  // ACK the SETTINGS
      if (f.stream == 1 && (f.flags & 0x1) && (f.type == 0 || f.type == 1)) return true;
      if (f.stream == 1 && f.type == 3) return true;  // RST_STREAM
    }
  }

 private:
  static void PutHpackString(std::string& out, const std::string& s) {
    // A 7-bit prefix integer (RFC 7541 5.1), Huffman bit clear.
    size_t n = s.size();
    if (n < 127) {
      out.push_back(static_cast<char>(n));
    } else {
      out.push_back(0x7f);
      n -= 127;
      while (n >= 128) {
        out.push_back(static_cast<char>(n % 128 + 128));
        n /= 128;
      }
      out.push_back(static_cast<char>(n));
    }
    out += s;
  }
  void Send(const std::string& bytes) {
    EXPECT_EQ(write(fd_, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  }
  void SendFrame(int type, int flags, uint32_t stream, const std::string& payload) {
    std::string f(9, '\0');
    f[0] = static_cast<char>(payload.size() >> 16);
    f[1] = static_cast<char>(payload.size() >> 8);
    f[2] = static_cast<char>(payload.size());
    f[3] = static_cast<char>(type);
    f[4] = static_cast<char>(flags);
    for (int i = 0; i < 4; ++i) f[5 + i] = static_cast<char>(stream >> (24 - 8 * i));
    Send(f + payload);
  }

  const int fd_;
  std::string in_;
};

// SETTINGS_MAX_CONCURRENT_STREAMS of the server's first SETTINGS (nullopt: not advertised).
std::optional<uint32_t> AdvertisedMaxConcurrentStreams(int port) {
  RawHttp2 h2(port);
  const RawHttp2::Frame f = h2.Read();
  EXPECT_EQ(f.type, 4) << "the server's first frame is SETTINGS";
  std::optional<uint32_t> result;
  const auto* e = reinterpret_cast<const unsigned char*>(f.payload.data());
  for (size_t i = 0; i + 6 <= f.payload.size(); i += 6) {
    const int id = e[i] << 8 | e[i + 1];
    const uint32_t value =
        uint32_t{e[i + 2]} << 24 | uint32_t{e[i + 3]} << 16 | uint32_t{e[i + 4]} << 8 | e[i + 5];
    if (id == 3) result = value;
  }
  return result;
}

TEST_F(EdgeServerTest, AdvertisesMaxConcurrentStreams) {
  ServerOptions o = Options();
  o.listen.max_concurrent_streams = 7;
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
  o.listen.max_connection_idle = absl::Milliseconds(200);
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
  o.limits.envoy_config_dir = dir.path();  // serve the Envoy API too (no domains)
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
  // A body protobuf refuses for one field's value names that field.
  v1::RateLimitRequest utf8 = MakeRequest("api", "kQQ");
  std::string body = utf8.SerializeAsString();
  body.replace(body.find("QQ"), 2, "\xff\xfe");
  const grpc::Status s =
      CallWithRawBody(server->port(), "/ratelimit.v1.RateLimitService/Consume", body);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "limits[0].key: is not valid UTF-8 (request body is not a valid "
            "ratelimit.v1.RateLimitRequest)");
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

TEST_F(EdgeServerTest, BadTracestateIsDroppedAndSpansStillArrive) {
  ::ratelimit::testing::FakeCollector collector;
  ServerOptions o = Options();
  o.observability.otel_endpoint = collector.target();
  o.observability.otel_exporter.batch_delay = absl::Milliseconds(10);
  auto server = Start(o);
  ASSERT_NE(server, nullptr);
  v1::RateLimitRequest request = MakeRequest("api", "k");
  v1::LimitConfig* c = request.mutable_limits(0)->mutable_config();
  c->set_kind(v1::TOKEN_BUCKET);
  c->set_rate(10);
  c->mutable_period()->set_seconds(1);
  // Not UTF-8 (a proto3 string must be), and a malformed list: neither may reach the collector.
  const char kTraceparent[] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  for (const std::string& tracestate :
       {std::string("vendor=\xff\xfe"), std::string("a=1,a=2"), std::string("vendor=abc")}) {
    RawHttp2 h2(server->port());
    ASSERT_TRUE(h2.Unary("/ratelimit.v1.RateLimitService/Consume",
                         {{"traceparent", kTraceparent}, {"tracestate", tracestate}},
                         request.SerializeAsString()));
  }
  // Two spans (server and store) per call; a batch with an invalid string would be rejected.
  ASSERT_TRUE(collector.WaitForSpans(6));
  int with_state = 0;
  for (const auto& span : collector.Spans()) {
    EXPECT_EQ(span.trace_id().size(), 16u);
    if (span.kind() != opentelemetry::proto::trace::v1::Span::SPAN_KIND_SERVER) continue;
    EXPECT_TRUE(span.trace_state().empty() || span.trace_state() == "vendor=abc")
        << span.trace_state();
    with_state += span.trace_state() == "vendor=abc";
  }
  EXPECT_EQ(with_state, 1);
}

}  // namespace
}  // namespace ratelimit
