// A server's index of overrides follows the store's version: a change made through the store
// (by another replica) is seen at the next refresh, and a refresh at the same version loads
// nothing.
#include "server/overrides/override_refresher.h"

#include <atomic>

#include "gtest/gtest.h"
#include "tests/support/rocksdb_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::OpenRocksDbStore;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::TokenBucket;

// Forwards to a store and counts the full loads.
class CountingOverrideStore final : public OverrideStore {
 public:
  explicit CountingOverrideStore(OverrideStore& inner) : inner_(inner) {}
  absl::StatusOr<OverrideAuditEntry> Modify(const OverrideTarget& t, ChangeFn change) override {
    return inner_.Modify(t, change);
  }
  absl::StatusOr<std::optional<Override>> Get(const OverrideTarget& t) override {
    return inner_.Get(t);
  }
  absl::StatusOr<Snapshot> LoadAll() override {
    ++loads;
    return inner_.LoadAll();
  }
  absl::StatusOr<uint64_t> Version() override { return inner_.Version(); }
  absl::StatusOr<std::vector<OverrideAuditEntry>> ListAudit(uint64_t before, absl::string_view name,
                                                            size_t limit) override {
    return inner_.ListAudit(before, name, limit);
  }
  std::atomic<int> loads{0};

 private:
  OverrideStore& inner_;
};

absl::Status SetCapacity(OverrideStore& store, const std::string& key, double capacity) {
  const OverrideTarget target{LimitSource::kDefined, "api", key, false};
  return store
      .Modify(target,
              [&](const std::optional<Override>&) -> absl::StatusOr<OverrideStore::Change> {
                OverrideStore::Change c;
                c.record.target = target;
                c.record.action.capacity = capacity;
                c.audit.action = "set";
                return c;
              })
      .status();
}

double CapacityOf(const OverrideRegistry& registry, const std::string& key) {
  LimitConfig c = TokenBucket(1, 1000000);
  registry.Current()->Adjust("api", key, 0, c);
  return c.EffectiveCapacity();
}

TEST(OverrideRefresherTest, AReplicaSeesAChangeAtItsNextRefreshAndLoadsOnlyOnChange) {
  TempDir dir;
  FakeClock clock;
  auto store = OpenRocksDbStore(dir.path(), clock);
  ASSERT_NE(store, nullptr);
  CountingOverrideStore replica_view(*store->overrides());
  OverrideRegistry registry;
  OverrideRefresher refresher(replica_view, registry, absl::Hours(1));
  ASSERT_OK(refresher.Refresh());
  EXPECT_EQ(replica_view.loads, 1);
  EXPECT_EQ(CapacityOf(registry, "k"), 1);

  // Another server changes the store.
  ASSERT_OK(SetCapacity(*store->overrides(), "k", 50));
  EXPECT_EQ(CapacityOf(registry, "k"), 1) << "not before a refresh";
  ASSERT_OK(refresher.Refresh());
  EXPECT_EQ(CapacityOf(registry, "k"), 50);
  EXPECT_EQ(registry.Current()->version(), 1u);
  EXPECT_EQ(replica_view.loads, 2);

  ASSERT_OK(refresher.Refresh());
  ASSERT_OK(refresher.Refresh());
  EXPECT_EQ(replica_view.loads, 2) << "the version is current: nothing loaded";
}

TEST(OverrideRefresherTest, AFailedRefreshKeepsTheIndexInForce) {
  TempDir dir;
  FakeClock clock;
  auto store = OpenRocksDbStore(dir.path(), clock);
  ASSERT_NE(store, nullptr);
  ASSERT_OK(SetCapacity(*store->overrides(), "k", 50));
  OverrideRegistry registry;
  OverrideRefresher refresher(*store->overrides(), registry, absl::Hours(1));
  ASSERT_OK(refresher.Refresh());
  ASSERT_OK(store->Close());
  EXPECT_EQ(refresher.Refresh().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(CapacityOf(registry, "k"), 50);
}

}  // namespace
}  // namespace ratelimit
