// TLS and mTLS on the gRPC listener, in process: handshakes, client certificates, rotation, the
// plaintext rules, and admin authorization by certificate identity.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "client/cpp/client.h"
#include "gtest/gtest.h"
#include "server/admin/admin_auth.h"
#include "server/server.h"
#include "server/tls/tls.h"
#include "storage/file_util.h"
#include "storage/memory/memory_state_store.h"
#include "tests/support/test_pki.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::Eventually;
using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::TestPki;

v1::RateLimitRequest InlineRequest() {
  v1::RateLimitRequest request = MakeRequest("api", "k");
  v1::LimitConfig* c = request.mutable_limits(0)->mutable_config();
  c->set_kind(v1::TOKEN_BUCKET);
  c->set_rate(100);
  c->mutable_period()->set_seconds(1);
  return request;
}

// A limit of one token an hour: a second Consume is denied until a Reset.
v1::RateLimitRequest OneTokenRequest() {
  v1::RateLimitRequest request = InlineRequest();
  request.mutable_limits(0)->mutable_config()->set_rate(1);
  request.mutable_limits(0)->mutable_config()->mutable_period()->set_seconds(3600);
  return request;
}

v1::ResetRequest InlineReset() {
  v1::ResetRequest reset;
  reset.set_source(v1::INLINE);
  reset.set_name("api");
  reset.set_key("k");
  return reset;
}

std::string Contents(const std::string& path) {
  absl::StatusOr<std::string> s = ReadFileToString(path);
  return s.ok() ? *s : std::string();
}

class TlsTest : public ::testing::Test {
 protected:
  TlsTest() : pki_(dir_.path()) {}

  void SetUp() override { ASSERT_TRUE(pki_.ok()) << pki_.status(); }

  ServerOptions TlsOptions(bool mtls) {
    ServerOptions o;
    o.listen.address = "127.0.0.1:0";
    o.listen.tls.cert_file = pki_.Cert("server");
    o.listen.tls.key_file = pki_.Key("server");
    if (mtls) o.listen.tls.client_ca_file = pki_.Cert("ca");
    return o;
  }

  absl::StatusOr<std::unique_ptr<RateLimitServer>> Start(const ServerOptions& o) {
    return RateLimitServer::Start(o, clock_, std::make_unique<MemoryStateStore>());
  }

  // A TLS client of `server` presenting the certificate `client` (none when empty), trusting
  // `ca`.
  std::unique_ptr<RateLimitClient> Client(const RateLimitServer& server, const std::string& client,
                                          const std::string& ca = "ca") {
    ClientTlsOptions tls;
    tls.ca_file = pki_.Cert(ca);
    if (!client.empty()) {
      tls.cert_file = pki_.Cert(client);
      tls.key_file = pki_.Key(client);
    }
    auto c = RateLimitClient::ConnectTls("127.0.0.1:" + std::to_string(server.port()), tls,
                                         ClientOptions{absl::Seconds(10), ""});
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  TempDir dir_;
  TestPki pki_;
  FakeClock clock_;
};

TEST_F(TlsTest, TlsClientIsServed) {
  auto server = Start(TlsOptions(false));
  ASSERT_OK(server);
  auto response = Client(**server, "")->Consume(InlineRequest());
  ASSERT_OK(response);
  EXPECT_TRUE(response->allowed());
}

TEST_F(TlsTest, PlaintextClientOfTheTlsPortFailsWithUnavailable) {
  auto server = Start(TlsOptions(false));
  ASSERT_OK(server);
  // The handshake fails at once: the call ends UNAVAILABLE, well before its deadline would
  // (DEADLINE_EXCEEDED would mean it hung).
  auto plain = RateLimitClient::Connect("127.0.0.1:" + std::to_string((*server)->port()),
                                        ClientOptions{absl::Seconds(30), ""});
  EXPECT_EQ(plain->Consume(InlineRequest()).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(TlsTest, ClientThatDoesNotTrustTheServerFails) {
  auto server = Start(TlsOptions(false));
  ASSERT_OK(server);
  EXPECT_EQ(Client(**server, "", "other-ca")->Consume(InlineRequest()).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(TlsTest, MutualTlsServesAClientCertificateOfTheCa) {
  auto server = Start(TlsOptions(true));
  ASSERT_OK(server);
  EXPECT_OK(Client(**server, "user")->Consume(InlineRequest()));
}

TEST_F(TlsTest, MutualTlsRefusesAClientWithoutCertificate) {
  auto server = Start(TlsOptions(true));
  ASSERT_OK(server);
  EXPECT_EQ(Client(**server, "")->Consume(InlineRequest()).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(TlsTest, MutualTlsRefusesACertificateOfAnotherCa) {
  auto server = Start(TlsOptions(true));
  ASSERT_OK(server);
  EXPECT_EQ(Client(**server, "rogue")->Consume(InlineRequest()).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(TlsTest, RotatedCertificateIsServedWithoutRestart) {
  ServerOptions o = TlsOptions(false);
  o.listen.tls.reload_interval = absl::Seconds(1);
  auto server = Start(o);
  ASSERT_OK(server);
  const int port = (*server)->port();
  ASSERT_EQ(pki_.PresentedCommonName(port), "server");
  ASSERT_OK(pki_.Issue("server", "ca", "server-rotated", "DNS:localhost,IP:127.0.0.1"));
  EXPECT_TRUE(Eventually([&] { return pki_.PresentedCommonName(port) == "server-rotated"; }));
  // The new certificate verifies like the old one.
  EXPECT_OK(Client(**server, "")->Consume(InlineRequest()));
}

TEST_F(TlsTest, RotatedClientCaIsUsedWithoutRestart) {
  ServerOptions o = TlsOptions(true);
  o.listen.tls.client_ca_file = dir_.File("client-ca.pem");
  testing::WriteFileAtomically(o.listen.tls.client_ca_file, Contents(pki_.Cert("ca")));
  o.listen.tls.reload_interval = absl::Seconds(1);
  auto server = Start(o);
  ASSERT_OK(server);
  ASSERT_EQ(Client(**server, "rogue")->Consume(InlineRequest()).status().code(),
            absl::StatusCode::kUnavailable);
  testing::WriteFileAtomically(o.listen.tls.client_ca_file, Contents(pki_.Cert("other-ca")));
  // Each attempt is a new client (a new connection), so the new bundle is what verifies it.
  EXPECT_TRUE(Eventually([&] { return Client(**server, "rogue")->Consume(InlineRequest()).ok(); }));
}

TEST_F(TlsTest, PlaintextListenerBesideTls) {
  ServerOptions o = TlsOptions(true);
  o.listen.plaintext_address = "127.0.0.1:0";
  auto server = Start(o);
  ASSERT_OK(server);
  ASSERT_NE((*server)->plaintext_port(), 0);
  auto plain = RateLimitClient::Connect("127.0.0.1:" + std::to_string((*server)->plaintext_port()),
                                        ClientOptions{absl::Seconds(10), ""});
  EXPECT_OK(plain->Consume(InlineRequest()));
}

TEST_F(TlsTest, PlaintextOnANonLoopbackAddressIsRefused) {
  ServerOptions o;
  o.listen.address = "0.0.0.0:0";
  auto server = Start(o);
  ASSERT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(server.status().message(), "--allow_insecure_listen"));

  ServerOptions tls = TlsOptions(false);
  tls.listen.plaintext_address = "[::]:0";
  server = Start(tls);
  ASSERT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(server.status().message(), "--plaintext_listen"));

  o.listen.allow_insecure = true;
  EXPECT_OK(Start(o));
}

TEST_F(TlsTest, TlsOnANonLoopbackAddressNeedsNoExemption) {
  ServerOptions o = TlsOptions(false);
  o.listen.address = "0.0.0.0:0";
  EXPECT_OK(Start(o));
}

TEST_F(TlsTest, BadFilesFailStartNamingTheFlagAndFile) {
  struct Case {
    std::string cert, key, ca, flag, file;
  };
  const std::string missing = dir_.File("missing.pem");
  testing::WriteFileAtomically(dir_.File("garbage.pem"), "not a certificate\n");
  const std::vector<Case> cases = {
      {missing, pki_.Key("server"), "", "--tls_cert_file", missing},
      {pki_.Cert("server"), missing, "", "--tls_key_file", missing},
      {dir_.File("garbage.pem"), pki_.Key("server"), "", "--tls_cert_file",
       dir_.File("garbage.pem")},
      {pki_.Cert("server"), pki_.Key("admin"), "", "--tls_key_file", pki_.Key("admin")},
      {pki_.Cert("server"), pki_.Key("server"), dir_.File("garbage.pem"), "--tls_client_ca_file",
       dir_.File("garbage.pem")},
      {pki_.Cert("server"), "", "", "--tls_key_file", ""},
      {"", "", pki_.Cert("ca"), "--tls_cert_file", ""},
  };
  for (const Case& c : cases) {
    ServerOptions o;
    o.listen.address = "127.0.0.1:0";
    o.listen.tls.cert_file = c.cert;
    o.listen.tls.key_file = c.key;
    o.listen.tls.client_ca_file = c.ca;
    auto server = Start(o);
    ASSERT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << c.flag;
    EXPECT_TRUE(absl::StrContains(server.status().message(), c.flag)) << server.status();
    EXPECT_TRUE(absl::StrContains(server.status().message(), c.file)) << server.status();
  }
}

TEST_F(TlsTest, AdminIdentitiesNeedClientCertificates) {
  ServerOptions o = TlsOptions(false);
  o.admin.identities = {"spiffe://example.org/admin"};
  auto server = Start(o);
  ASSERT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(server.status().message(), "--tls_client_ca_file"));
}

TEST_F(TlsTest, ResetByAdminIdentity) {
  ServerOptions o = TlsOptions(true);
  o.admin.identities = {"spiffe://example.org/admin", "ops.example.org"};
  auto server = Start(o);
  ASSERT_OK(server);
  auto user = Client(**server, "user");
  ASSERT_TRUE(user->Consume(OneTokenRequest())->allowed());
  ASSERT_FALSE(user->Consume(OneTokenRequest())->allowed());
  EXPECT_EQ(user->Reset(InlineReset()).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(user->Consume(OneTokenRequest())->allowed());  // the refused Reset did nothing
  EXPECT_OK(Client(**server, "admin")->Reset(InlineReset()));
  EXPECT_TRUE(user->Consume(OneTokenRequest())->allowed());
}

TEST_F(TlsTest, ClientNamesABadTlsFile) {
  ClientTlsOptions tls;
  tls.ca_file = pki_.Cert("ca");
  tls.cert_file = pki_.Cert("admin");
  tls.key_file = pki_.Key("user");  // not the key of admin.pem
  auto client = RateLimitClient::ConnectTls("127.0.0.1:1", tls);
  ASSERT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(client.status().message(), "--tls_key_file " + pki_.Key("user")))
      << client.status();
  tls.key_file.clear();
  client = RateLimitClient::ConnectTls("127.0.0.1:1", tls);
  ASSERT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(client.status().message(), "--tls_key_file")) << client.status();
  tls = ClientTlsOptions{dir_.File("missing.pem"), "", "", ""};
  client = RateLimitClient::ConnectTls("127.0.0.1:1", tls);
  ASSERT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(client.status().message(), "--tls_ca_file")) << client.status();
}

TEST(PeerIdentityTest, LoopbackAddresses) {
  for (const char* a : {"127.0.0.1:8081", "127.1.2.3:0", "localhost:1", "[::1]:8081",
                        "unix:/run/ratelimit.sock", "[::ffff:127.0.0.1]:5"}) {
    EXPECT_TRUE(IsLoopbackAddress(a)) << a;
  }
  for (const char* a : {"0.0.0.0:8081", "[::]:8081", ":8081", "10.0.0.1:8081", "example.org:1",
                        "[::1", "128.0.0.1:1"}) {
    EXPECT_FALSE(IsLoopbackAddress(a)) << a;
  }
}

TEST(AdminAuthenticatorTest, EitherTheIdentityOrTheTokenSuffices) {
  const std::vector<std::string> admin = {"spiffe://example.org/admin"};
  const std::vector<std::string> user = {"spiffe://example.org/user", "user.example.org"};
  AdminAuthenticator both("s3cret", {"spiffe://example.org/admin", "ops.example.org"});
  EXPECT_EQ(*both.AuthorizeCall(std::nullopt, admin, "Reset"),
            "identity spiffe://example.org/admin");
  EXPECT_EQ(*both.AuthorizeCall("Bearer s3cret", user, "Reset"), "token");
  EXPECT_EQ(*both.AuthorizeCall("Bearer nope", admin, "Reset"),
            "identity spiffe://example.org/admin");
  EXPECT_EQ(*both.AuthorizeCall(std::nullopt, std::vector<std::string>{"ops.example.org"}, "Reset"),
            "identity ops.example.org");
  EXPECT_EQ(both.AuthorizeCall(std::nullopt, user, "Reset").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(both.AuthorizeCall("Bearer nope", user, "Reset").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(both.AuthorizeCall(std::nullopt, {}, "Reset").status().code(),
            absl::StatusCode::kUnauthenticated);

  AdminAuthenticator identities_only("", {"spiffe://example.org/admin"});
  EXPECT_TRUE(identities_only.enabled());
  EXPECT_OK(identities_only.AuthorizeCall(std::nullopt, admin, "Reset"));
  EXPECT_EQ(identities_only.AuthorizeCall("Bearer ", user, "Reset").status().code(),
            absl::StatusCode::kPermissionDenied);

  AdminAuthenticator token_only("s3cret");
  EXPECT_EQ(token_only.AuthorizeCall(std::nullopt, admin, "Reset").status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(*token_only.AuthorizeCall("Bearer s3cret", admin, "Reset"), "token");
}

}  // namespace
}  // namespace ratelimit
