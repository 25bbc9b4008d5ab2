#include "storage/factory/state_store_factory.h"

#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::TempDir;

TEST(StateStoreFactoryTest, OpensRocksDbByDefault) {
  TempDir dir;
  StoreOptions options;
  options.path = dir.File("data");
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
  EXPECT_NE(opened.status().message().find("backend"), absl::string_view::npos);
}

}  // namespace
}  // namespace ratelimit
