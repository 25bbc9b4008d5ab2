// Admin credentials: the Bearer check on Reset, its constant-time comparison, and where the
// token is loaded from.
#include "server/admin/admin_auth.h"

#include <sys/stat.h>

#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/admin_token.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WriteFileAtomically;

TEST(AdminAuthTest, OutcomesByCredential) {
  AdminAuthenticator auth("s3cret");
  EXPECT_EQ(auth.Authorize(std::nullopt).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(auth.Authorize("Basic czNjcmV0").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(auth.Authorize("Bearer nope").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(auth.Authorize("Bearer s3cre").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(auth.Authorize("Bearer ").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_OK(auth.Authorize("Bearer s3cret"));
  EXPECT_OK(auth.Authorize("bearer s3cret"));
  AdminAuthenticator disabled("");
  EXPECT_EQ(disabled.Authorize("Bearer ").code(), absl::StatusCode::kPermissionDenied);
}

// A server without a token or identities: every call is told Reset is disabled, whatever it
// sent, rather than UNAUTHENTICATED (as if a credential would help).
TEST(AdminAuthTest, DisabledAdministrationIsPermissionDeniedWhateverTheCallerSent) {
  AdminAuthenticator disabled("");
  for (const std::optional<absl::string_view>& sent :
       {std::optional<absl::string_view>(), std::optional<absl::string_view>("Basic x"),
        std::optional<absl::string_view>("Bearer t")}) {
    absl::Status s = disabled.Authorize(sent);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("Reset is disabled"));
    absl::StatusOr<std::string> call = disabled.AuthorizeCall(sent, {"spiffe://x"});
    EXPECT_EQ(call.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(std::string(call.status().message()), ::testing::HasSubstr("Reset is disabled"));
  }
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
