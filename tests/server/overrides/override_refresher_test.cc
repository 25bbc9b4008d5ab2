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

// Forwards to a store and counts the full loads and the reads of changes; with `tell_changes`
// false it answers that it cannot tell what changed (as a store whose history was trimmed).
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
  absl::StatusOr<std::optional<Changes>> ChangesSince(uint64_t version) override {
    ++change_reads;
    if (!tell_changes) return std::optional<Changes>();
    return inner_.ChangesSince(version);
  }
  absl::StatusOr<std::vector<OverrideAuditEntry>> ListAudit(uint64_t before, absl::string_view name,
                                                            size_t limit) override {
    return inner_.ListAudit(before, name, limit);
  }
  std::atomic<int> loads{0};
  std::atomic<int> change_reads{0};
  std::atomic<bool> tell_changes{true};

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
  EXPECT_EQ(replica_view.loads, 1) << "only the change was read";
  EXPECT_EQ(replica_view.change_reads, 1);

  // Several changes between two refreshes: applied together.
  const std::shared_ptr<const OverrideIndex> before = registry.Current();
  ASSERT_OK(SetCapacity(*store->overrides(), "k", 60));
  ASSERT_OK(SetCapacity(*store->overrides(), "k2", 70));
  ASSERT_OK(refresher.Refresh());
  EXPECT_EQ(CapacityOf(registry, "k"), 60);
  EXPECT_EQ(CapacityOf(registry, "k2"), 70);
  EXPECT_EQ(registry.Current()->version(), 3u);
  EXPECT_EQ(replica_view.loads, 1);
  EXPECT_EQ(refresher.counts().incremental, 2u);
  EXPECT_EQ(refresher.counts().full, 1u);
  LimitConfig c = TokenBucket(1, 1000000);
  before->Adjust("api", "k", 0, c);
  EXPECT_EQ(c.EffectiveCapacity(), 50) << "an index held by a reader is not changed under it";

  ASSERT_OK(refresher.Refresh());
  ASSERT_OK(refresher.Refresh());
  EXPECT_EQ(replica_view.loads, 1) << "the version is current: nothing loaded";
  EXPECT_EQ(replica_view.change_reads, 2);
}

TEST(OverrideRefresherTest, LoadsEverythingWhenTheStoreCannotTellWhatChanged) {
  TempDir dir;
  FakeClock clock;
  auto store = OpenRocksDbStore(dir.path(), clock);
  ASSERT_NE(store, nullptr);
  CountingOverrideStore replica_view(*store->overrides());
  replica_view.tell_changes = false;
  OverrideRegistry registry;
  OverrideRefresher refresher(replica_view, registry, absl::Hours(1));
  ASSERT_OK(refresher.Refresh());
  ASSERT_OK(SetCapacity(*store->overrides(), "k", 50));
  ASSERT_OK(refresher.Refresh());
  EXPECT_EQ(CapacityOf(registry, "k"), 50);
  EXPECT_EQ(registry.Current()->version(), 1u);
  EXPECT_EQ(replica_view.change_reads, 1);
  EXPECT_EQ(replica_view.loads, 2);
  EXPECT_EQ(refresher.counts().full, 2u);
  EXPECT_EQ(refresher.counts().incremental, 0u);
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
