// The server over a RocksDB store that hits a full disk, collects idle garbage on a timer, and
// keeps its files and its admin token private.
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "server/admin_auth.h"
#include "server/server.h"
#include "storage/rocksdb_state_store.h"
#include "tests/support/faulty_file_system.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

namespace fs = std::filesystem;
using ::ratelimit::testing::Eventually;
using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::FaultyFileSystem;
using ::ratelimit::testing::kMinute;
using ::ratelimit::testing::ServerProcess;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WriteFileAtomically;
using HS = ::grpc::health::v1::HealthCheckResponse;

constexpr char kLimits[] = R"(limits:
  - name: api
    kind: token_bucket
    rate: 2
    period: 1s
)";

class StoreHealthServerTest : public ::testing::Test {
 protected:
  std::unique_ptr<RocksDbStateStore> OpenStore(std::shared_ptr<rocksdb::FileSystem> fs = nullptr) {
    RocksDbStateStoreOptions o;
    o.path = dir_.File("data");
    o.clock = &clock_;
    o.file_system = std::move(fs);
    auto opened = RocksDbStateStore::Open(o);
    EXPECT_TRUE(opened.ok()) << opened.status();
    return opened.ok() ? *std::move(opened) : nullptr;
  }

  void Start(std::unique_ptr<StateStore> store, ServerOptions o = {}) {
    WriteFileAtomically(dir_.File("limits.yaml"), kLimits);
    o.listen_address = "127.0.0.1:0";
    o.metrics_listen = "127.0.0.1:0";
    o.limits_file = dir_.File("limits.yaml");
    o.health_probe_interval = absl::Milliseconds(10);
    auto server = RateLimitServer::Start(o, clock_, std::move(store));
    ASSERT_OK(server);
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    client_ = std::make_unique<RateLimitClient>(channel_, ClientOptions{absl::Seconds(10), ""});
  }

  HS::ServingStatus GrpcHealth() {
    auto stub = grpc::health::v1::Health::NewStub(channel_);
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    req.set_service("ratelimit.v1.RateLimitService");
    HS resp;
    if (!stub->Check(&ctx, req, &resp).ok()) return HS::UNKNOWN;
    return resp.status();
  }

  std::pair<int, std::string> Http(const std::string& path) {
    httplib::Client http("127.0.0.1", server_->metrics_port());
    auto res = http.Get(path);
    if (!res) return {-1, ""};
    return {res->status, res->body};
  }

  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<RateLimitServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<RateLimitClient> client_;
};

TEST_F(StoreHealthServerTest, AFullDiskTurnsHealthNotServingAndItRecoversByItself) {
  auto faulty = std::make_shared<FaultyFileSystem>();
  auto store = OpenStore(faulty);
  ASSERT_NE(store, nullptr);
  Start(std::move(store));
  ASSERT_OK(client_->Consume(MakeRequest("api", "u1")));
  EXPECT_EQ(GrpcHealth(), HS::SERVING);
  EXPECT_EQ(Http("/healthz"), std::make_pair(200, std::string("SERVING\n")));

  // No decision has failed yet: the probe's own write finds the full disk.
  faulty->SetFull(true);
  ASSERT_TRUE(Eventually([&] { return GrpcHealth() == HS::NOT_SERVING; }));
  EXPECT_EQ(Http("/healthz"), std::make_pair(503, std::string("STORE_FAILING\n")));
  EXPECT_TRUE(absl::StrContains(Http("/metrics").second, "\nratelimit_up 0\n"));
  for (int i = 0; i < 200; ++i) {
    absl::StatusOr<v1::RateLimitResponse> r = client_->Consume(MakeRequest("api", "u2"));
    ASSERT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();  // fail closed
  }

  faulty->SetFull(false);
  ASSERT_TRUE(Eventually([&] { return GrpcHealth() == HS::SERVING; }));
  EXPECT_EQ(Http("/healthz").first, 200);
  ASSERT_TRUE(
      Eventually([&] { return absl::StrContains(Http("/metrics").second, "\nratelimit_up 1\n"); }));
  absl::StatusOr<v1::RateLimitResponse> after = client_->Consume(MakeRequest("api", "u1"));
  ASSERT_OK(after);
  EXPECT_TRUE(after->allowed());
  // u1's first token, taken before the disk filled, is still taken: capacity 2, one left.
  EXPECT_DOUBLE_EQ(after->results(0).value(), 0);
}

TEST_F(StoreHealthServerTest, StoreGaugesAreExportedThroughTheInterface) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  Start(std::move(store));
  const std::string metrics = Http("/metrics").second;
  EXPECT_TRUE(absl::StrContains(metrics, "\nratelimit_store_live_states ")) << metrics;
  EXPECT_TRUE(absl::StrContains(metrics, "\nratelimit_rocksdb_live_sst_bytes ")) << metrics;
}

TEST_F(StoreHealthServerTest, IdleRefilledStatesAreCollectedOnATimer) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  RocksDbStateStore* rocks = store.get();
  ServerOptions o;
  o.gc_interval = absl::Milliseconds(20);
  Start(std::move(store), o);
  for (int i = 0; i < 100; ++i) {
    ASSERT_OK(client_->Consume(MakeRequest("api", absl::StrCat("user-", i))));
  }
  const StateKey probe{"api", "user-0"};
  ASSERT_TRUE(rocks->Get(probe).ok());
  // Not refilled yet: collections run but keep the states.
  ASSERT_TRUE(Eventually([&] { return rocks->EstimateNumStates() >= 100; }));
  ASSERT_TRUE(rocks->Get(probe)->has_value());

  // Time passes without a single write: the states refill and the timer collects them.
  clock_.Advance(kMinute);
  ASSERT_TRUE(Eventually([&] { return rocks->EstimateNumStates() == 0; }));
  for (int i = 0; i < 100; ++i) {
    auto got = rocks->Get({"api", absl::StrCat("user-", i)});
    ASSERT_OK(got);
    EXPECT_FALSE(got->has_value()) << i;
  }
}

// ---- Files of a real server process ----

mode_t Mode(const fs::path& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST(ServerFilesTest, DataDirectoryAndRocksDbFilesAreOwnerOnly) {
  TempDir dir;
  WriteFileAtomically(dir.File("limits.yaml"), kLimits);
  const mode_t old = ::umask(022);  // what a shell usually gives
  auto server = ServerProcess::Start(
      {"--data_dir=" + dir.File("data"), "--limits_file=" + dir.File("limits.yaml")}, dir.path());
  ::umask(old);
  ASSERT_OK(server);
  auto client = RateLimitClient::Connect((*server)->target());
  for (int i = 0; i < 10; ++i) ASSERT_OK(client->Consume(MakeRequest("api", absl::StrCat(i))));
  ASSERT_EQ((*server)->StopWith(SIGTERM), 0);  // flushes: SSTs exist too

  EXPECT_EQ(Mode(dir.File("data")), 0700u);
  int files = 0, ssts = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir.File("data"))) {
    if (!e.is_regular_file()) continue;
    ++files;
    if (e.path().extension() == ".sst") ++ssts;
    EXPECT_EQ(Mode(e.path()) & 077, 0u) << e.path() << " mode " << std::oct << Mode(e.path());
  }
  EXPECT_GT(files, 3);
  EXPECT_GT(ssts, 0);
}

TEST(ServerFilesTest, ACorruptWalRefusesToStartUnlessSalvaged) {
  TempDir dir;
  WriteFileAtomically(dir.File("limits.yaml"), kLimits);
  const std::vector<std::string> args = {"--data_dir=" + dir.File("data"),
                                         "--limits_file=" + dir.File("limits.yaml")};
  {
    auto server = ServerProcess::Start(args, dir.path());
    ASSERT_OK(server);
    auto client = RateLimitClient::Connect((*server)->target());
    for (int i = 0; i < 50; ++i) ASSERT_OK(client->Consume(MakeRequest("api", absl::StrCat(i))));
    (*server)->StopWith(SIGKILL);  // the decisions are in the WAL only
  }
  std::string wal;
  for (const auto& e : fs::directory_iterator(dir.File("data"))) {
    const std::string p = e.path().string();
    if (absl::EndsWith(p, ".log") && fs::file_size(p) > 0 && p > wal) wal = p;
  }
  ASSERT_FALSE(wal.empty());
  {
    std::fstream f(wal, std::ios::in | std::ios::out | std::ios::binary);
    const std::streamoff middle = static_cast<std::streamoff>(fs::file_size(wal) / 2);
    f.seekp(middle);
    f.write("\xff\x00\xff\x00", 4);
  }
  auto refused = ServerProcess::Start(args, dir.path());
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "Corruption")) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "--salvage_wal")) << refused.status();

  std::vector<std::string> salvage = args;
  salvage.push_back("--salvage_wal");
  auto salvaged = ServerProcess::Start(salvage, dir.path());
  ASSERT_OK(salvaged);
  EXPECT_TRUE(absl::StrContains((*salvaged)->Stderr(), "salvaging")) << (*salvaged)->Stderr();
  EXPECT_TRUE(absl::StrContains((*salvaged)->Stderr(), "lost")) << (*salvaged)->Stderr();
  EXPECT_EQ((*salvaged)->StopWith(SIGTERM), 0);
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
