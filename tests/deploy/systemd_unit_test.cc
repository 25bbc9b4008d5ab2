// deploy/systemd/ratelimit.service: loopback by default, hardened, and accepted by systemd.
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::BinaryPath;
using ::ratelimit::testing::RunCommand;
using ::ratelimit::testing::TempDir;

std::string UnitPath() {
  return std::string(RATELIMIT_SOURCE_DIR) + "/deploy/systemd/ratelimit.service";
}

// The [Service] section: each key with its values (a key may repeat), continuation lines joined.
std::multimap<std::string, std::string> ServiceSection() {
  std::ifstream in(UnitPath());
  std::multimap<std::string, std::string> out;
  std::string line, section, pending;
  while (std::getline(in, line)) {
    if (!pending.empty()) {
      line = pending + " " + line;
      pending.clear();
    }
    if (absl::EndsWith(line, "\\")) {
      pending = line.substr(0, line.size() - 1);
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '[') {
      section = line;
      continue;
    }
    const size_t eq = line.find('=');
    if (section == "[Service]" && eq != std::string::npos) {
      out.emplace(line.substr(0, eq), line.substr(eq + 1));
    }
  }
  return out;
}

std::string Value(const std::multimap<std::string, std::string>& s, const std::string& key) {
  auto it = s.find(key);
  return it == s.end() ? "" : it->second;
}

TEST(SystemdUnitTest, ListensOnLoopbackOnly) {
  const auto s = ServiceSection();
  const std::string exec = Value(s, "ExecStart");
  EXPECT_TRUE(absl::StrContains(exec, "--listen=127.0.0.1:")) << exec;
  EXPECT_TRUE(absl::StrContains(exec, "--metrics_listen=127.0.0.1:")) << exec;
  EXPECT_FALSE(absl::StrContains(exec, "0.0.0.0")) << exec;
  EXPECT_FALSE(absl::StrContains(exec, "allow_insecure_listen")) << exec;
}

TEST(SystemdUnitTest, IsHardened) {
  const auto s = ServiceSection();
  EXPECT_EQ(Value(s, "ProtectSystem"), "strict");
  EXPECT_EQ(Value(s, "NoNewPrivileges"), "yes");
  EXPECT_EQ(Value(s, "PrivateTmp"), "yes");
  EXPECT_EQ(Value(s, "ProtectHome"), "yes");
  EXPECT_EQ(Value(s, "CapabilityBoundingSet"), "");
  EXPECT_EQ(s.count("CapabilityBoundingSet"), 1u);
  // A dedicated user, and the data in its state directory (the only writable path).
  EXPECT_TRUE(Value(s, "DynamicUser") == "yes" || !Value(s, "User").empty());
  EXPECT_NE(Value(s, "User"), "root");
  EXPECT_EQ(Value(s, "StateDirectory"), "ratelimit");
  EXPECT_TRUE(absl::StrContains(Value(s, "ExecStart"), "--data_dir=${STATE_DIRECTORY}"));
  EXPECT_EQ(Value(s, "KillSignal"), "SIGTERM");
}

// systemd itself accepts every line (an unknown key or bad value is a warning it prints), with
// ExecStart pointed at the built binary.
TEST(SystemdUnitTest, SystemdAnalyzeVerifyAcceptsIt) {
  TempDir dir;
  std::ifstream in(UnitPath());
  std::stringstream unit;
  unit << in.rdbuf();
  std::string text = unit.str();
  const std::string installed = "/usr/local/bin/ratelimit-server";
  ASSERT_NE(text.find(installed), std::string::npos);
  text.replace(text.find(installed), installed.size(), BinaryPath("ratelimit-server"));
  testing::WriteFileAtomically(dir.File("ratelimit.service"), text);
  auto [code, output] =
      RunCommand(absl::StrCat("systemd-analyze verify ", dir.File("ratelimit.service"), " 2>&1"));
  EXPECT_EQ(code, 0) << output;
  EXPECT_FALSE(absl::StrContains(output, "ratelimit.service")) << output;
}

}  // namespace
}  // namespace ratelimit
