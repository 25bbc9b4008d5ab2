// storage/rocksdb/spare_lease_sets.h: which set objects are kept for reuse, and that a kept one
// comes back with its buffer's room.

#include "storage/rocksdb/spare_lease_sets.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace ratelimit {
namespace {

// An object whose buffer has room for `room` leases and holds none.
std::shared_ptr<LeaseSet> EmptiedSet(size_t room) {
  auto set = std::make_shared<LeaseSet>();
  set->leases.reserve(room);
  return set;
}

TEST(SpareLeaseSetsTest, AnObjectGivenBackComesBackWithItsRoom) {
  SpareLeaseSets spares;
  std::shared_ptr<LeaseSet> set = EmptiedSet(1);
  set->leases.push_back(Lease{});
  set->leases.clear();  // as a release of a key's only lease leaves it
  const LeaseSet* object = set.get();
  const Lease* buffer = set->leases.data();
  spares.GiveBack(std::move(set));
  EXPECT_EQ(spares.kept(), 1u);
  std::shared_ptr<LeaseSet> taken = spares.Take();
  EXPECT_EQ(taken.get(), object);
  EXPECT_TRUE(taken->leases.empty());
  EXPECT_EQ(taken->leases.data(), buffer) << "the buffer is reused, not allocated again";
  EXPECT_EQ(spares.kept(), 0u);
  // With none kept, Take makes a new object.
  std::shared_ptr<LeaseSet> fresh = spares.Take();
  ASSERT_NE(fresh, nullptr);
  EXPECT_NE(fresh.get(), object);
  EXPECT_TRUE(fresh->leases.empty());
}

TEST(SpareLeaseSetsTest, KeepsOnlyUnsharedEmptySmallObjectsUpToItsBound) {
  SpareLeaseSets spares;
  // Held elsewhere too (the cache still refers to it): not kept, so no two keys share it.
  std::shared_ptr<LeaseSet> shared = EmptiedSet(1);
  std::shared_ptr<LeaseSet> other_holder = shared;
  spares.GiveBack(std::move(shared));
  EXPECT_EQ(spares.kept(), 0u);
  EXPECT_EQ(other_holder.use_count(), 1);
  // Holding a lease.
  std::shared_ptr<LeaseSet> holding = EmptiedSet(1);
  holding->leases.push_back(Lease{});
  spares.GiveBack(std::move(holding));
  EXPECT_EQ(spares.kept(), 0u);
  // A large buffer (a key that held many leases) is let go, not hoarded.
  spares.GiveBack(EmptiedSet(SpareLeaseSets::kMaxRoom + 1));
  EXPECT_EQ(spares.kept(), 0u);
  spares.GiveBack(nullptr);
  EXPECT_EQ(spares.kept(), 0u);
  // At most kMaxKept.
  for (size_t i = 0; i < SpareLeaseSets::kMaxKept + 5; ++i) {
    spares.GiveBack(EmptiedSet(SpareLeaseSets::kMaxRoom));
  }
  EXPECT_EQ(spares.kept(), SpareLeaseSets::kMaxKept);
}

}  // namespace
}  // namespace ratelimit
