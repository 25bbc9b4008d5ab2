// The TLS flags of ratelimit-server and of the ratelimit CLI, on real processes.
#include <signal.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/support/test_pki.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::BinaryPath;
using ::ratelimit::testing::Eventually;
using ::ratelimit::testing::RunCommand;
using ::ratelimit::testing::ServerProcess;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::TestPki;

class TlsProcessTest : public ::testing::Test {
 protected:
  TlsProcessTest() : pki_(dir_.path()) {}
  void SetUp() override { ASSERT_TRUE(pki_.ok()) << pki_.status(); }

  // The server flags for mTLS with the test CA.
  std::vector<std::string> MtlsFlags() {
    return {"--data_dir=" + dir_.File("data"), "--tls_cert_file=" + pki_.Cert("server"),
            "--tls_key_file=" + pki_.Key("server"), "--tls_client_ca_file=" + pki_.Cert("ca")};
  }

  // Runs the CLI against `server` with `flags`; returns (exit code, output).
  std::pair<int, std::string> Cli(const ServerProcess& server, const std::string& flags) {
    return RunCommand(absl::StrCat("timeout 60 ", BinaryPath("ratelimit"),
                                   " --target=", server.target(), " --timeout=20s ", flags));
  }

  std::string ClientFlags(const std::string& client) {
    return absl::StrCat("--tls_ca_file=", pki_.Cert("ca"), " --tls_cert_file=", pki_.Cert(client),
                        " --tls_key_file=", pki_.Key(client));
  }

  // Runs ratelimit-server with `flags` expecting it to fail at start-up; returns its output.
  std::pair<int, std::string> FailedStart(const std::string& flags) {
    return RunCommand(absl::StrCat("timeout 60 ", BinaryPath("ratelimit-server"),
                                   " --data_dir=", dir_.File("data"),
                                   " --metrics_listen= --listen=127.0.0.1:0 ", flags));
  }

  TempDir dir_;
  TestPki pki_;
};

constexpr char kInline[] = " --name=api --key=k --kind=token_bucket --rate=1 --period=1h";

TEST_F(TlsProcessTest, CliConsumesOverMutualTls) {
  auto server = ServerProcess::Start(MtlsFlags(), dir_.path());
  ASSERT_OK(server);
  auto [code, out] = Cli(**server, absl::StrCat("consume ", ClientFlags("user"), kInline));
  EXPECT_EQ(code, 0) << out;
  // The server certificate names localhost: the name is checked, and can be given explicitly.
  std::tie(code, out) = Cli(**server, absl::StrCat("check ", ClientFlags("user"),
                                                   " --tls_server_name=localhost", kInline));
  EXPECT_EQ(code, 2) << out;  // the one token is taken
  std::tie(code, out) = Cli(
      **server,
      absl::StrCat("check ", ClientFlags("user"), " --tls_server_name=elsewhere.example", kInline));
  EXPECT_EQ(code, 1) << out;
  EXPECT_TRUE(absl::StrContains(out, "UNAVAILABLE")) << out;
}

TEST_F(TlsProcessTest, CliWithoutClientCertificateOrWithPlaintextIsRefused) {
  auto server = ServerProcess::Start(MtlsFlags(), dir_.path());
  ASSERT_OK(server);
  auto [code, out] =
      Cli(**server, absl::StrCat("consume --tls_ca_file=", pki_.Cert("ca"), kInline));
  EXPECT_EQ(code, 1) << out;
  EXPECT_TRUE(absl::StrContains(out, "UNAVAILABLE")) << out;
  std::tie(code, out) = Cli(**server, absl::StrCat("consume", kInline));
  EXPECT_EQ(code, 1) << out;
  EXPECT_TRUE(absl::StrContains(out, "UNAVAILABLE")) << out;
  // gRPC says only that the socket closed: the CLI says what is likely wrong.
  EXPECT_TRUE(absl::StrContains(out, "if the server serves TLS, add --tls")) << out;
  std::tie(code, out) = Cli(**server, absl::StrCat("consume ", ClientFlags("rogue"), kInline));
  EXPECT_EQ(code, 1) << out;
}

TEST_F(TlsProcessTest, CliNamesABadTlsFile) {
  auto server = ServerProcess::Start(MtlsFlags(), dir_.path());
  ASSERT_OK(server);
  auto [code, out] =
      Cli(**server, absl::StrCat("consume --tls_ca_file=", dir_.File("nope.pem"), kInline));
  EXPECT_EQ(code, 1) << out;
  EXPECT_TRUE(absl::StrContains(out, "--tls_ca_file " + dir_.File("nope.pem"))) << out;
}

TEST_F(TlsProcessTest, ResetByAdminSanAllowedAndOtherSanRefusedAndAudited) {
  std::vector<std::string> flags = MtlsFlags();
  flags.push_back("--admin_identities=spiffe://example.org/admin,ops.example.org");
  auto server = ServerProcess::Start(flags, dir_.path());
  ASSERT_OK(server);
  auto [code, out] = Cli(**server, absl::StrCat("consume ", ClientFlags("user"), kInline));
  ASSERT_EQ(code, 0) << out;

  std::tie(code, out) = Cli(
      **server, absl::StrCat("reset --source=inline ", ClientFlags("user"), " --name=api --key=k"));
  EXPECT_EQ(code, 1) << out;
  EXPECT_TRUE(absl::StrContains(out, "PERMISSION_DENIED")) << out;
  EXPECT_TRUE(Eventually([&] {
    const std::string log = (*server)->Stderr();
    return absl::StrContains(log, "reset refused") &&
           absl::StrContains(log, "spiffe://example.org/user");
  })) << (*server)->Stderr();
  std::tie(code, out) = Cli(**server, absl::StrCat("consume ", ClientFlags("user"), kInline));
  EXPECT_EQ(code, 2) << out;  // nothing was reset

  std::tie(code, out) = Cli(**server, absl::StrCat("reset --source=inline ", ClientFlags("admin"),
                                                   " --name=api --key=k"));
  EXPECT_EQ(code, 0) << out;
  EXPECT_TRUE(Eventually([&] {
    return absl::StrContains((*server)->Stderr(), "identity spiffe://example.org/admin");
  })) << (*server)->Stderr();
  std::tie(code, out) = Cli(**server, absl::StrCat("consume ", ClientFlags("user"), kInline));
  EXPECT_EQ(code, 0) << out;
}

TEST_F(TlsProcessTest, BadCertificateFilesFailStartWithOneLineNamingFlagAndFile) {
  const std::string missing = dir_.File("missing.pem");
  auto [code, out] = FailedStart(
      absl::StrCat("--tls_cert_file=", missing, " --tls_key_file=", pki_.Key("server")));
  EXPECT_EQ(code, 1) << out;
  EXPECT_TRUE(absl::StrContains(out, "--tls_cert_file " + missing)) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;

  std::tie(code, out) = FailedStart(
      absl::StrCat("--tls_cert_file=", pki_.Cert("server"), " --tls_key_file=", pki_.Key("user")));
  EXPECT_EQ(code, 1) << out;
  EXPECT_TRUE(absl::StrContains(out, "--tls_key_file " + pki_.Key("user"))) << out;
  EXPECT_TRUE(absl::StrContains(out, "does not belong")) << out;
}

TEST_F(TlsProcessTest, PlaintextOnAWildcardAddressNeedsTheExplicitFlag) {
  auto [code, out] = FailedStart("--listen=0.0.0.0:0");
  EXPECT_EQ(code, 1) << out;
  EXPECT_TRUE(absl::StrContains(out, "--allow_insecure_listen")) << out;
  // With the flag it starts: it writes its port file (waited for up to 30 s), then stops on
  // SIGTERM.
  const std::string port_file = dir_.File("port");
  std::tie(code, out) = RunCommand(absl::StrCat(
      "(", BinaryPath("ratelimit-server"), " --data_dir=", dir_.File("data2"),
      " --metrics_listen= --listen=0.0.0.0:0 --allow_insecure_listen --port_file=", port_file,
      " & pid=$!; i=0; while [ ! -s ", port_file, " ] && [ $i -lt 300 ]; do sleep 0.1; ",
      "i=$((i+1)); done; kill -TERM $pid; wait $pid)"));
  EXPECT_EQ(code, 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "listening")) << out;
}

TEST_F(TlsProcessTest, HelpListsTheTlsFlags) {
  const std::string server_help = RunCommand(BinaryPath("ratelimit-server") + " --help").second;
  for (const char* flag :
       {"--tls_cert_file", "--tls_key_file", "--tls_client_ca_file", "--tls_reload_interval",
        "--plaintext_listen", "--allow_insecure_listen", "--admin_identities", "--otel_ca_file",
        "--metrics_tls_cert_file", "--metrics_tls_key_file"}) {
    EXPECT_TRUE(absl::StrContains(server_help, flag)) << flag;
  }
  const std::string cli_help = RunCommand(BinaryPath("ratelimit") + " --help").second;
  for (const char* flag :
       {"--tls_ca_file", "--tls_cert_file", "--tls_key_file", "--tls_server_name", "--tls="}) {
    EXPECT_TRUE(absl::StrContains(cli_help, flag)) << flag;
  }
}

}  // namespace
}  // namespace ratelimit
