#include "storage/admin_token.h"

#include <sys/stat.h>

#include <cstdlib>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "storage/file_util.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::BinaryPath;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WriteFileAtomically;

TEST(AdminTokenTest, FirstLineOfTheFileTrimmedElseTheEnvironment) {
  TempDir dir;
  WriteFileAtomically(dir.File("t"), "  tok-1 \nsecond line\n");
  ASSERT_EQ(::chmod(dir.File("t").c_str(), 0600), 0);
  absl::StatusOr<AdminTokenSource> s = ReadAdminToken(dir.File("t"), nullptr);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->token, "tok-1");
  EXPECT_EQ(s->warning, "");

  ::setenv("RATELIMIT_ADMIN_TOKEN_TEST", " env-tok\n", 1);
  EXPECT_EQ(ReadAdminToken("", "RATELIMIT_ADMIN_TOKEN_TEST")->token, "env-tok");
  // A named file wins over the environment.
  EXPECT_EQ(ReadAdminToken(dir.File("t"), "RATELIMIT_ADMIN_TOKEN_TEST")->token, "tok-1");
  ::unsetenv("RATELIMIT_ADMIN_TOKEN_TEST");
  EXPECT_EQ(ReadAdminToken("", "RATELIMIT_ADMIN_TOKEN_TEST")->token, "");
  EXPECT_EQ(ReadAdminToken("", nullptr)->token, "");
}

TEST(AdminTokenTest, MissingOrBlankFileIsAnError) {
  TempDir dir;
  EXPECT_EQ(ReadAdminToken(dir.File("missing"), nullptr).status().code(),
            absl::StatusCode::kNotFound);
  WriteFileAtomically(dir.File("blank"), "   \n");
  EXPECT_EQ(ReadAdminToken(dir.File("blank"), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A file of no bytes is empty too, not unreadable.
  WriteFileAtomically(dir.File("empty"), "");
  const absl::Status empty = ReadAdminToken(dir.File("empty"), nullptr).status();
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument) << empty;
  EXPECT_EQ(empty.message(), dir.File("empty") + ": token is empty");
}

TEST(AdminTokenTest, GroupOrOtherReadableFileIsAcceptedWithAWarning) {
  TempDir dir;
  WriteFileAtomically(dir.File("t"), "secret\n");
  ASSERT_EQ(::chmod(dir.File("t").c_str(), 0644), 0);
  absl::StatusOr<AdminTokenSource> s = ReadAdminToken(dir.File("t"), nullptr);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->token, "secret");
  EXPECT_TRUE(absl::StrContains(s->warning, "0644")) << s->warning;
}

// The CLI applies the server's rule: output of `ratelimit reset` with the given token file.
std::string CliResetOutput(const TempDir& dir, const std::string& token_file) {
  const std::string out = dir.File("cli.out");
  // The token is read before the client connects, and a rejected token file ends the command;
  // an accepted one dials a server that refuses the connection.
  ::ratelimit::testing::RefusingPort server;
  const std::string cmd = BinaryPath("ratelimit") + " reset --target=" + server.target() +
                          " --timeout=1ms --name=a --key=b --admin_token_file=" + token_file +
                          " >" + out + " 2>&1";
  std::system(cmd.c_str());
  return ReadFileToString(out).value_or("");
}

TEST(AdminTokenTest, CliRejectsABlankTokenFileAndWarnsOnAReadableOne) {
  TempDir dir;
  WriteFileAtomically(dir.File("blank"), "\n");
  EXPECT_TRUE(absl::StrContains(CliResetOutput(dir, dir.File("blank")), "token is empty"));

  WriteFileAtomically(dir.File("open"), "secret\n");
  ASSERT_EQ(::chmod(dir.File("open").c_str(), 0644), 0);
  const std::string out = CliResetOutput(dir, dir.File("open"));
  EXPECT_TRUE(absl::StrContains(out, "warning: admin token file")) << out;
  EXPECT_TRUE(absl::StrContains(out, "0644")) << out;
}

}  // namespace
}  // namespace ratelimit
