// An in-process server over a RocksDB store that hits a full disk, exports the store's gauges
// and collects idle garbage on a timer. The files of a real server process are checked in
// store_process_test.cc.
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/cpp/client.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "storage/rocksdb/rocksdb_state_store.h"
#include "tests/support/faulty_file_system.h"
#include "tests/support/rocksdb_test_support.h"
#include "tests/support/server_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::Eventually;
using ::ratelimit::testing::FaultyFileSystem;
using ::ratelimit::testing::GrpcHealth;
using ::ratelimit::testing::InProcessServerTest;
using ::ratelimit::testing::kMinute;
using ::ratelimit::testing::OpenRocksDbStore;
using HS = ::grpc::health::v1::HealthCheckResponse;

class StoreHealthServerTest : public InProcessServerTest {
 protected:
  std::unique_ptr<RocksDbStateStore> OpenStore(std::shared_ptr<rocksdb::FileSystem> fs = nullptr) {
    return OpenRocksDbStore(dir_.File("data"), clock_, std::move(fs));
  }

  void Start(std::unique_ptr<StateStore> store, ServerOptions o = {}) {
    StartServer(std::move(o), std::move(store));
    client_ = std::make_unique<RateLimitClient>(channel_, ClientOptions{absl::Seconds(10), ""});
  }

  std::unique_ptr<RateLimitClient> client_;
};

TEST_F(StoreHealthServerTest, AFullDiskTurnsHealthNotServingAndItRecoversByItself) {
  auto faulty = std::make_shared<FaultyFileSystem>();
  auto store = OpenStore(faulty);
  ASSERT_NE(store, nullptr);
  Start(std::move(store));
  ASSERT_OK(client_->Consume(MakeRequest("api", "u1")));
  EXPECT_EQ(GrpcHealth(channel_), HS::SERVING);
  EXPECT_EQ(Http("/healthz"), std::make_pair(200, std::string("SERVING\n")));

  // No decision has failed yet: the probe's own write finds the full disk.
  faulty->SetFull(true);
  ASSERT_TRUE(server_->health().AwaitState(ServingState::kStoreFailing, absl::Seconds(60)));
  EXPECT_EQ(GrpcHealth(channel_), HS::NOT_SERVING);
  EXPECT_EQ(Http("/healthz"), std::make_pair(503, std::string("STORE_FAILING\n")));
  EXPECT_TRUE(absl::StrContains(Http("/metrics").second, "\nratelimit_up 0\n"));
  for (int i = 0; i < 200; ++i) {
    absl::StatusOr<v1::RateLimitResponse> r = client_->Consume(MakeRequest("api", "u2"));
    ASSERT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();  // fail closed
  }

  faulty->SetFull(false);
  ASSERT_TRUE(server_->health().AwaitState(ServingState::kServing, absl::Seconds(60)));
  EXPECT_EQ(GrpcHealth(channel_), HS::SERVING);
  EXPECT_EQ(Http("/healthz").first, 200);
  EXPECT_TRUE(absl::StrContains(Http("/metrics").second, "\nratelimit_up 1\n"));
  absl::StatusOr<v1::RateLimitResponse> after = client_->Consume(MakeRequest("api", "u1"));
  ASSERT_OK(after);
  EXPECT_TRUE(after->allowed());
  // u1's first token, taken before the disk filled, is still taken: capacity 2, one left.
  EXPECT_DOUBLE_EQ(after->results(0).value(), 0);
}

// A store that cannot close cleanly (a full disk) is the shutdown's status, which the server
// process exits with (1); a clean close is OK.
TEST_F(StoreHealthServerTest, AStoreThatDoesNotCloseCleanlyIsTheShutdownsStatus) {
  auto faulty = std::make_shared<FaultyFileSystem>();
  auto store = OpenStore(faulty);
  ASSERT_NE(store, nullptr);
  Start(std::move(store));
  ASSERT_OK(client_->Consume(MakeRequest("api", "u1")));
  faulty->SetFull(true);
  ASSERT_TRUE(server_->health().AwaitState(ServingState::kStoreFailing, absl::Seconds(60)));
  client_.reset();
  server_->Shutdown();
  const absl::Status closed = server_->ShutdownStatus();
  EXPECT_EQ(closed.code(), absl::StatusCode::kUnavailable) << closed;
  faulty->SetFull(false);
}

TEST_F(StoreHealthServerTest, AStoreThatClosesCleanlyLeavesTheShutdownOk) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  Start(std::move(store));
  ASSERT_OK(client_->Consume(MakeRequest("api", "u1")));
  client_.reset();
  server_->Shutdown();
  EXPECT_OK(server_->ShutdownStatus());
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
  o.store.gc_interval = absl::Milliseconds(20);
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

}  // namespace
}  // namespace ratelimit
