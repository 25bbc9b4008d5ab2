// ratelimit_override_propagation as a process against two in-process servers whose overrides are
// kept in one store (each keeps its states apart, as replicas of a shared store see the same
// overrides): every change made on A reaches B through B's own refresh and is counted once; against
// one server (A = B) as well, with a background load; bad flags are refused naming the flag.
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "storage/rocksdb/rocksdb_state_store.h"
#include "tests/support/forwarding_store.h"
#include "tests/support/json_number.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::BinaryPath;
using ::ratelimit::testing::JsonNumber;
using ::ratelimit::testing::RunCommand;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WriteFileAtomically;

constexpr char kToken[] = "propagation-test-token";

// A replica's store: states of its own (in memory), the overrides of a store shared with the
// other replicas.
class SharedOverridesStore final : public testing::ForwardingStore {
 public:
  explicit SharedOverridesStore(OverrideStore& overrides) : overrides_(overrides) {}
  OverrideStore* overrides() override { return &overrides_; }

 private:
  OverrideStore& overrides_;
};

std::string Tool(const std::vector<std::string>& flags) {
  return absl::StrCat(BinaryPath("ratelimit_override_propagation"), " ", absl::StrJoin(flags, " "));
}

class OverridePropagationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteFileAtomically(
        dir_.File("limits.yaml"),
        "limits:\n  - {name: api, kind: token_bucket, rate: 1000000, period: 1s}\n");
    WriteFileAtomically(dir_.File("token"), std::string(kToken) + "\n");
    chmod(dir_.File("token").c_str(), 0600);
    RocksDbStateStoreOptions options;
    options.path = dir_.File("shared");
    auto store = RocksDbStateStore::Open(options);
    ASSERT_TRUE(store.ok()) << store.status();
    shared_ = *std::move(store);
  }

  std::unique_ptr<RateLimitServer> StartReplica() {
    ServerOptions options;
    options.listen.address = "127.0.0.1:0";
    options.observability.metrics_listen = "";
    options.store.open.rocksdb.path = dir_.File("unused");  // the store is given below
    options.limits.file = dir_.File("limits.yaml");
    options.admin.token = kToken;
    auto server =
        RateLimitServer::Start(options, SystemClock::Default(),
                               std::make_unique<SharedOverridesStore>(*shared_->overrides()));
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }

  std::string Target(const RateLimitServer& s) { return absl::StrCat("127.0.0.1:", s.port()); }

  TempDir dir_;
  std::unique_ptr<RocksDbStateStore> shared_;
};

TEST_F(OverridePropagationTest, EveryChangeOnAReachesBThroughItsRefresh) {
  auto a = StartReplica();
  auto b = StartReplica();
  ASSERT_TRUE(a && b);
  const auto [code, out] =
      RunCommand(Tool({"--a=" + Target(*a), "--b=" + Target(*b), "--name=api", "--changes=4",
                       "--max_gap=50ms", "--admin_token_file=" + dir_.File("token"), "--json"}));
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(JsonNumber(out, "propagation", "count"), 4) << out;
  EXPECT_EQ(JsonNumber(out, "set_override", "count"), 4) << out;
  EXPECT_NE(out.find("\"same_server\": false"), std::string::npos) << out;
  // B learns of a change only at its next refresh (every 250 ms), so not at its first Check.
  EXPECT_GT(JsonNumber(out, "propagation", "max_ms"), 0) << out;
  EXPECT_LE(JsonNumber(out, "propagation", "max_ms"), 5000) << out;
  EXPECT_GT(JsonNumber(out, "", "polls_per_change"), 1) << out;
  // Each change is in the shared store, once.
  auto snapshot = shared_->overrides()->LoadAll();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_EQ(snapshot->overrides.size(), 4u);
}

TEST_F(OverridePropagationTest, OneServerAppliesItsOwnChangeAtOnceUnderLoad) {
  auto a = StartReplica();
  ASSERT_TRUE(a);
  const auto [code, out] =
      RunCommand(absl::StrCat("RATELIMIT_ADMIN_TOKEN=", kToken, " ",
                              Tool({"--a=" + Target(*a), "--b=" + Target(*a), "--name=api",
                                    "--changes=5", "--max_gap=0ms", "--load_rps=200", "--json"})));
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(JsonNumber(out, "propagation", "count"), 5) << out;
  EXPECT_NE(out.find("\"same_server\": true"), std::string::npos) << out;
  // The server that makes a change reloads before it answers: the first Check after the answer
  // applies it (if none before did).
  EXPECT_LE(JsonNumber(out, "", "max_checks_after_answer"), 1) << out;
  EXPECT_EQ(JsonNumber(out, "from_send", "count"), 5) << out;
  EXPECT_GT(JsonNumber(out, "", "load_rps"), 0) << out;
  EXPECT_EQ(JsonNumber(out, "", "load_errors"), 0) << out;
}

TEST(OverridePropagationFlagsTest, BadFlagsAreRefusedNamingTheFlag) {
  const std::string a = "--a=127.0.0.1:1", b = "--b=127.0.0.1:1", name = "--name=api";
  const std::string token = absl::StrCat("RATELIMIT_ADMIN_TOKEN=", kToken, " ");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {token + Tool({b, name}), "--a"},
      {token + Tool({a, name}), "--b"},
      {token + Tool({a, b}), "--name"},
      {token + Tool({a, b, name, "--changes=0"}), "--changes"},
      {token + Tool({a, b, name, "--poll_interval=0s"}), "--poll_interval"},
      {token + Tool({a, b, name, "--load_rps=-1"}), "--load_rps"},
      {token + Tool({a, b, name, "--load_threads=0"}), "--load_threads"},
      {"RATELIMIT_ADMIN_TOKEN= " + Tool({a, b, name}), "--admin_token_file"},
      {Tool({a, b, name, "--admin_token_file=/nonexistent/token"}), "--admin_token_file"},
  };
  for (const auto& [command, named] : cases) {
    const auto [code, out] = RunCommand(command);
    EXPECT_EQ(code, 2) << command << ": " << out;
    EXPECT_NE(out.find(named), std::string::npos) << command << ": " << out;
  }
}

}  // namespace
}  // namespace ratelimit
