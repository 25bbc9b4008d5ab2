#ifndef RATELIMIT_TESTS_SUPPORT_ENVOY_TEST_SUPPORT_H_
#define RATELIMIT_TESTS_SUPPORT_ENVOY_TEST_SUPPORT_H_

// Envoy API test helpers: requests built exactly as Envoy's rate-limit filter sends them, a
// client that calls ShouldRateLimit over a real gRPC channel, and a fixture that starts an
// in-process server (port 0, fake clock, in-memory store) on a one-file configuration.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <filesystem>

#include "absl/status/statusor.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/envoy/envoy_config_loader.h"
#include "server/server.h"
#include "storage/memory/memory_state_store.h"
#include "tests/support/test_support.h"

namespace ratelimit::testing {

namespace rls = ::envoy::service::ratelimit::v3;

// One descriptor: its entries, and optionally its own hits_addend, a limit override, and
// is_negative_hits (a refund).
struct Descriptor {
  using Entries = std::vector<std::pair<std::string, std::string>>;
  using Override = std::pair<uint32_t, ::envoy::type::v3::RateLimitUnit>;

  Descriptor(Entries e, std::optional<uint64_t> h = std::nullopt,
             std::optional<Override> l = std::nullopt, bool n = false)
      : entries(std::move(e)), hits(h), limit(l), negative(n) {}

  Entries entries;
  std::optional<uint64_t> hits;
  std::optional<Override> limit;
  bool negative = false;
};

// A refund of `hits` on `entries` (is_negative_hits).
inline Descriptor Refund(Descriptor::Entries entries, uint64_t hits) {
  return Descriptor(std::move(entries), hits, std::nullopt, /*n=*/true);
}

inline rls::RateLimitRequest EnvoyRequest(const std::string& domain,
                                          const std::vector<Descriptor>& descriptors,
                                          uint32_t hits_addend = 0) {
  rls::RateLimitRequest r;
  r.set_domain(domain);
  r.set_hits_addend(hits_addend);
  for (const Descriptor& d : descriptors) {
    auto* p = r.add_descriptors();
    for (const auto& [k, v] : d.entries) {
      auto* e = p->add_entries();
      e->set_key(k);
      e->set_value(v);
    }
    if (d.hits) p->mutable_hits_addend()->set_value(*d.hits);
    p->set_is_negative_hits(d.negative);
    if (d.limit) {
      p->mutable_limit()->set_requests_per_unit(d.limit->first);
      p->mutable_limit()->set_unit(d.limit->second);
    }
  }
  return r;
}

// One Envoy configuration file's domain parsed from `yaml` (named "test.yaml" in errors), which
// must parse.
inline EnvoyDomain MustParseEnvoyDomain(const std::string& yaml) {
  absl::StatusOr<EnvoyDomain> d = ParseEnvoyDomainYaml(yaml, "test.yaml");
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *std::move(d) : EnvoyDomain{};
}

// The error message of parsing `yaml` as ParseEnvoyDomainYaml does (an INVALID_ARGUMENT), or ""
// when it parses.
inline std::string EnvoyDomainParseError(const std::string& yaml) {
  absl::StatusOr<EnvoyDomain> d = ParseEnvoyDomainYaml(yaml, "test.yaml");
  if (d.ok()) return "";
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(d.status().message());
}

// A client of one server's Envoy API.
class EnvoyClient {
 public:
  explicit EnvoyClient(const std::string& target)
      : stub_(rls::RateLimitService::NewStub(
            grpc::CreateChannel(target, grpc::InsecureChannelCredentials()))) {}

  // The response, or the gRPC status as an absl::Status (same code and message).
  absl::StatusOr<rls::RateLimitResponse> ShouldRateLimit(const rls::RateLimitRequest& request) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    rls::RateLimitResponse response;
    grpc::Status s = stub_->ShouldRateLimit(&context, request, &response);
    if (!s.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
    }
    return response;
  }

 private:
  std::unique_ptr<rls::RateLimitService::Stub> stub_;
};

// The start of a whole minute (FakeClock's default time is 20 s into the next one).
inline constexpr int64_t kMinuteStart = int64_t{1699999980} * kSecond;

// Starts a server whose Envoy configuration directory holds one file, `yaml`.
class EnvoyServiceTestBase : public ::testing::Test {
 protected:
  using Response = rls::RateLimitResponse;

  void Start(const std::string& yaml, bool headers = false,
             std::unique_ptr<StateStore> store = std::make_unique<MemoryStateStore>(),
             const std::function<void(ServerOptions&)>& tune = nullptr) {
    std::filesystem::create_directories(dir_.File("envoy"));
    WriteFileAtomically(dir_.File("envoy/config.yaml"), yaml);
    ServerOptions options;
    options.listen.address = "127.0.0.1:0";
    options.store.open.rocksdb.path = dir_.File("data");
    options.limits.envoy_config_dir = dir_.File("envoy");
    options.limits.envoy_ratelimit_headers = headers;
    if (tune) tune(options);
    auto server = RateLimitServer::Start(options, clock_, std::move(store));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    client_ = std::make_unique<EnvoyClient>("127.0.0.1:" + std::to_string(server_->port()));
  }

  // Calls ShouldRateLimit, expecting success.
  Response Call(const std::string& domain, const std::vector<Descriptor>& descriptors,
                uint32_t hits_addend = 0) {
    absl::StatusOr<Response> r =
        client_->ShouldRateLimit(EnvoyRequest(domain, descriptors, hits_addend));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : Response();
  }

  TempDir dir_;
  FakeClock clock_{kMinuteStart + 10 * kSecond};
  std::unique_ptr<RateLimitServer> server_;
  std::unique_ptr<EnvoyClient> client_;
};

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_SUPPORT_ENVOY_TEST_SUPPORT_H_
