#ifndef RATELIMIT_TESTS_STORAGE_OVERRIDE_STORE_CONTRACT_H_
#define RATELIMIT_TESTS_STORAGE_OVERRIDE_STORE_CONTRACT_H_

// What every OverrideStore (storage/overrides/override_store.h) does, as a typed test suite any
// store's test instantiates: set, get, replace, delete as a tombstone, LoadAll at its version, a
// refused change writing nothing, the audit history (newest first, paged, filtered by name,
// trimmed to its newest entries), and the changes since a version (ChangesSince) replaying to
// exactly LoadAll's records and index.
//
// A store's test gives an environment type Env with:
//   void Open();                  // makes an empty store (gtest assertions allowed)
//   OverrideStore& store();       // valid after Open
//   uint64_t audit_bound() const; // how many audit entries the store keeps
// and instantiates the suite:
//   INSTANTIATE_TYPED_TEST_SUITE_P(Backend, OverrideStoreContractTest, Env);

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "storage/overrides/override_codec.h"
#include "storage/overrides/override_index.h"
#include "storage/overrides/override_store.h"
#include "tests/support/test_support.h"

namespace ratelimit::testing {

inline OverrideTarget OverrideTargetOf(absl::string_view name, absl::string_view key,
                                       bool pattern = false) {
  return OverrideTarget{LimitSource::kDefined, std::string(name), std::string(key), pattern};
}

// Sets the override of `t` to capacity `capacity` (as the override service does: the audit
// entry's `before` is the record it replaces, `after` the new one), or with `remove` deletes it
// as a tombstone (NOT_FOUND when there is none).
inline absl::StatusOr<OverrideAuditEntry> ChangeOverride(OverrideStore& store,
                                                         const OverrideTarget& t, double capacity,
                                                         bool remove = false) {
  return store.Modify(
      t, [&](const std::optional<Override>& current) -> absl::StatusOr<OverrideStore::Change> {
        OverrideStore::Change c;
        c.audit.at_us = 1'000;
        c.audit.actor = "tester";
        c.audit.reason = "contract";
        if (remove) {
          if (!current || current->deleted_at_us) return absl::NotFoundError("none");
          c.record = *current;
          c.record.deleted_at_us = 5;
          c.audit.action = "delete";
          c.audit.before = current;
          return c;
        }
        c.record.target = t;
        c.record.action.capacity = capacity;
        c.record.reason = "test";
        c.audit.action = "set";
        if (current && !current->deleted_at_us) c.audit.before = current;
        c.audit.after = c.record;
        return c;
      });
}

// The records of `snapshot` with `changes` applied, by encoded target.
inline std::map<std::string, Override> ApplyChanges(const std::vector<Override>& records,
                                                    const OverrideStore::Changes& changes) {
  std::map<std::string, Override> out;
  for (const Override& o : records) out.emplace(EncodeOverrideKey(o.target), o);
  for (const OverrideStore::ChangedTarget& c : changes.changed) {
    if (c.record) {
      out.insert_or_assign(EncodeOverrideKey(c.target), *c.record);
    } else {
      out.erase(EncodeOverrideKey(c.target));
    }
  }
  return out;
}

inline std::map<std::string, Override> ByTarget(const std::vector<Override>& records) {
  return ApplyChanges(records, {});
}

template <typename Env>
class OverrideStoreContractTest : public ::testing::Test {
 protected:
  void SetUp() override { env_.Open(); }
  OverrideStore& store() { return env_.store(); }

  Env env_;
};
TYPED_TEST_SUITE_P(OverrideStoreContractTest);

TYPED_TEST_P(OverrideStoreContractTest, SetGetReplaceAndTheVersionCounter) {
  OverrideStore& s = this->store();
  EXPECT_EQ(*s.Version(), 0u);
  EXPECT_FALSE(s.Get(OverrideTargetOf("api", "k1"))->has_value());
  absl::StatusOr<OverrideAuditEntry> first = ChangeOverride(s, OverrideTargetOf("api", "k1"), 10);
  ASSERT_OK(first);
  EXPECT_EQ(first->sequence, 1u);
  EXPECT_FALSE(first->before.has_value());
  ASSERT_OK(ChangeOverride(s, OverrideTargetOf("api", "trial-*", true), 20));
  ASSERT_OK(ChangeOverride(s, OverrideTargetOf("web", "k1"), 30));
  EXPECT_EQ(*s.Version(), 3u);

  absl::StatusOr<std::optional<Override>> got = s.Get(OverrideTargetOf("api", "trial-*", true));
  ASSERT_OK(got);
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->action.capacity, 20);
  EXPECT_EQ((*got)->reason, "test");
  EXPECT_FALSE(s.Get(OverrideTargetOf("api", "trial-*"))->has_value())
      << "a key and a pattern of the same bytes are different targets";

  // Replacing keeps one record per target; the change saw the record it replaced.
  absl::StatusOr<OverrideAuditEntry> replaced =
      ChangeOverride(s, OverrideTargetOf("api", "k1"), 11);
  ASSERT_OK(replaced);
  EXPECT_EQ(replaced->sequence, 4u);
  ASSERT_TRUE(replaced->before.has_value());
  EXPECT_EQ(replaced->before->action.capacity, 10);
  EXPECT_EQ((*s.Get(OverrideTargetOf("api", "k1")))->action.capacity, 11);
  EXPECT_EQ(*s.Version(), 4u);
}

TYPED_TEST_P(OverrideStoreContractTest, ADeletionLeavesATombstone) {
  OverrideStore& s = this->store();
  ASSERT_OK(ChangeOverride(s, OverrideTargetOf("web", "k1"), 30));
  absl::StatusOr<OverrideAuditEntry> deleted =
      ChangeOverride(s, OverrideTargetOf("web", "k1"), 0, true);
  ASSERT_OK(deleted);
  EXPECT_EQ(deleted->sequence, 2u);
  EXPECT_EQ(deleted->action, "delete");
  absl::StatusOr<std::optional<Override>> got = s.Get(OverrideTargetOf("web", "k1"));
  ASSERT_OK(got);
  ASSERT_TRUE(got->has_value()) << "a tombstone stays";
  EXPECT_EQ((*got)->deleted_at_us, 5);
  EXPECT_EQ((*got)->action.capacity, 30);
  absl::StatusOr<OverrideStore::Snapshot> all = s.LoadAll();
  ASSERT_OK(all);
  ASSERT_EQ(all->overrides.size(), 1u);
  EXPECT_TRUE(all->overrides[0].deleted_at_us.has_value());
  // Set again: the tombstone is replaced.
  ASSERT_OK(ChangeOverride(s, OverrideTargetOf("web", "k1"), 31));
  EXPECT_FALSE((*s.Get(OverrideTargetOf("web", "k1")))->deleted_at_us.has_value());
  EXPECT_EQ(*s.Version(), 3u);
}

TYPED_TEST_P(OverrideStoreContractTest, ARefusedChangeWritesNothing) {
  OverrideStore& s = this->store();
  ASSERT_OK(ChangeOverride(s, OverrideTargetOf("api", "k1"), 10));
  EXPECT_EQ(ChangeOverride(s, OverrideTargetOf("web", "nope"), 0, true).status().code(),
            absl::StatusCode::kNotFound);
  absl::StatusOr<OverrideAuditEntry> refused =
      s.Modify(OverrideTargetOf("api", "k1"),
               [](const std::optional<Override>&) -> absl::StatusOr<OverrideStore::Change> {
                 return absl::FailedPreconditionError("refused");
               });
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*s.Version(), 1u);
  EXPECT_FALSE(s.Get(OverrideTargetOf("web", "nope"))->has_value());
  EXPECT_EQ((*s.Get(OverrideTargetOf("api", "k1")))->action.capacity, 10);
  EXPECT_EQ(s.ListAudit(0, "", 10)->size(), 1u);
  // The next change takes the next sequence.
  EXPECT_EQ(ChangeOverride(s, OverrideTargetOf("api", "k2"), 1)->sequence, 2u);
}

TYPED_TEST_P(OverrideStoreContractTest, LoadAllIsEveryRecordInTargetOrderAtItsVersion) {
  OverrideStore& s = this->store();
  absl::StatusOr<OverrideStore::Snapshot> empty = s.LoadAll();
  ASSERT_OK(empty);
  EXPECT_EQ(empty->version, 0u);
  EXPECT_TRUE(empty->overrides.empty());
  ASSERT_OK(ChangeOverride(s, OverrideTargetOf("web", "k1"), 30));
  ASSERT_OK(ChangeOverride(s, OverrideTargetOf("api", "trial-*", true), 20));
  ASSERT_OK(ChangeOverride(s, OverrideTargetOf("api", "k1"), 10));
  ASSERT_OK(ChangeOverride(s, OverrideTargetOf("api", "k1"), 11));
  absl::StatusOr<OverrideStore::Snapshot> all = s.LoadAll();
  ASSERT_OK(all);
  EXPECT_EQ(all->version, 4u);
  ASSERT_EQ(all->overrides.size(), 3u);
  // By (source, name, keys before patterns, key).
  EXPECT_EQ(all->overrides[0].target, OverrideTargetOf("api", "k1"));
  EXPECT_EQ(all->overrides[0].action.capacity, 11);
  EXPECT_EQ(all->overrides[1].target, OverrideTargetOf("api", "trial-*", true));
  EXPECT_EQ(all->overrides[2].target, OverrideTargetOf("web", "k1"));
}

TYPED_TEST_P(OverrideStoreContractTest, AuditIsNewestFirstPagedAndFiltered) {
  OverrideStore& s = this->store();
  std::vector<OverrideAuditEntry> written;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<OverrideAuditEntry> e =
        ChangeOverride(s, OverrideTargetOf(i % 2 ? "web" : "api", "k"), i);
    ASSERT_OK(e);
    written.push_back(*e);
  }
  absl::StatusOr<std::vector<OverrideAuditEntry>> page = s.ListAudit(0, "", 2);
  ASSERT_OK(page);
  ASSERT_EQ(page->size(), 2u);
  EXPECT_EQ((*page)[0], written[4]) << "kept as written";
  EXPECT_EQ((*page)[1].sequence, 4u);
  EXPECT_EQ((*page)[1].before->action.capacity, 1) << "before: the override it replaced";
  EXPECT_EQ((*page)[1].actor, "tester");
  // `before` is exclusive.
  page = s.ListAudit(4, "", 10);
  ASSERT_OK(page);
  ASSERT_EQ(page->size(), 3u);
  EXPECT_EQ(page->front().sequence, 3u);
  EXPECT_EQ(page->back().sequence, 1u);
  page = s.ListAudit(0, "web", 10);
  ASSERT_OK(page);
  ASSERT_EQ(page->size(), 2u);
  EXPECT_EQ((*page)[0].sequence, 4u);
  EXPECT_EQ((*page)[0].after->target.name, "web");
  EXPECT_EQ((*page)[1].sequence, 2u);
  page = s.ListAudit(4, "api", 1);
  ASSERT_OK(page);
  ASSERT_EQ(page->size(), 1u);
  EXPECT_EQ((*page)[0].sequence, 3u);
  EXPECT_TRUE(s.ListAudit(0, "nobody", 10)->empty());
  EXPECT_TRUE(s.ListAudit(1, "", 10)->empty());
  EXPECT_TRUE(s.ListAudit(0, "", 0)->empty());
}

TYPED_TEST_P(OverrideStoreContractTest, AuditKeepsTheNewestEntriesOnly) {
  OverrideStore& s = this->store();
  const uint64_t bound = this->env_.audit_bound();
  const uint64_t total = bound + 7;
  for (uint64_t i = 1; i <= total; ++i) {
    // Every tenth change on "web": the filter must page past the others.
    ASSERT_OK(ChangeOverride(s, OverrideTargetOf(i % 10 == 0 ? "web" : "api", "k"),
                             static_cast<double>(i)));
  }
  EXPECT_EQ(*s.Version(), total);
  absl::StatusOr<std::vector<OverrideAuditEntry>> all = s.ListAudit(0, "", total + 100);
  ASSERT_OK(all);
  ASSERT_EQ(all->size(), bound);
  EXPECT_EQ(all->front().sequence, total);
  EXPECT_EQ(all->back().sequence, total - bound + 1);
  for (size_t i = 0; i + 1 < all->size(); ++i) {
    ASSERT_EQ((*all)[i].sequence, (*all)[i + 1].sequence + 1) << "at " << i;
  }
  absl::StatusOr<std::vector<OverrideAuditEntry>> web = s.ListAudit(0, "web", total);
  ASSERT_OK(web);
  ASSERT_FALSE(web->empty());
  for (const OverrideAuditEntry& e : *web) {
    EXPECT_EQ(e.sequence % 10, 0u);
    EXPECT_GT(e.sequence, total - bound);
  }
  EXPECT_EQ(web->size(), total / 10 - (total - bound) / 10);
  // The changes since a version are known while the history reaches back to the next one.
  const uint64_t oldest = total - bound + 1;
  absl::StatusOr<std::optional<OverrideStore::Changes>> known = s.ChangesSince(oldest - 1);
  ASSERT_OK(known);
  ASSERT_TRUE(known->has_value());
  EXPECT_EQ((*known)->version, total);
  ASSERT_EQ((*known)->changed.size(), 2u) << "two targets";
  EXPECT_EQ((*known)->changed.back().sequence, total);
  for (uint64_t v : {oldest - 2, uint64_t{0}}) {
    absl::StatusOr<std::optional<OverrideStore::Changes>> trimmed = s.ChangesSince(v);
    ASSERT_OK(trimmed);
    EXPECT_FALSE(trimmed->has_value()) << "since " << v << ": the history was trimmed";
  }
}

TYPED_TEST_P(OverrideStoreContractTest, ChangesSinceAnyVersionReplayToLoadAll) {
  OverrideStore& s = this->store();
  // The records at each version, from LoadAll.
  std::vector<std::vector<Override>> at = {s.LoadAll()->overrides};
  const OverrideTarget targets[] = {
      OverrideTargetOf("api", "k1"), OverrideTargetOf("api", "k*", true),
      OverrideTargetOf("web", "k1"), OverrideTarget{LimitSource::kEnvoy, "web.user", "u|1", false}};
  // Sets, replacements, deletions and sets after a deletion, of keys and patterns of two limits
  // and two sources.
  const int script[][2] = {{0, 1},  {1, 2}, {0, 3}, {2, 4},  {0, -1}, {3, 5},
                           {1, -1}, {0, 6}, {3, 7}, {2, -1}, {1, 8},  {3, -1}};
  for (const auto& [t, capacity] : script) {
    ASSERT_OK(ChangeOverride(s, targets[t], capacity, capacity < 0));
    absl::StatusOr<OverrideStore::Snapshot> all = s.LoadAll();
    ASSERT_OK(all);
    ASSERT_EQ(all->version, at.size());
    at.push_back(all->overrides);
  }
  const uint64_t last = at.size() - 1;
  for (uint64_t v = 0; v <= last; ++v) {
    absl::StatusOr<std::optional<OverrideStore::Changes>> changes = s.ChangesSince(v);
    ASSERT_OK(changes);
    ASSERT_TRUE(changes->has_value()) << "since " << v;
    const OverrideStore::Changes& c = **changes;
    EXPECT_EQ(c.version, last);
    EXPECT_EQ(ApplyChanges(at[v], c), ByTarget(at[last])) << "since " << v;
    // One per target changed, in the order of their latest change, each at it.
    for (size_t i = 0; i < c.changed.size(); ++i) {
      EXPECT_GT(c.changed[i].sequence, v);
      if (i > 0) {
        EXPECT_GT(c.changed[i].sequence, c.changed[i - 1].sequence);
      }
      for (size_t j = 0; j < i; ++j) EXPECT_NE(c.changed[j].target, c.changed[i].target);
      ASSERT_TRUE(c.changed[i].record.has_value());
      EXPECT_EQ(c.changed[i].record->target, c.changed[i].target);
    }
    // An index at `v` with the changes applied answers as one built at the last version.
    const auto applied = OverrideIndex::Build(at[v], v)->Apply(c.changed, c.version);
    EXPECT_EQ(applied->All(), OverrideIndex::Build(at[last], last)->All()) << "since " << v;
    EXPECT_EQ(applied->version(), last);
  }
  EXPECT_EQ((*s.ChangesSince(last - 1))->changed.size(), 1u);
  EXPECT_EQ((*s.ChangesSince(last - 1))->changed[0].target, targets[3]);
  EXPECT_TRUE((*s.ChangesSince(last))->changed.empty()) << "nothing after the store's version";
  EXPECT_FALSE(s.ChangesSince(last + 1)->has_value()) << "a version ahead of the store's";
}

REGISTER_TYPED_TEST_SUITE_P(OverrideStoreContractTest, SetGetReplaceAndTheVersionCounter,
                            ADeletionLeavesATombstone, ARefusedChangeWritesNothing,
                            LoadAllIsEveryRecordInTargetOrderAtItsVersion,
                            AuditIsNewestFirstPagedAndFiltered, AuditKeepsTheNewestEntriesOnly,
                            ChangesSinceAnyVersionReplayToLoadAll);

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_STORAGE_OVERRIDE_STORE_CONTRACT_H_
