// Admin credentials: the Bearer check on Reset, its constant-time comparison, the authorization
// of an admin RPC from its gRPC context (with its refusals logged), and where the token is loaded
// from.
#include "server/admin/admin_auth.h"

#include <sys/stat.h>

#include <cstdlib>
#include <string>

#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "grpcpp/test/server_context_test_spouse.h"
#include "gtest/gtest.h"
#include "server/observability/repeated_log.h"
#include "server/observability/telemetry.h"
#include "server/observability/tracer.h"
#include "storage/admin_token.h"
#include "tests/support/collecting_sink.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::CollectingSink;
using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::Lines;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WriteFileAtomically;
using ::testing::HasSubstr;

TEST(AdminAuthTest, OutcomesByCredential) {
  AdminAuthenticator auth("s3cret");
  EXPECT_EQ(auth.Authorize(std::nullopt, "Reset").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(auth.Authorize("Basic czNjcmV0", "Reset").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(auth.Authorize("Bearer nope", "Reset").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(auth.Authorize("Bearer s3cre", "Reset").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(auth.Authorize("Bearer ", "Reset").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_OK(auth.Authorize("Bearer s3cret", "Reset"));
  EXPECT_OK(auth.Authorize("bearer s3cret", "Reset"));
  AdminAuthenticator disabled("");
  EXPECT_EQ(disabled.Authorize("Bearer ", "Reset").code(), absl::StatusCode::kPermissionDenied);
}

// A server without a token or identities: every call is told Reset is disabled, whatever it
// sent, rather than UNAUTHENTICATED (as if a credential would help).
TEST(AdminAuthTest, DisabledAdministrationIsPermissionDeniedWhateverTheCallerSent) {
  AdminAuthenticator disabled("");
  for (const std::optional<absl::string_view>& sent :
       {std::optional<absl::string_view>(), std::optional<absl::string_view>("Basic x"),
        std::optional<absl::string_view>("Bearer t")}) {
    absl::Status s = disabled.Authorize(sent, "Reset");
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("Reset is disabled"));
    absl::StatusOr<std::string> call = disabled.AuthorizeCall(sent, {"spiffe://x"}, "Reset");
    EXPECT_EQ(call.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(std::string(call.status().message()), ::testing::HasSubstr("Reset is disabled"));
  }
}

// The refusal names the call it refuses: an operator listing leases or setting an override is
// not told that Reset is disabled. Reset's own message is the one clients document.
TEST(AdminAuthTest, DisabledAdministrationNamesTheCallRefused) {
  AdminAuthenticator disabled("");
  EXPECT_THAT(std::string(disabled.Authorize("Bearer t", "ListLeases").message()),
              ::testing::StartsWith("ListLeases is disabled: the server was started without"));
  EXPECT_THAT(
      std::string(disabled.AuthorizeCall(std::nullopt, {}, "SetOverride").status().message()),
      ::testing::StartsWith("SetOverride is disabled: "));
  EXPECT_EQ(std::string(disabled.Authorize(std::nullopt, "Reset").message()),
            "Reset is disabled: the server was started without an admin token (--admin_token_file "
            "or $RATELIMIT_ADMIN_TOKEN) or admin identities (--admin_identities)");
  // Certificates only: a token is refused naming the call.
  AdminAuthenticator by_certificate("", {"spiffe://ops"});
  EXPECT_THAT(
      std::string(by_certificate.AuthorizeCall("Bearer t", {}, "ListLeases").status().message()),
      ::testing::HasSubstr("may call ListLeases"));
}

// AuthorizeRpc: an admin call authorized by what its gRPC context carries, every refusal logged
// to the caller's RepeatedLog with what the call was about and the call's trace id.
class AuthorizeRpcTest : public ::testing::Test {
 protected:
  // The call's outcome; `trace_id` receives the call's trace id.
  absl::StatusOr<std::string> Call(std::optional<std::string> authorization,
                                   std::string* trace_id = nullptr) {
    grpc::ServerContext context;
    grpc::testing::ServerContextTestSpouse spouse(&context);
    if (authorization) spouse.AddClientMetadata("authorization", *authorization);
    Telemetry::Rpc rpc = telemetry_.StartRpc("svc", "Reset", "svc/Reset", context);
    if (trace_id != nullptr) *trace_id = rpc.TraceId();
    return admin_.AuthorizeRpc(context, rpc, {"limit", "api"}, refused_log_);
  }

  CollectingSink sink_;
  Tracer tracer_{TracerOptions{1.0}, sink_};
  Telemetry telemetry_{nullptr, &tracer_, false, "memory"};
  FakeClock clock_;
  RepeatedLog refused_log_{LogLevel::kWarning, "reset refused", clock_, absl::Seconds(10)};
  const AdminAuthenticator admin_{"s3cret"};
};

TEST_F(AuthorizeRpcTest, AMissingCredentialIsUnauthenticatedAndLogged) {
  ::testing::internal::CaptureStderr();
  std::string trace_id;
  absl::StatusOr<std::string> admin = Call(std::nullopt, &trace_id);
  const std::vector<std::string> lines = Lines(::testing::internal::GetCapturedStderr());
  EXPECT_EQ(admin.status().code(), absl::StatusCode::kUnauthenticated);
  ASSERT_EQ(lines.size(), 1u);
  ASSERT_EQ(trace_id.size(), 32u);
  EXPECT_THAT(lines[0], HasSubstr("WARNING reset refused limit=api reason="));
  EXPECT_THAT(lines[0], HasSubstr(std::string(admin.status().message())));
  EXPECT_THAT(lines[0], HasSubstr("trace_id=" + trace_id));
}

TEST_F(AuthorizeRpcTest, AWrongTokenIsPermissionDeniedAndLogged) {
  ::testing::internal::CaptureStderr();
  absl::StatusOr<std::string> admin = Call("Bearer nope");
  const std::vector<std::string> lines = Lines(::testing::internal::GetCapturedStderr());
  EXPECT_EQ(admin.status().code(), absl::StatusCode::kPermissionDenied);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], HasSubstr("WARNING reset refused limit=api"));
  EXPECT_THAT(lines[0], HasSubstr("admin token does not match"));
  EXPECT_THAT(lines[0], ::testing::Not(HasSubstr("nope")));  // never the presented token
}

TEST_F(AuthorizeRpcTest, TheRightTokenIsAuthorizedAndNotLogged) {
  ::testing::internal::CaptureStderr();
  absl::StatusOr<std::string> admin = Call("Bearer s3cret");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  ASSERT_OK(admin);
  EXPECT_EQ(*admin, "token");
}

TEST_F(AuthorizeRpcTest, RepeatedRefusalsAreWrittenOnceThenSummarised) {
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(Call(std::nullopt).ok());
  EXPECT_FALSE(Call("Bearer nope").ok());
  EXPECT_FALSE(Call("Bearer nope").ok());
  EXPECT_OK(Call("Bearer s3cret"));  // not an occurrence
  clock_.Advance(11 * kSecond);
  refused_log_.Flush();
  const std::vector<std::string> lines = Lines(::testing::internal::GetCapturedStderr());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_THAT(lines[0], HasSubstr("reset refused limit=api"));
  EXPECT_THAT(lines[1], HasSubstr("reset refused repeated 2 times in the last 10s"));
}

TEST(AdminAuthTest, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abd", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abcabc", "abc"));  // cyclic reading must not fool it
  EXPECT_FALSE(ConstantTimeEquals("", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", ""));
}

TEST(AdminAuthTest, LoadsTheTokenFromFileOrEnvironment) {
  TempDir dir;
  WriteFileAtomically(dir.File("t"), "  tok-1  \nignored\n");
  EXPECT_EQ(*LoadAdminToken(dir.File("t"), nullptr), "tok-1");
  EXPECT_EQ(LoadAdminToken(dir.File("missing"), nullptr).status().code(),
            absl::StatusCode::kNotFound);
  WriteFileAtomically(dir.File("empty"), "\n");
  EXPECT_FALSE(LoadAdminToken(dir.File("empty"), nullptr).ok());
  setenv("RATELIMIT_TEST_TOKEN", "env-tok", 1);
  EXPECT_EQ(*LoadAdminToken("", "RATELIMIT_TEST_TOKEN"), "env-tok");
  EXPECT_EQ(*LoadAdminToken("", "RATELIMIT_TEST_TOKEN_UNSET"), "");
}

TEST(AdminTokenFileTest, WarnsWhenGroupOrOthersCanReadTheTokenFile) {
  TempDir dir;
  const std::string file = dir.File("token");
  WriteFileAtomically(file, "secret\n");
  ASSERT_EQ(::chmod(file.c_str(), 0644), 0);
  const std::string warning = AdminTokenFileWarning(file);
  EXPECT_TRUE(absl::StrContains(warning, file)) << warning;
  EXPECT_TRUE(absl::StrContains(warning, "0644")) << warning;
  EXPECT_EQ(*LoadAdminToken(file, nullptr), "secret");  // accepted, with the warning logged

  ASSERT_EQ(::chmod(file.c_str(), 0640), 0);
  EXPECT_TRUE(absl::StrContains(AdminTokenFileWarning(file), "0640"));
  ASSERT_EQ(::chmod(file.c_str(), 0600), 0);
  EXPECT_EQ(AdminTokenFileWarning(file), "");
  ASSERT_EQ(::chmod(file.c_str(), 0400), 0);
  EXPECT_EQ(AdminTokenFileWarning(file), "");
}

}  // namespace
}  // namespace ratelimit
