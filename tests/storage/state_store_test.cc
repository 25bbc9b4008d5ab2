// The StateStore contract, run against both implementations, plus what only RocksDB promises:
// persistence, the key layout, the format version and garbage collection.
#include <filesystem>
#include <thread>

#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "storage/memory/memory_state_store.h"
#include "storage/rocksdb/rocksdb_state_store.h"
#include "storage/rocksdb/state_codec.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::ValueOrDie;

enum class Impl { kMemory, kRocksDb };

class StateStoreContractTest : public ::testing::TestWithParam<Impl> {
 protected:
  void SetUp() override {
    if (GetParam() == Impl::kMemory) {
      store_ = std::make_unique<MemoryStateStore>();
    } else {
      RocksDbStateStoreOptions o;
      o.path = dir_.path() + "/db";
      o.clock = &clock_;
      auto opened = RocksDbStateStore::Open(o);
      ASSERT_OK(opened);
      store_ = *std::move(opened);
    }
  }

  absl::Status Put(const StateKey& k, State s) {
    return store_->Update({k}, [&](auto, absl::Span<std::optional<State>> w) {
      w[0] = s;
      return absl::OkStatus();
    });
  }

  std::optional<State> GetOrDie(const StateKey& k) {
    auto got = store_->Get(k);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? *got : std::nullopt;
  }

  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<StateStore> store_;
};

TEST_P(StateStoreContractTest, MissingKeyIsNullopt) {
  EXPECT_EQ(GetOrDie({"a", "k"}), std::nullopt);
}

TEST_P(StateStoreContractTest, UpdateSeesCurrentStatesInOrderAndWritesThem) {
  ASSERT_OK(Put({"a", "1"}, State{1, 10, 20}));
  std::vector<std::optional<State>> seen;
  ASSERT_OK(store_->Update(
      {StateKey{"a", "2"}, StateKey{"a", "1"}},
      [&](absl::Span<const std::optional<State>> cur, absl::Span<std::optional<State>> w) {
        seen.assign(cur.begin(), cur.end());
        w[0] = State{2, 11, 21};
        return absl::OkStatus();
      }));
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], std::nullopt);
  EXPECT_EQ(seen[1], (State{1, 10, 20}));
  EXPECT_EQ(GetOrDie({"a", "2"}), (State{2, 11, 21}));
  EXPECT_EQ(GetOrDie({"a", "1"}), (State{1, 10, 20}));  // nullopt write leaves it
}

TEST_P(StateStoreContractTest, FailedDecisionWritesNothing) {
  ASSERT_OK(Put({"a", "1"}, State{1, 10, 20}));
  absl::Status s = store_->Update({StateKey{"a", "1"}, StateKey{"a", "2"}},
                                  [&](auto, absl::Span<std::optional<State>> w) {
                                    w[0] = State{5, 5, 5};
                                    w[1] = State{6, 6, 6};
                                    return absl::AbortedError("no");
                                  });
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(GetOrDie({"a", "1"}), (State{1, 10, 20}));
  EXPECT_EQ(GetOrDie({"a", "2"}), std::nullopt);
}

TEST_P(StateStoreContractTest, DeleteOneKeyCountsWhatItDeleted) {
  ASSERT_OK(Put({"a", "1"}, State{1, 1, 1}));
  ASSERT_OK(Put({"a", "2"}, State{2, 2, 2}));
  EXPECT_EQ(ValueOrDie(store_->Delete({"a", "1"})), 1u);
  EXPECT_EQ(ValueOrDie(store_->Delete({"a", "1"})), 0u);  // already gone
  EXPECT_EQ(ValueOrDie(store_->Delete({"a", "missing"})), 0u);
  EXPECT_EQ(GetOrDie({"a", "1"}), std::nullopt);
  EXPECT_EQ(GetOrDie({"a", "2"}), (State{2, 2, 2}));
}

TEST_P(StateStoreContractTest, DeleteAllRemovesExactlyOneName) {
  // Names that are prefixes of each other, and keys that look like other names.
  for (const char* name : {"a", "ab", "b"}) {
    for (const char* key : {"1", "b1", "\xff\xff", "x"})
      ASSERT_OK(Put({name, key}, State{1, 1, 1}));
  }
  EXPECT_EQ(ValueOrDie(store_->DeleteAll(LimitSource::kDefined, "a")), 4u);
  EXPECT_EQ(ValueOrDie(store_->DeleteAll(LimitSource::kDefined, "a")), 0u);
  for (const char* key : {"1", "b1", "\xff\xff", "x"}) {
    EXPECT_EQ(GetOrDie({"a", key}), std::nullopt) << key;
    EXPECT_NE(GetOrDie({"ab", key}), std::nullopt) << key;
    EXPECT_NE(GetOrDie({"b", key}), std::nullopt) << key;
  }
}

TEST_P(StateStoreContractTest, ConcurrentIncrementsAreSerialized) {
  // 4 threads x 500 read-modify-writes of one key, interleaved with a second key taken in the
  // other order: no lost update and no deadlock.
  auto incr = [&](StateKey first, StateKey second) {
    for (int i = 0; i < 500; ++i) {
      ASSERT_OK(store_->Update({first, second}, [](absl::Span<const std::optional<State>> cur,
                                                   absl::Span<std::optional<State>> w) {
        for (size_t j = 0; j < cur.size(); ++j) {
          w[j] = State{(cur[j] ? cur[j]->value : 0) + 1, 0, 0};
        }
        return absl::OkStatus();
      }));
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back(incr, StateKey{"c", t % 2 ? "x" : "y"}, StateKey{"c", t % 2 ? "y" : "x"});
  }
  for (auto& t : threads) t.join();
  EXPECT_DOUBLE_EQ(GetOrDie({"c", "x"})->value, 2000);
  EXPECT_DOUBLE_EQ(GetOrDie({"c", "y"})->value, 2000);
}

INSTANTIATE_TEST_SUITE_P(Stores, StateStoreContractTest,
                         ::testing::Values(Impl::kMemory, Impl::kRocksDb), [](const auto& info) {
                           return info.param == Impl::kMemory ? "Memory" : "RocksDb";
                         });

// ---- RocksDB only ------------------------------------------------------------------------

class RocksDbStateStoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<RocksDbStateStore> OpenStore() {
    RocksDbStateStoreOptions o;
    o.path = dir_.path() + "/db";
    o.clock = &clock_;
    auto opened = RocksDbStateStore::Open(o);
    EXPECT_TRUE(opened.ok()) << opened.status();
    return opened.ok() ? *std::move(opened) : nullptr;
  }
  TempDir dir_;
  FakeClock clock_;
};

absl::Status PutState(StateStore& s, const StateKey& k, State st) {
  return s.Update({k}, [&](auto, absl::Span<std::optional<State>> w) {
    w[0] = st;
    return absl::OkStatus();
  });
}

TEST_F(RocksDbStateStoreTest, StatesSurviveReopen) {
  {
    auto store = OpenStore();
    ASSERT_OK(PutState(*store, {"a", "k"}, State{3.5, 42, 99}));
    ASSERT_OK(store->Close());
  }
  auto store = OpenStore();
  auto got = store->Get({"a", "k"});
  ASSERT_OK(got);
  EXPECT_EQ(**got, (State{3.5, 42, 99}));
}

TEST_F(RocksDbStateStoreTest, ClosedStoreAnswersUnavailable) {
  auto store = OpenStore();
  ASSERT_OK(store->Close());
  EXPECT_EQ(PutState(*store, {"a", "k"}, State{}).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store->Get({"a", "k"}).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(RocksDbStateStoreTest, RefusesAnotherFormatVersion) {
  { auto store = OpenStore(); }
  {
    // Rewrite the format version as a future build would.
    rocksdb::DBOptions o;
    std::vector<rocksdb::ColumnFamilyDescriptor> cfs = {{rocksdb::kDefaultColumnFamilyName, {}},
                                                        {"states", {}},
                                                        {"meta", {}},
                                                        {"records", {}},
                                                        {"overrides", {}}};
    std::vector<rocksdb::ColumnFamilyHandle*> h;
    rocksdb::DB* db;
    ASSERT_TRUE(rocksdb::DB::Open(o, dir_.path() + "/db", cfs, &h, &db).ok());
    ASSERT_TRUE(db->Put({}, h[2], "format_version", "99").ok());
    for (auto* x : h) db->DestroyColumnFamilyHandle(x);
    delete db;
  }
  RocksDbStateStoreOptions o;
  o.path = dir_.path() + "/db";
  auto opened = RocksDbStateStore::Open(o);
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(opened.status().message().find("99"), absl::string_view::npos);
}

TEST_F(RocksDbStateStoreTest, UnopenablePathIsUnavailable) {
  RocksDbStateStoreOptions o;
  o.path = "/proc/ratelimit-cannot-create-this";
  EXPECT_EQ(RocksDbStateStore::Open(o).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(RocksDbStateStoreTest, CompactionDropsRefilledStatesOnly) {
  auto store = OpenStore();
  const int64_t now = clock_.NowMicros();
  for (int i = 0; i < 1000; ++i) {
    // Even keys are full again at now + 1 s; odd keys only in an hour.
    const int64_t full_at = now + (i % 2 ? 3600 : 1) * 1000000LL;
    ASSERT_OK(PutState(*store, {"gc", std::to_string(i)}, State{0, now, full_at}));
  }
  ASSERT_OK(store->CompactAll());
  EXPECT_NEAR(static_cast<double>(store->EstimateNumStates()), 1000, 50);
  clock_.Advance(2 * 1000000LL);
  ASSERT_OK(store->CompactAll());
  EXPECT_NEAR(static_cast<double>(store->EstimateNumStates()), 500, 50);
  for (int i = 0; i < 10; ++i) {
    auto got = store->Get({"gc", std::to_string(i)});
    ASSERT_OK(got);
    EXPECT_EQ(got->has_value(), i % 2 == 1) << i;
  }
}

TEST(StateCodecTest, RoundTripsAndRejectsMalformed) {
  const State s{-2.25, -5, INT64_MAX};
  EXPECT_EQ(DecodeState(EncodeState(s)), s);
  EXPECT_EQ(EncodeState(s).size(), kEncodedStateBytes);
  EXPECT_EQ(DecodeState("short"), std::nullopt);
}

TEST(StateCodecTest, AFixedWindowsCountedCapacityRoundTripsIn32Bytes) {
  const State s{17.5, 1000, 2000, 50};
  EXPECT_EQ(EncodeState(s).size(), kEncodedCountedStateBytes);
  EXPECT_EQ(DecodeState(EncodeState(s)), s);
  // Only a positive capacity is ever written: anything else is not a state.
  std::string zero = EncodeState(State{1, 2, 3, 1});
  zero.replace(24, 8, std::string(8, '\0'));
  EXPECT_EQ(DecodeState(zero), std::nullopt);
  EXPECT_EQ(DecodeState(EncodeState(s) + "x"), std::nullopt);
}

TEST(StateCodecTest, NameRangeCoversItsKeysAndNothingElse) {
  constexpr LimitSource kD = LimitSource::kDefined;
  const std::string begin = NameRangeBegin(kD, "ab"), end = NameRangeEnd(kD, "ab");
  auto inside = [&](const std::string& k) { return begin <= k && k < end; };
  EXPECT_TRUE(inside(EncodeStateKey(kD, "ab", "")));
  EXPECT_TRUE(inside(EncodeStateKey(kD, "ab", "\xff\xff\xff")));
  EXPECT_FALSE(inside(EncodeStateKey(kD, "a", "b")));
  EXPECT_FALSE(inside(EncodeStateKey(kD, "abc", "")));
  EXPECT_FALSE(inside(EncodeStateKey(kD, "ac", "")));
  EXPECT_FALSE(inside(EncodeStateKey(LimitSource::kInline, "ab", "")));
  EXPECT_FALSE(inside(EncodeStateKey(LimitSource::kEnvoy, "ab", "")));
}

}  // namespace
}  // namespace ratelimit
