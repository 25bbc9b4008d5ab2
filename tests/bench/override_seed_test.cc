// ratelimit_override_seed as a process: the overrides it writes are those the store then loads
// (half exact keys, half patterns, one matching --match), each with its audit entry, and a server
// started on the directory decides the matched key with its override; bad flags are refused
// naming the flag.
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ratelimit/v1/ratelimit.grpc.pb.h"
#include "storage/overrides/override.h"
#include "storage/overrides/override_store.h"
#include "storage/rocksdb/rocksdb_state_store.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::BinaryPath;
using ::ratelimit::testing::RunCommand;
using ::ratelimit::testing::ServerProcess;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WriteFileAtomically;

std::string Seed(const std::vector<std::string>& flags) {
  return absl::StrCat(BinaryPath("ratelimit_override_seed"), " ", absl::StrJoin(flags, " "));
}

TEST(OverrideSeedTest, WritesTheOverridesTheStoreThenLoads) {
  TempDir dir;
  const auto [code, out] =
      RunCommand(Seed({"--dir=" + dir.File("data"), "--name=api", "--overrides=11", "--match=hot",
                       "--capacity=5000", "--json"}));
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("\"overrides\": 11"), std::string::npos) << out;

  RocksDbStateStoreOptions options;
  options.path = dir.File("data");
  auto store = RocksDbStateStore::Open(options);
  ASSERT_TRUE(store.ok()) << store.status();
  OverrideStore& overrides = *(*store)->overrides();
  auto snapshot = overrides.LoadAll();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_EQ(snapshot->version, 11u);
  ASSERT_EQ(snapshot->overrides.size(), 11u);
  int patterns = 0;
  std::vector<std::string> matching_hot;
  for (const Override& o : snapshot->overrides) {
    EXPECT_EQ(o.target.name, "api");
    EXPECT_EQ(o.action.capacity, 5000);
    EXPECT_FALSE(o.deleted_at_us.has_value());
    if (o.target.pattern) {
      ++patterns;
      if (PatternMatches(o.target.key, "hot")) matching_hot.push_back(o.target.key);
    } else {
      EXPECT_TRUE(absl::StartsWith(o.target.key, "k")) << o.target.key;
      EXPECT_NE(o.target.key, "hot");
    }
  }
  EXPECT_EQ(patterns, 5);
  EXPECT_EQ(matching_hot, std::vector<std::string>{"hot*"});
  // One "set" audit entry per override, written with it.
  auto audit = overrides.ListAudit(0, "api", 100);
  ASSERT_TRUE(audit.ok()) << audit.status();
  ASSERT_EQ(audit->size(), 11u);
  EXPECT_EQ(audit->front().action, "set");
  EXPECT_TRUE(audit->front().after.has_value());
}

TEST(OverrideSeedTest, WithoutMatchNoOverrideMatchesAKeyWithoutADigit) {
  TempDir dir;
  const auto [code, out] =
      RunCommand(Seed({"--dir=" + dir.File("data"), "--overrides=60", "--name=api"}));
  ASSERT_EQ(code, 0) << out;
  RocksDbStateStoreOptions options;
  options.path = dir.File("data");
  auto store = RocksDbStateStore::Open(options);
  ASSERT_TRUE(store.ok()) << store.status();
  auto snapshot = (*store)->overrides()->LoadAll();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  ASSERT_EQ(snapshot->overrides.size(), 60u);
  for (const Override& o : snapshot->overrides) {
    for (const char* key : {"hot", "load", "user-x"}) {
      EXPECT_FALSE(o.target.pattern ? PatternMatches(o.target.key, key) : o.target.key == key)
          << o.target.key << " matches " << key;
    }
  }
}

TEST(OverrideSeedTest, AServerOnTheDirectoryDecidesTheMatchedKeyWithItsOverride) {
  TempDir dir;
  const auto [code, out] = RunCommand(Seed({"--dir=" + dir.File("data"), "--name=api",
                                            "--overrides=100", "--match=hot", "--capacity=777"}));
  ASSERT_EQ(code, 0) << out;
  WriteFileAtomically(
      dir.File("limits.yaml"),
      "limits:\n  - {name: api, kind: token_bucket, rate: 1000000000, period: 1s}\n");
  auto server = ServerProcess::Start(
      {"--data_dir=" + dir.File("data"), "--limits_file=" + dir.File("limits.yaml")}, dir.path());
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::RateLimitService::NewStub(
      grpc::CreateChannel((*server)->target(), grpc::InsecureChannelCredentials()));
  for (const auto& [key, override_key, capacity] :
       std::vector<std::tuple<std::string, std::string, double>>{
           {"hot", "hot*", 777}, {"k0", "k0", 777}, {"cold", "", 1e9}}) {
    v1::RateLimitRequest request;
    v1::LimitRequest* limit = request.add_limits();
    limit->set_name("api");
    limit->set_key(key);
    grpc::ClientContext context;
    v1::RateLimitResponse response;
    ASSERT_TRUE(stub->Consume(&context, request, &response).ok()) << key;
    ASSERT_EQ(response.results_size(), 1) << key;
    EXPECT_TRUE(response.allowed()) << key;
    EXPECT_EQ(response.results(0).override(), override_key) << key;
    EXPECT_EQ(response.results(0).capacity(), capacity) << key;
  }
}

TEST(OverrideSeedTest, BadFlagsAreRefusedNamingTheFlag) {
  TempDir dir;
  const std::string data = "--dir=" + dir.File("data");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--overrides=10"}, "--dir"},
      {{data, "--redis_address=127.0.0.1:1"}, "--redis_address"},
      {{data, "--overrides=-1"}, "--overrides"},
      {{data, "--overrides=1", "--match=hot"}, "--overrides"},
      {{data, "--capacity=-1"}, "--capacity"},
      {{data, "--name="}, "--name"},
  };
  for (const auto& [flags, named] : cases) {
    const auto [code, out] = RunCommand(Seed(flags));
    EXPECT_EQ(code, 2) << absl::StrJoin(flags, " ") << ": " << out;
    EXPECT_NE(out.find(named), std::string::npos) << absl::StrJoin(flags, " ") << ": " << out;
  }
}

}  // namespace
}  // namespace ratelimit
