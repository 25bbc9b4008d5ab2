// A data directory written with state format 1 (one namespace, no source byte) is upgraded on
// Open: every state moves to the limits file's namespace, the version becomes current, and an
// interrupted upgrade resumes. Format 2 becomes 3 without a rewrite: its 24-byte states read as
// they are, and an older build refuses the directory afterwards.
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "storage/rocksdb/rocksdb_state_store.h"
#include "storage/rocksdb/state_codec.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::TempDir;

// The format-1 key encoding, written out by hand: [name length: uint16 BE][name][key].
std::string V1Key(const std::string& name, const std::string& key) {
  std::string out;
  out.push_back(static_cast<char>((name.size() >> 8) & 0xff));
  out.push_back(static_cast<char>(name.size() & 0xff));
  return out + name + key;
}

// Writes raw (key, state) pairs and a format version into a directory, as an older build did.
void WriteRaw(const std::string& path, const std::vector<std::pair<std::string, State>>& states,
              const std::string& version) {
  rocksdb::DBOptions o;
  o.create_if_missing = true;
  o.create_missing_column_families = true;
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs = {
      {rocksdb::kDefaultColumnFamilyName, {}}, {"states", {}}, {"meta", {}}};
  std::vector<rocksdb::ColumnFamilyHandle*> h;
  rocksdb::DB* db = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(o, path, cfs, &h, &db).ok());
  for (const auto& [key, state] : states) {
    ASSERT_TRUE(db->Put({}, h[1], key, EncodeState(state)).ok());
  }
  ASSERT_TRUE(db->Put({}, h[2], "format_version", version).ok());
  for (auto* x : h) ASSERT_TRUE(db->DestroyColumnFamilyHandle(x).ok());
  ASSERT_TRUE(db->Close().ok());
  delete db;
}

class StateUpgradeTest : public ::testing::Test {
 protected:
  absl::StatusOr<std::unique_ptr<RocksDbStateStore>> Open() {
    RocksDbStateStoreOptions o;
    o.path = path_;
    o.clock = &clock_;
    return RocksDbStateStore::Open(o);
  }

  static std::optional<State> GetOrDie(RocksDbStateStore& store, const StateKey& key) {
    absl::StatusOr<std::optional<State>> s = store.Get(key);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : std::nullopt;
  }

  TempDir dir_;
  std::string path_ = dir_.File("db");
  FakeClock clock_;
};

TEST_F(StateUpgradeTest, MovesEveryV1StateToTheLimitsFileNamespace) {
  const int64_t far = clock_.NowMicros() + 3600LL * 1000000;
  std::vector<std::pair<std::string, State>> states;
  for (int i = 0; i < 2500; ++i) {  // more than one batch
    states.push_back({V1Key("api", "user-" + std::to_string(i)), State{i * 1.0, 7, far}});
  }
  const std::string long_name(256, 'n');  // the longest name: length prefix 0x01 0x00
  states.push_back({V1Key(long_name, "k"), State{-3, 8, far}});
  states.push_back({V1Key("web.user", "u1"), State{2, 9, far}});
  WriteRaw(path_, states, "1");

  {
    auto store = Open();
    ASSERT_OK(store);
    ASSERT_TRUE((*store)->UpgradedStates().has_value());
    EXPECT_EQ(*(*store)->UpgradedStates(), 2502u);
    EXPECT_EQ(GetOrDie(**store, StateKey{"api", "user-1234"}), (State{1234, 7, far}));
    EXPECT_EQ(GetOrDie(**store, StateKey{long_name, "k"}), (State{-3, 8, far}));
    EXPECT_EQ(GetOrDie(**store, StateKey{"web.user", "u1"}), (State{2, 9, far}));
    // Inline and Envoy limits start full: nothing of format 1 reaches their namespaces.
    EXPECT_EQ(GetOrDie(**store, StateKey{"web.user", "u1", LimitSource::kEnvoy}), std::nullopt);
    EXPECT_EQ(GetOrDie(**store, StateKey{"api", "user-1", LimitSource::kInline}), std::nullopt);
    // The moved states are whole ranges again: DeleteAll of one name takes exactly its keys.
    ASSERT_OK((*store)->DeleteAll(LimitSource::kDefined, "api"));
    EXPECT_EQ(GetOrDie(**store, StateKey{"api", "user-0"}), std::nullopt);
    EXPECT_EQ(GetOrDie(**store, StateKey{"web.user", "u1"}), (State{2, 9, far}));
  }
  // Recorded as the current format: the next Open moves nothing.
  auto again = Open();
  ASSERT_OK(again);
  EXPECT_FALSE((*again)->UpgradedStates().has_value());
  EXPECT_EQ(GetOrDie(**again, StateKey{long_name, "k"}), (State{-3, 8, far}));
}

// A crash in the middle of an upgrade leaves format-1 and format-2 keys side by side, with the
// version still 1: the next Open finishes the job without touching what was already moved.
TEST_F(StateUpgradeTest, ResumesAnInterruptedUpgrade) {
  const int64_t far = clock_.NowMicros() + 3600LL * 1000000;
  WriteRaw(path_,
           {{V1Key("api", "a"), State{1, 1, far}},
            {UpgradeV1StateKey(V1Key("api", "b")), State{2, 2, far}},
            {EncodeStateKey(LimitSource::kInline, "api", "c"), State{3, 3, far}}},
           "1");
  auto store = Open();
  ASSERT_OK(store);
  EXPECT_EQ(*(*store)->UpgradedStates(), 1u);
  EXPECT_EQ(GetOrDie(**store, StateKey{"api", "a"}), (State{1, 1, far}));
  EXPECT_EQ(GetOrDie(**store, StateKey{"api", "b"}), (State{2, 2, far}));
  EXPECT_EQ(GetOrDie(**store, StateKey{"api", "c", LimitSource::kInline}), (State{3, 3, far}));
}

TEST_F(StateUpgradeTest, NewDirectoryIsFormat3WithoutUpgrade) {
  auto store = Open();
  ASSERT_OK(store);
  EXPECT_FALSE((*store)->UpgradedStates().has_value());
  EXPECT_EQ(kStateFormatVersion, 3);
}

// The format-version record as the store left it.
std::string StoredVersion(const std::string& path) {
  rocksdb::DBOptions o;
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
  std::vector<std::string> names;
  EXPECT_TRUE(rocksdb::DB::ListColumnFamilies(o, path, &names).ok());
  for (const std::string& n : names) cfs.push_back({n, {}});
  std::vector<rocksdb::ColumnFamilyHandle*> h;
  rocksdb::DB* db = nullptr;
  EXPECT_TRUE(rocksdb::DB::OpenForReadOnly(o, path, cfs, &h, &db).ok());
  std::string version;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == "meta") {
      EXPECT_TRUE(db->Get({}, h[i], "format_version", &version).ok());
    }
  }
  for (auto* x : h) EXPECT_TRUE(db->DestroyColumnFamilyHandle(x).ok());
  delete db;
  return version;
}

TEST_F(StateUpgradeTest, Format2StatesReadAsTheyAreAndTheVersionBecomes3) {
  const int64_t far = clock_.NowMicros() + 3600LL * 1000000;
  WriteRaw(path_, {{EncodeStateKey(LimitSource::kEnvoy, "rc", "a"), State{4, 5, far}}}, "2");
  {
    auto store = Open();
    ASSERT_OK(store);
    EXPECT_FALSE((*store)->UpgradedStates().has_value());
    // A 24-byte state: no counted_against, read as counted against the limit's capacity.
    EXPECT_EQ(GetOrDie(**store, StateKey{"rc", "a", LimitSource::kEnvoy}), (State{4, 5, far}));
  }
  EXPECT_EQ(StoredVersion(path_), "3");
}

TEST_F(StateUpgradeTest, ANewerFormatIsRefused) {
  WriteRaw(path_, {}, "4");
  auto store = Open();
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("format version 4"), std::string::npos) << store.status();
}

}  // namespace
}  // namespace ratelimit
