// TLS towards the OTLP collector and on the metrics endpoint.
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "client/cpp/client.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.grpc.pb.h"
#include "server/observability/otlp_exporter.h"
#include "server/server.h"
#include "storage/file_util.h"
#include "storage/memory/memory_state_store.h"
#include "tests/support/fake_collector.h"
#include "tests/support/test_pki.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

namespace collector = opentelemetry::proto::collector::trace::v1;
using ::ratelimit::testing::Eventually;
using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::FakeCollector;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::TestPki;

// An OTLP/gRPC collector behind TLS (the test CA's server certificate) that counts the spans it
// receives.
class TlsCollector final : public collector::TraceService::CallbackService {
 public:
  explicit TlsCollector(const TestPki& pki) {
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back(
        {*ReadFileToString(pki.Key("server")), *ReadFileToString(pki.Cert("server"))});
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::SslServerCredentials(ssl), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~TlsCollector() override { server_->Shutdown(); }

  grpc::ServerUnaryReactor* Export(grpc::CallbackServerContext* context,
                                   const collector::ExportTraceServiceRequest* request,
                                   collector::ExportTraceServiceResponse*) override {
    int n = 0;
    for (const auto& rs : request->resource_spans()) {
      for (const auto& ss : rs.scope_spans()) n += ss.spans_size();
    }
    spans_ += n;
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  int port() const { return port_; }
  int spans() const { return spans_.load(); }

 private:
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::atomic<int> spans_{0};
};

class TlsObservabilityTest : public ::testing::Test {
 protected:
  TlsObservabilityTest() : pki_(dir_.path()) {}
  void SetUp() override { ASSERT_TRUE(pki_.ok()) << pki_.status(); }

  absl::StatusOr<std::unique_ptr<RateLimitServer>> Start(ServerOptions o) {
    o.listen.address = "127.0.0.1:0";
    o.observability.otel_exporter.batch_delay = absl::Milliseconds(10);
    o.observability.otel_exporter.initial_backoff = absl::Milliseconds(10);
    o.observability.otel_exporter.max_attempts = 2;
    return RateLimitServer::Start(o, clock_, std::make_unique<MemoryStateStore>());
  }

  static void Consume(const RateLimitServer& server) {
    v1::RateLimitRequest request = MakeRequest("api", "k");
    v1::LimitConfig* c = request.mutable_limits(0)->mutable_config();
    c->set_kind(v1::TOKEN_BUCKET);
    c->set_rate(10);
    c->mutable_period()->set_seconds(1);
    auto client = RateLimitClient::Connect("127.0.0.1:" + std::to_string(server.port()),
                                           ClientOptions{absl::Seconds(10), ""});
    ASSERT_OK(client->Consume(request));
  }

  TempDir dir_;
  TestPki pki_;
  FakeClock clock_;
};

TEST_F(TlsObservabilityTest, HttpsEndpointExportsToATlsCollectorVerifiedByTheCaFile) {
  TlsCollector tls_collector(pki_);
  ServerOptions o;
  o.observability.otel_endpoint = "https://127.0.0.1:" + std::to_string(tls_collector.port());
  o.observability.otel_ca_file = pki_.Cert("ca");
  auto server = Start(o);
  ASSERT_OK(server);
  Consume(**server);
  EXPECT_TRUE(Eventually([&] { return tls_collector.spans() >= 1; }));
}

TEST_F(TlsObservabilityTest, CollectorWhoseCertificateDoesNotVerifyGetsNothing) {
  TlsCollector tls_collector(pki_);
  ServerOptions o;
  o.observability.otel_endpoint = "https://127.0.0.1:" + std::to_string(tls_collector.port());
  o.observability.otel_ca_file = pki_.Cert("other-ca");
  auto server = Start(o);
  ASSERT_OK(server);
  Consume(**server);
  EXPECT_TRUE(Eventually([&] { return (*server)->exporter()->stats().failed_exports >= 1; }));
  EXPECT_EQ(tls_collector.spans(), 0);
}

TEST_F(TlsObservabilityTest, HttpsEndpointIsNeverDowngradedToAPlaintextCollector) {
  FakeCollector plaintext;
  ServerOptions o;
  o.observability.otel_endpoint = "https://" + plaintext.target();
  o.observability.otel_ca_file = pki_.Cert("ca");
  auto server = Start(o);
  ASSERT_OK(server);
  Consume(**server);
  EXPECT_TRUE(Eventually([&] { return (*server)->exporter()->stats().failed_exports >= 1; }));
  EXPECT_EQ(plaintext.calls(), 0);
}

TEST_F(TlsObservabilityTest, CaFileWithAPlaintextEndpointFailsStart) {
  ServerOptions o;
  o.observability.otel_endpoint = "http://127.0.0.1:4317";
  o.observability.otel_ca_file = pki_.Cert("ca");
  auto server = Start(o);
  ASSERT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(server.status().message(), "--otel_ca_file")) << server.status();
}

TEST_F(TlsObservabilityTest, MetricsOverHttpsAndRotation) {
  ServerOptions o;
  o.observability.metrics_listen = "127.0.0.1:0";
  o.observability.metrics_tls_cert_file = dir_.File("metrics.pem");
  o.observability.metrics_tls_key_file = dir_.File("metrics.key");
  ASSERT_OK(pki_.Issue("metrics", "ca", "metrics", "DNS:localhost,IP:127.0.0.1"));
  auto server = Start(o);
  ASSERT_OK(server);
  const int port = (*server)->metrics_port();

  httplib::SSLClient https("127.0.0.1", port);
  https.set_ca_cert_path(pki_.Cert("ca").c_str());
  https.enable_server_certificate_verification(true);
  auto res = https.Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_TRUE(absl::StrContains(res->body, "ratelimit_up"));

  httplib::Client plain("127.0.0.1", port);
  plain.set_read_timeout(10, 0);
  auto plain_res = plain.Get("/metrics");
  EXPECT_TRUE(!plain_res || plain_res->status != 200);

  ASSERT_EQ(pki_.PresentedCommonName(port), "metrics");
  ASSERT_OK(pki_.Issue("metrics", "ca", "metrics-rotated", "DNS:localhost,IP:127.0.0.1"));
  EXPECT_TRUE(Eventually([&] { return pki_.PresentedCommonName(port) == "metrics-rotated"; }));
}

TEST_F(TlsObservabilityTest, BadMetricsKeyFailsStartNamingTheFlag) {
  ServerOptions o;
  o.observability.metrics_listen = "127.0.0.1:0";
  o.observability.metrics_tls_cert_file = pki_.Cert("server");
  o.observability.metrics_tls_key_file = pki_.Key("admin");
  auto server = Start(o);
  ASSERT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(server.status().message(), "--metrics_tls_key_file"));
}

}  // namespace
}  // namespace ratelimit
