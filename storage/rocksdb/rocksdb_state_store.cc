#include "storage/rocksdb/rocksdb_state_store.h"

// RocksDbStateStore: opening (the data directory, the database and its options, the format
// version and its upgrade) and closing. The decision path is in rocksdb_state_store_decide.cc,
// administration in rocksdb_state_store_admin.cc, metrics in rocksdb_state_store_metrics.cc,
// failure handling and recovery in rocksdb_recovery.cc.

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "rocksdb/compaction_filter.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/memtablerep.h"
#include "rocksdb/slice_transform.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"
#include "storage/rocksdb/compaction_filters.h"
#include "storage/rocksdb/indexed_memtable.h"
#include "storage/rocksdb/lease_record.h"
#include "storage/rocksdb/mapped_wal_file_system.h"
#include "storage/rocksdb/rocksdb_info_log.h"
#include "storage/rocksdb/rocksdb_override_store.h"
#include "storage/rocksdb/rocksdb_recovery.h"
#include "storage/rocksdb/state_codec.h"
#include "storage/worker_thread.h"

namespace ratelimit {
namespace {

constexpr char kStatesFamily[] = "states";
constexpr char kMetaFamily[] = "meta";
constexpr char kFormatVersionKey[] = "format_version";
constexpr char kRecordsFamily[] = "records";
constexpr char kOverridesFamily[] = "overrides";
// Hash buckets of a records memtable (8 bytes each, allocated with it): a bucket holds the
// records of the keys that hash to it.
constexpr size_t kRecordsMemtableBuckets = 1 << 16;
// The most levels of a bucket's skiplist (RocksDB's default is 4: with its branching of 4, a
// search stays logarithmic up to about 256 entries and then walks its top level, a key holding
// 20,000 leases spending 13 us a new record there). A list's searches start at the height it has
// reached, so a bucket of a few records searches as it did.
constexpr int32_t kRecordsSkiplistHeight = 12;

// The WAL files in `dir` with their sizes, e.g. "000012.log (4096 bytes)".
std::vector<std::string> WalFiles(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!absl::EndsWith(name, ".log") || !entry.is_regular_file(ec)) continue;
    out.push_back(absl::StrCat(name, " (", entry.file_size(ec), " bytes)"));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

RocksDbStateStore::RocksDbStateStore(const RocksDbStateStoreOptions& options)
    : options_(options),
      file_system_(options.file_system ? options.file_system : rocksdb::FileSystem::Default()),
      errors_(std::make_shared<RocksDbErrorTracker>()),
      gc_filter_(NewRefilledStateFilter(*options.clock)),
      record_filter_(NewExpiredRecordFilter(*options.clock)),
      stripes_(options.lock_stripes),
      cache_(std::make_unique<StateCache>(options.state_cache_bytes, group_.resolved_counter())),
      lease_cache_(
          std::make_unique<LeaseSetCache>(options.lease_cache_bytes, group_.resolved_counter())) {
  if (options_.map_wal) {
    env_ = rocksdb::NewCompositeEnv(
        std::make_shared<MappedWalFileSystem>(file_system_, options_.wal_map_chunk_bytes));
  } else if (options_.file_system) {
    env_ = rocksdb::NewCompositeEnv(options_.file_system);
  }
}

absl::StatusOr<std::unique_ptr<RocksDbStateStore>> RocksDbStateStore::Open(
    const RocksDbStateStoreOptions& options) {
  if (options.path.empty()) return absl::InvalidArgumentError("path: must not be empty");
  std::unique_ptr<RocksDbStateStore> store(new RocksDbStateStore(options));
  if (absl::Status s = store->PrepareDirectory(); !s.ok()) return s;
  absl::MutexLock lock(&store->db_mu_);
  if (absl::Status s = store->OpenDbLocked(/*after_failure=*/false); !s.ok()) return s;
  store->override_store_ = std::make_unique<RocksDbOverrideStore>(*store);
  absl::MutexLock writer_lock(&store->writer_mu_);
  store->writer_ = std::thread(&RocksDbStateStore::WriterLoop, store.get());
  return store;
}

void RocksDbStateStore::WriterLoop() {
  NameWorkerThread("rl-wal-writer");
  while (group_.AwaitAsyncWork()) {
    {
      absl::ReaderMutexLock lock(&db_mu_);
      // Without a database nothing is queued: CloseLocked wrote or failed every queued decision.
      if (db_) {
        group_.WritePending([this](rocksdb::WriteBatch& batch) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return WriteGroupLocked(batch);  // db_mu_ is held (above)
        });
      }
    }
    group_.RunReady();  // the answers, outside every lock
  }
}

absl::Status RocksDbStateStore::PrepareDirectory() {
  const std::string& dir = options_.path;
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    // Missing: create it (and its parents) private to this user.
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec || ::chmod(dir.c_str(), 0700) != 0) {
      return absl::UnavailableError(absl::StrCat("cannot create data directory ", dir, ": ",
                                                 ec ? ec.message() : std::strerror(errno)));
    }
    return absl::OkStatus();
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("data directory ", dir, " is not a directory"));
  }
  if ((st.st_mode & 077) != 0) {
    open_report_.warnings.push_back(absl::StrFormat(
        "data directory %s has mode %04o: other local users can access the states (keys can be "
        "personal data); chmod 700 it",
        dir, st.st_mode & 07777));
  }
  return absl::OkStatus();
}

absl::Status RocksDbStateStore::OpenDbLocked(bool after_failure) {
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
  // A WAL that does not replay completely fails the open instead of silently dropping
  // acknowledged decisions, unless the operator asked to salvage it.
  // Reopening after a write failure, the WAL may end in the record whose write failed (never
  // acknowledged): only such a torn tail is tolerated.
  db_options.wal_recovery_mode = after_failure
                                     ? rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords
                                     : rocksdb::WALRecoveryMode::kAbsoluteConsistency;
  db_options.listeners.push_back(errors_);
  if (env_) db_options.env = env_.get();
  // RocksDB's own info log asserts when written again after a failed write (a full disk): ours
  // drops the lines the disk refuses instead (rocksdb_info_log.h).
  if (!info_log_) info_log_ = RocksDbInfoLog::Open(file_system_, options_.path);
  db_options.info_log = info_log_;

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
  // Shards of at least 8 MiB: an LRU cache shard cannot hold a block larger than itself, and the
  // default (64 shards: 1 MiB each for 64 MiB) evicts a large SST's full Bloom filter (10 bits
  // per key: 1.2 MiB per million keys) as soon as it is read, so every lookup re-read it.
  int shard_bits = 0;
  while (shard_bits < 6 && (options_.block_cache_bytes >> (shard_bits + 1)) >= (size_t{8} << 20)) {
    ++shard_bits;
  }
  table.block_cache = rocksdb::NewLRUCache(options_.block_cache_bytes, shard_bits);
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  table.whole_key_filtering = true;
  table.cache_index_and_filter_blocks = true;
  table.pin_l0_filter_and_index_blocks_in_cache = true;
  states_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  states_options.compression = rocksdb::kNoCompression;
  states_options.bottommost_compression = rocksdb::kNoCompression;

  rocksdb::ColumnFamilyOptions records_options;
  records_options.compaction_filter = record_filter_.get();
  // A key's lease records are numbered places, reused, that keep their size (lease_record.h), so
  // RocksDB overwrites the one in the memtable instead of adding an entry. Nothing reads a record's
  // value while another decision may write it: a key's lease records are read (on a cache miss)
  // under the key's stripe, and DeleteAllLeases reads only the keys of its scan; in-place updates
  // give no point-in-time view.
  records_options.inplace_update_support = true;
  // An in-place update takes one of these locks, by the record key's hash, against readers of the
  // value (there are none while it writes: see above). RocksDB's default of 10,000 spreads a hot
  // key's records over half a megabyte of locks, so that nearly every decision's write missed the
  // cache on its lock; 64 stay in it.
  records_options.inplace_update_num_locks = 64;
  // The memtable keeps each key's records in a small skiplist found by a hash of the key's prefix,
  // not in a skiplist of every key's, so that a read of one key's records (prefix_same_as_start;
  // the scans across keys set total_order_seek) and a write at many keys search only that key's.
  // Beside it an index of each record's newest entry finds the entry an in-place update
  // overwrites without that search (indexed_memtable.h): a hot key's is some 60-70 records long.
  records_options.prefix_extractor = NewLeaseEntryPrefixExtractor();
  records_options.memtable_factory =
      NewIndexedMemTableFactory(std::shared_ptr<rocksdb::MemTableRepFactory>(
          rocksdb::NewHashSkipListRepFactory(kRecordsMemtableBuckets, kRecordsSkiplistHeight)));

  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
      {kStatesFamily, states_options},
      {kMetaFamily, rocksdb::ColumnFamilyOptions()},
      {kRecordsFamily, records_options},
      {kOverridesFamily, rocksdb::ColumnFamilyOptions()},
  };
  rocksdb::DB* raw = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  const std::vector<std::string> wal_files = WalFiles(options_.path);
  rocksdb::Status s = rocksdb::DB::Open(db_options, options_.path, families, &handles, &raw);
  if (s.IsCorruption() && options_.salvage_wal && !after_failure) {
    open_report_.salvaged = true;
    open_report_.warnings.push_back(absl::StrCat(
        "salvaging ", options_.path, " after ", s.ToString(),
        ": recovered up to the last consistent WAL record; writes after the corruption point "
        "are lost"));
    db_options.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
    s = rocksdb::DB::Open(db_options, options_.path, families, &handles, &raw);
  }
  if (s.IsCorruption()) {
    return absl::DataLossError(absl::StrCat(
        "rocksdb open ", options_.path, ": ", s.ToString(),
        " (refusing to start without acknowledged decisions; salvage_wal opens it anyway, "
        "losing the writes after the corruption point)"));
  }
  if (!s.ok()) return FromRocks(s, absl::StrCat("open ", options_.path));
  if (!after_failure) {
    open_report_.recovery = absl::StrCat(
        options_.salvage_wal ? "salvage mode; " : "",
        "WAL files replayed: ", wal_files.empty() ? "none" : absl::StrJoin(wal_files, ", "),
        "; last sequence number ", raw->GetLatestSequenceNumber());
  }

  db_.reset(raw);
  if (after_failure) {
    // Nothing queued before the failure may be read again: the reopened RocksDB is the truth.
    group_.Invalidate();
    cache_->Clear();
    lease_cache_->Clear();
  }
  handles_ = handles;
  states_ = handles_[1];
  meta_ = handles_[2];
  records_ = handles_[3];
  overrides_ = handles_[4];

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
  } else if (version == "1") {
    if (absl::Status st = UpgradeFromV1Locked(); !st.ok()) return st;
  } else if (version == "2") {
    // Format 3 reads every format-2 state as it is: only the version changes (an older build
    // then refuses the directory instead of misreading a 32-byte state).
    rocksdb::WriteOptions sync_write;
    sync_write.sync = true;
    s = db_->Put(sync_write, meta_, kFormatVersionKey, std::to_string(kStateFormatVersion));
    if (!s.ok()) return FromRocks(s, "write format version");
    s = db_->Flush(rocksdb::FlushOptions(), meta_);
    if (!s.ok()) return FromRocks(s, "flush format version");
  } else if (version != std::to_string(kStateFormatVersion)) {
    return absl::FailedPreconditionError(
        absl::StrCat("data directory ", options_.path, " has state format version ", version,
                     "; this build reads version ", kStateFormatVersion));
  }
  return MigrateLeaseSetsLocked();
}

absl::Status RocksDbStateStore::UpgradeFromV1Locked() {
  // Format 1 kept every state in one namespace, which format 2 gives to the limits file. Move
  // each state to its format-2 key, in batches that delete the old key and write the new one
  // atomically; format-2 keys sort after every format-1 key, so an interrupted upgrade simply
  // resumes on the next Open. The version is recorded once nothing of format 1 is left.
  constexpr size_t kBatch = 1024;
  upgraded_states_ = 0;
  rocksdb::WriteOptions sync_write;
  sync_write.sync = true;
  const rocksdb::Slice upper(kV1KeysEnd.data(), kV1KeysEnd.size());
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, states_));
  it->Seek(rocksdb::Slice(kV1KeysBegin.data(), kV1KeysBegin.size()));
  while (it->Valid()) {
    rocksdb::WriteBatch batch;
    for (; it->Valid() && batch.Count() < 2 * kBatch; it->Next()) {
      const absl::string_view key(it->key().data(), it->key().size());
      batch.Put(states_, UpgradeV1StateKey(key), it->value());
      batch.Delete(states_, it->key());
      ++*upgraded_states_;
    }
    rocksdb::Status s = db_->Write(sync_write, &batch);
    if (!s.ok()) return FromRocks(s, "upgrade states to format 2");
  }
  if (absl::Status st = FromRocks(it->status(), "upgrade states to format 2"); !st.ok()) return st;
  it.reset();
  rocksdb::Status s =
      db_->Put(sync_write, meta_, kFormatVersionKey, std::to_string(kStateFormatVersion));
  if (!s.ok()) return FromRocks(s, "write format version");
  return FromRocks(db_->Flush(rocksdb::FlushOptions(), meta_), "flush format version");
}

RocksDbStateStore::~RocksDbStateStore() { Close().IgnoreError(); }

OverrideStore* RocksDbStateStore::overrides() { return override_store_.get(); }

absl::Status RocksDbStateStore::Close() {
  absl::Status result;
  {
    absl::MutexLock lock(&db_mu_);
    closed_ = true;
    result = CloseLocked();
  }
  group_.Stop();
  absl::MutexLock writer_lock(&writer_mu_);
  if (writer_.joinable()) writer_.join();
  return result;
}

absl::Status RocksDbStateStore::CloseLocked() {
  if (!db_) return absl::OkStatus();
  // Decisions queued by callers that did not wait are written first (or fail with the write);
  // whatever is left, after an earlier failure, fails now, so no caller waits for a database
  // that is gone.
  if (errors_->Get().ok()) {
    group_.WritePending([this](rocksdb::WriteBatch& batch) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return WriteGroupLocked(batch);  // db_mu_ is held exclusively by the caller
    });
  }
  group_.Invalidate();
  absl::Status result;
  if (const absl::Status error = errors_->Get(); error.ok()) {
    result = FromRocks(db_->FlushWAL(/*sync=*/true), "flush wal");
    rocksdb::FlushOptions flush;
    flush.wait = true;
    if (absl::Status s = FromRocks(db_->Flush(flush, states_), "flush"); result.ok()) result = s;
    if (absl::Status s = FromRocks(db_->Flush(flush, records_), "flush records"); result.ok()) {
      result = s;
    }
    if (absl::Status s = FromRocks(db_->Flush(flush, overrides_), "flush overrides"); result.ok()) {
      result = s;
    }
  } else {
    // After a write error the WAL and memtables are left alone (their writer failed): the
    // WAL holds every acknowledged write and is replayed by the next open.
    result = error;
    db_->SetDBOptions({{"avoid_flush_during_shutdown", "true"}}).PermitUncheckedError();
  }
  for (rocksdb::ColumnFamilyHandle* h : handles_)
    db_->DestroyColumnFamilyHandle(h).PermitUncheckedError();
  handles_.clear();
  if (absl::Status s = FromRocks(db_->Close(), "close"); result.ok()) result = s;
  db_.reset();
  return result;
}

}  // namespace ratelimit
