#include "storage/rocksdb_state_store.h"

#include <algorithm>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "rocksdb/compaction_filter.h"
#include "rocksdb/db.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"
#include "storage/key_hash.h"
#include "storage/state_codec.h"
#include "storage/stripe_locks.h"

namespace ratelimit {
namespace {

constexpr char kStatesFamily[] = "states";
constexpr char kMetaFamily[] = "meta";
constexpr char kFormatVersionKey[] = "format_version";

absl::Status FromRocks(const rocksdb::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  const std::string msg = absl::StrCat("rocksdb ", what, ": ", s.ToString());
  if (s.IsCorruption()) return absl::DataLossError(msg);
  return absl::UnavailableError(msg);
}

absl::Status Closed() { return absl::UnavailableError("state store is closed"); }

// Drops states that have refilled to capacity: a missing state means "full", so they carry no
// information. A state that does not decode is kept, for an operator to look at.
class RefilledStateFilter final : public rocksdb::CompactionFilter {
 public:
  explicit RefilledStateFilter(const Clock& clock) : clock_(clock) {}

  bool Filter(int /*level*/, const rocksdb::Slice& /*key*/, const rocksdb::Slice& value,
              std::string* /*new_value*/, bool* /*value_changed*/) const override {
    const std::optional<State> state = DecodeState(absl::string_view(value.data(), value.size()));
    return state.has_value() && state->full_at_us <= clock_.NowMicros();
  }

  const char* Name() const override { return "ratelimit.RefilledStateFilter"; }

 private:
  const Clock& clock_;
};

}  // namespace

RocksDbStateStore::RocksDbStateStore(const RocksDbStateStoreOptions& options)
    : options_(options),
      gc_filter_(std::make_unique<RefilledStateFilter>(*options.clock)),
      stripes_(std::make_unique<absl::Mutex[]>(std::max<size_t>(1, options.lock_stripes))) {}

absl::StatusOr<std::unique_ptr<RocksDbStateStore>> RocksDbStateStore::Open(
    const RocksDbStateStoreOptions& options) {
  if (options.path.empty()) return absl::InvalidArgumentError("path: must not be empty");
  std::unique_ptr<RocksDbStateStore> store(new RocksDbStateStore(options));
  if (absl::Status s = store->OpenDb(); !s.ok()) return s;
  return store;
}

absl::Status RocksDbStateStore::OpenDb() {
  rocksdb::DBOptions db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.max_background_jobs = 2;
  db_options.avoid_unnecessary_blocking_io = true;
  // Bound the WAL so that a crash replays little and idle column families get flushed.
  db_options.max_total_wal_size = 64 << 20;
  // In-place memtable updates (below) need single-threaded memtable writes; decisions are
  // serialized per key anyway.
  db_options.allow_concurrent_memtable_write = false;

  rocksdb::ColumnFamilyOptions states_options;
  states_options.compaction_filter = gc_filter_.get();
  states_options.level_compaction_dynamic_level_bytes = true;
  states_options.memtable_prefix_bloom_size_ratio = 0.05;
  states_options.memtable_whole_key_filtering = true;
  // A hot key is rewritten in place in the memtable (same-size values) instead of growing the
  // skiplist by one entry per decision. RocksDB does not support this together with
  // DeleteRange, so DeleteAll deletes key by key.
  states_options.inplace_update_support = true;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(options_.block_cache_bytes);
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  table.whole_key_filtering = true;
  table.cache_index_and_filter_blocks = true;
  table.pin_l0_filter_and_index_blocks_in_cache = true;
  states_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  states_options.compression = rocksdb::kNoCompression;
  states_options.bottommost_compression = rocksdb::kNoCompression;

  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
      {kStatesFamily, states_options},
      {kMetaFamily, rocksdb::ColumnFamilyOptions()},
  };
  rocksdb::DB* raw = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::Status s = rocksdb::DB::Open(db_options, options_.path, families, &handles, &raw);
  if (!s.ok()) return FromRocks(s, absl::StrCat("open ", options_.path));

  absl::MutexLock lock(&db_mu_);
  db_.reset(raw);
  handles_ = handles;
  states_ = handles_[1];
  meta_ = handles_[2];

  std::string version;
  s = db_->Get(rocksdb::ReadOptions(), meta_, kFormatVersionKey, &version);
  if (s.IsNotFound()) {
    rocksdb::WriteOptions sync_write;
    sync_write.sync = true;
    s = db_->Put(sync_write, meta_, kFormatVersionKey, std::to_string(kStateFormatVersion));
    if (!s.ok()) return FromRocks(s, "write format version");
    // Flush it at once: an unflushed write in a column family that is never written again
    // would pin the first WAL file forever.
    s = db_->Flush(rocksdb::FlushOptions(), meta_);
    if (!s.ok()) return FromRocks(s, "flush format version");
  } else if (!s.ok()) {
    return FromRocks(s, "read format version");
  } else if (version != std::to_string(kStateFormatVersion)) {
    return absl::FailedPreconditionError(
        absl::StrCat("data directory ", options_.path, " has state format version ", version,
                     "; this build reads version ", kStateFormatVersion));
  }
  return absl::OkStatus();
}

RocksDbStateStore::~RocksDbStateStore() { Close().IgnoreError(); }

absl::Status RocksDbStateStore::Close() {
  absl::MutexLock lock(&db_mu_);
  if (!db_) return absl::OkStatus();
  absl::Status result = FromRocks(db_->FlushWAL(/*sync=*/true), "flush wal");
  rocksdb::FlushOptions flush;
  flush.wait = true;
  if (absl::Status s = FromRocks(db_->Flush(flush, states_), "flush"); result.ok()) result = s;
  for (rocksdb::ColumnFamilyHandle* h : handles_)
    db_->DestroyColumnFamilyHandle(h).PermitUncheckedError();
  handles_.clear();
  if (absl::Status s = FromRocks(db_->Close(), "close"); result.ok()) result = s;
  db_.reset();
  return result;
}

absl::Status RocksDbStateStore::Update(absl::Span<const StateKey> keys, DecideFn decide) {
  const size_t n = keys.size();
  // Stripes to lock, in increasing order and each once, so concurrent multi-key updates cannot
  // deadlock.
  absl::InlinedVector<size_t, 4> stripes;
  absl::InlinedVector<std::string, 4> encoded;
  for (const StateKey& k : keys) {
    stripes.push_back(StableKeyHash(k.name, k.key) % options_.lock_stripes);
    encoded.push_back(EncodeStateKey(k.name, k.key));
  }
  std::sort(stripes.begin(), stripes.end());
  stripes.erase(std::unique(stripes.begin(), stripes.end()), stripes.end());

  absl::ReaderMutexLock db_lock(&db_mu_);
  if (!db_) return Closed();
  StripeLocks locked(stripes_.get(), stripes);
  auto unlock = [&] { locked.Unlock(); };

  absl::InlinedVector<std::optional<State>, 4> current(n);
  absl::InlinedVector<std::optional<State>, 4> writes(n);
  rocksdb::PinnableSlice value;
  for (size_t i = 0; i < n; ++i) {
    value.Reset();
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), states_, encoded[i], &value);
    if (s.IsNotFound()) continue;
    if (!s.ok()) {
      unlock();
      return FromRocks(s, "get");
    }
    current[i] = DecodeState(absl::string_view(value.data(), value.size()));
    if (!current[i]) {
      unlock();
      return absl::DataLossError(
          absl::StrCat("state of ", keys[i].name, " has a malformed encoding"));
    }
  }

  absl::Status status = decide(current, absl::MakeSpan(writes));
  if (status.ok()) {
    rocksdb::WriteBatch batch;
    for (size_t i = 0; i < n; ++i) {
      if (writes[i]) batch.Put(states_, encoded[i], EncodeState(*writes[i]));
    }
    if (batch.Count() > 0) {
      rocksdb::WriteOptions wo;
      wo.sync = options_.sync;
      status = FromRocks(db_->Write(wo, &batch), "write");
    }
  }
  unlock();
  return status;
}

absl::StatusOr<std::optional<State>> RocksDbStateStore::Get(const StateKey& key) {
  absl::ReaderMutexLock db_lock(&db_mu_);
  if (!db_) return Closed();
  rocksdb::PinnableSlice value;
  rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), states_, EncodeStateKey(key.name, key.key), &value);
  if (s.IsNotFound()) return std::optional<State>();
  if (!s.ok()) return FromRocks(s, "get");
  std::optional<State> state = DecodeState(absl::string_view(value.data(), value.size()));
  if (!state) return absl::DataLossError("malformed state encoding");
  return state;
}

absl::Status RocksDbStateStore::Delete(const StateKey& key) {
  absl::ReaderMutexLock db_lock(&db_mu_);
  if (!db_) return Closed();
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync;
  return FromRocks(db_->Delete(wo, states_, EncodeStateKey(key.name, key.key)), "delete");
}

absl::Status RocksDbStateStore::DeleteAll(absl::string_view name) {
  absl::ReaderMutexLock db_lock(&db_mu_);
  if (!db_) return Closed();
  // Key by key, in batches, each batch under its keys' stripe locks (in increasing order), so
  // that a concurrent decision on a key lands either before its reset or after it.
  constexpr size_t kBatch = 256;
  const std::string begin = NameRangeBegin(name), end = NameRangeEnd(name);
  rocksdb::Slice upper(end);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, states_));
  it->Seek(begin);
  while (it->Valid()) {
    std::vector<std::string> keys;
    std::vector<size_t> stripes;
    for (; it->Valid() && keys.size() < kBatch; it->Next()) {
      keys.push_back(it->key().ToString());
      stripes.push_back(StableKeyHash(name, absl::string_view(keys.back()).substr(begin.size())) %
                        options_.lock_stripes);
    }
    std::sort(stripes.begin(), stripes.end());
    stripes.erase(std::unique(stripes.begin(), stripes.end()), stripes.end());
    rocksdb::WriteBatch batch;
    for (const std::string& k : keys) batch.Delete(states_, k);
    rocksdb::WriteOptions wo;
    wo.sync = options_.sync;
    StripeLocks locked(stripes_.get(), stripes);
    rocksdb::Status s = db_->Write(wo, &batch);
    locked.Unlock();
    if (!s.ok()) return FromRocks(s, "delete");
  }
  return FromRocks(it->status(), "iterate");
}

absl::Status RocksDbStateStore::CompactAll() {
  absl::ReaderMutexLock db_lock(&db_mu_);
  if (!db_) return Closed();
  rocksdb::FlushOptions flush;
  flush.wait = true;
  if (absl::Status s = FromRocks(db_->Flush(flush, states_), "flush"); !s.ok()) return s;
  rocksdb::CompactRangeOptions compact;
  compact.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  return FromRocks(db_->CompactRange(compact, states_, nullptr, nullptr), "compact");
}

uint64_t RocksDbStateStore::IntProperty(const std::string& property) {
  absl::ReaderMutexLock db_lock(&db_mu_);
  if (!db_) return 0;
  uint64_t v = 0;
  if (!db_->GetIntProperty(states_, property, &v)) return 0;
  return v;
}

uint64_t RocksDbStateStore::EstimateNumStates() { return IntProperty("rocksdb.estimate-num-keys"); }

uint64_t RocksDbStateStore::LiveSstBytes() { return IntProperty("rocksdb.live-sst-files-size"); }

}  // namespace ratelimit
