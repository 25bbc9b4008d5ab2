#include "storage/factory/state_store_factory.h"

#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::TempDir;

TEST(StateStoreFactoryTest, OpensRocksDbByDefault) {
  TempDir dir;
  StoreOptions options;
  options.rocksdb.path = dir.File("data");
  absl::StatusOr<OpenedStateStore> opened = OpenStateStore(options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  ASSERT_NE(opened->store, nullptr);
  EXPECT_EQ(opened->store->backend_name(), "rocksdb");
  EXPECT_FALSE(opened->report.recovery.empty());
  EXPECT_FALSE(opened->report.salvaged);
  const StateKey key{"a", "k"};
  ASSERT_TRUE(opened->store
                  ->Update(absl::MakeConstSpan(&key, 1),
                           [](absl::Span<const std::optional<State>>,
                              absl::Span<std::optional<State>> writes) {
                             writes[0] = State{1.0, 7, int64_t{1} << 62};
                             return absl::OkStatus();
                           })
                  .ok());
  EXPECT_TRUE(opened->store->Close().ok());

  // The same directory again: the state is there.
  opened = OpenStateStore(options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  absl::StatusOr<std::optional<State>> got = opened->store->Get(key);
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->ts_us, 7);
}

TEST(StateStoreFactoryTest, MemoryBackendAndUnknownBackend) {
  StoreOptions options;
  options.backend = "memory";
  absl::StatusOr<OpenedStateStore> opened = OpenStateStore(options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(opened->store->backend_name(), "memory");

  options.backend = "cassandra";
  opened = OpenStateStore(options);
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(opened.status().message(),
            "--store: unknown state store \"cassandra\" (rocksdb, redis or memory)");
}

TEST(StateStoreFactoryTest, EachBackendsRulesAreCheckedBeforeOpening) {
  StoreOptions options;  // rocksdb, without a data directory
  absl::StatusOr<OpenedStateStore> opened = OpenStateStore(options);
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(opened.status().message(), "--data_dir: required by --store=rocksdb");

  options.rocksdb.path = "/nonexistent/never/opened";
  options.redis.address = "127.0.0.1:1";  // another backend's setting
  opened = OpenStateStore(options);
  EXPECT_EQ(opened.status().message(),
            "--redis_address, --redis_password_file and --redis_wait_replicas: require "
            "--store=redis");

  options.backend = "redis";
  options.redis.timeout = absl::Seconds(2);
  options.redis.hold_ttl = absl::Seconds(3);
  opened = OpenStateStore(options);
  EXPECT_EQ(opened.status().message(),
            "--redis_hold_ttl: (3s) must be at least twice --redis_timeout (2s)");
}

}  // namespace
}  // namespace ratelimit
