#include "storage/rocksdb_state_store.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "rocksdb/compaction_filter.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"
#include "storage/apply.h"
#include "storage/key_hash.h"
#include "storage/mapped_wal_file_system.h"
#include "storage/rocksdb_info_log.h"
#include "storage/rocksdb_recovery.h"
#include "storage/state_codec.h"
#include "storage/stripe_locks.h"
#include "storage/worker_thread.h"
#include "storage/write_coalesce.h"

namespace ratelimit {
namespace {

constexpr char kStatesFamily[] = "states";
constexpr char kMetaFamily[] = "meta";
constexpr char kFormatVersionKey[] = "format_version";
constexpr char kRecordsFamily[] = "records";
constexpr char kSecretPrefix[] = "secret/";
// Operations of a batch decided under one set of stripe locks and queued with one Append: large
// enough to spread the locking and the queueing over many decisions, small enough that other
// callers wait for the stripes only briefly.
constexpr size_t kBatchChunk = 32;

std::string EncodeRecord(int64_t expires_at_us, absl::string_view value) {
  std::string out(8, '\0');
  uint64_t v = static_cast<uint64_t>(expires_at_us);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out.append(value.data(), value.size());
  return out;
}

// The expiry and bytes of a stored record; nullopt when malformed.
std::optional<std::pair<int64_t, absl::string_view>> DecodeRecord(absl::string_view bytes) {
  if (bytes.size() < 8) return std::nullopt;
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  return std::make_pair(static_cast<int64_t>(v), bytes.substr(8));
}

// Drops records whose expiry has passed (they read as absent anyway).
class ExpiredRecordFilter final : public rocksdb::CompactionFilter {
 public:
  explicit ExpiredRecordFilter(const Clock& clock) : clock_(clock) {}

  bool Filter(int /*level*/, const rocksdb::Slice& /*key*/, const rocksdb::Slice& value,
              std::string* /*new_value*/, bool* /*value_changed*/) const override {
    const auto record = DecodeRecord(absl::string_view(value.data(), value.size()));
    return record.has_value() && record->first <= clock_.NowMicros();
  }

  const char* Name() const override { return "ratelimit.ExpiredRecordFilter"; }

 private:
  const Clock& clock_;
};

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
      gc_filter_(std::make_unique<RefilledStateFilter>(*options.clock)),
      record_filter_(std::make_unique<ExpiredRecordFilter>(*options.clock)),
      stripes_(options.lock_stripes),
      cache_(std::make_unique<StateCache>(options.state_cache_bytes, group_.resolved_counter())) {
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

  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
      {kStatesFamily, states_options},
      {kMetaFamily, rocksdb::ColumnFamilyOptions()},
      {kRecordsFamily, records_options},
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
  }
  handles_ = handles;
  states_ = handles_[1];
  meta_ = handles_[2];
  records_ = handles_[3];

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
  } else if (version != std::to_string(kStateFormatVersion)) {
    return absl::FailedPreconditionError(
        absl::StrCat("data directory ", options_.path, " has state format version ", version,
                     "; this build reads version ", kStateFormatVersion));
  }
  return absl::OkStatus();
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

namespace {

// The stripes of `keys` (and of `records`), sorted and distinct, and the keys' stored names.
void StripesAndNames(const StripedMutex& stripes, absl::Span<const StateKey> keys,
                     absl::Span<const RecordSpec> records, absl::InlinedVector<size_t, 4>& out,
                     absl::InlinedVector<std::string, 4>& encoded) {
  for (const StateKey& k : keys) {
    out.push_back(stripes.StripeOf(StableKeyHash(k.name, k.key)));
    encoded.push_back(EncodeStateKey(k.source, k.name, k.key));
  }
  // A record's stripe serializes two operations naming the same record on different states.
  for (const RecordSpec& r : records) out.push_back(stripes.StripeOf(StableKeyHash("", r.key)));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
}

}  // namespace

absl::Status RocksDbStateStore::Update(absl::Span<const StateKey> keys, DecideFn decide) {
  // Stripes to lock, in increasing order and each once, so concurrent multi-key updates cannot
  // deadlock.
  absl::InlinedVector<size_t, 4> stripes;
  absl::InlinedVector<std::string, 4> encoded;
  StripesAndNames(stripes_, keys, {}, stripes, encoded);

  absl::ReaderMutexLock db_lock(&db_mu_);
  if (!db_) return NotOpenLocked();
  if (absl::Status s = WritesAllowed(); !s.ok()) return s;
  absl::StatusOr<Pending> pending;
  {
    StripeLocks locked(stripes_, stripes);
    pending = DecideLocked(keys, encoded, decide);
  }
  // The stripes are free again: later decisions on these keys read the queued states from the
  // cache while this one waits for the WAL.
  if (!pending.ok()) return pending.status();
  return WaitLocked(*pending);
}

std::vector<absl::StatusOr<Outcome>> RocksDbStateStore::ApplyBatch(absl::Span<const Operation> ops,
                                                                   const Clock& clock) {
  std::vector<absl::StatusOr<Outcome>> results;
  results.reserve(ops.size());
  absl::ReaderMutexLock db_lock(&db_mu_);
  absl::Status refused = db_ ? WritesAllowed() : NotOpenLocked();
  if (!refused.ok()) {
    results.assign(ops.size(), refused);
    return results;
  }
  // Decide and queue the operations a chunk at a time, each chunk under the stripes of all its
  // keys, then wait: the chunks queued meanwhile usually go to the WAL in one write.
  results.resize(ops.size());
  std::vector<Pending> pending(ops.size());
  for (size_t first = 0; first < ops.size(); first += kBatchChunk) {
    const size_t n = std::min(kBatchChunk, ops.size() - first);
    DecideChunkLocked(ops.subspan(first, n), clock, absl::MakeSpan(results).subspan(first, n),
                      absl::MakeSpan(pending).subspan(first, n));
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!results[i].ok()) continue;
    if (absl::Status s = WaitLocked(pending[i]); !s.ok()) results[i] = s;
  }
  return results;
}

void RocksDbStateStore::DecideChunkLocked(absl::Span<const Operation> ops, const Clock& clock,
                                          absl::Span<absl::StatusOr<Outcome>> results,
                                          absl::Span<Pending> pending) {
  struct Planned {
    OperationKeys keys;
    absl::InlinedVector<std::string, 4> encoded;
  };
  std::vector<Planned> planned(ops.size());
  absl::InlinedVector<size_t, 4> stripes;
  for (size_t i = 0; i < ops.size(); ++i) {
    planned[i].keys = DistinctKeys(ops[i].limits);
    absl::InlinedVector<size_t, 4> op_stripes;
    StripesAndNames(stripes_, planned[i].keys.keys, {}, op_stripes, planned[i].encoded);
    stripes.insert(stripes.end(), op_stripes.begin(), op_stripes.end());
  }
  std::sort(stripes.begin(), stripes.end());
  stripes.erase(std::unique(stripes.begin(), stripes.end()), stripes.end());

  StripeLocks locked(stripes_, stripes);
  const uint64_t epoch = group_.epoch();
  // One time for the chunk, read under its stripes: its operations happen one after the other
  // with no time between them, after every decision that held these stripes before.
  const int64_t now_us = clock.NowMicros();
  // The newest state the chunk decided for each key it wrote: what a later operation of the
  // chunk reads, and what the chunk queues (one write per key, the last).
  absl::flat_hash_map<absl::string_view, State> latest;
  uint64_t depends_on = 0;  // the newest queued group a state read came from
  for (size_t i = 0; i < ops.size(); ++i) {
    const Planned& p = planned[i];
    const size_t n = p.keys.keys.size();
    absl::InlinedVector<std::optional<State>, 4> current(n);
    absl::InlinedVector<std::optional<State>, 4> writes(n);
    for (size_t k = 0; k < n; ++k) {
      if (auto it = latest.find(p.encoded[k]); it != latest.end()) current[k] = it->second;
    }
    if (absl::Status s =
            ReadStatesLocked(p.keys.keys, p.encoded, epoch, absl::MakeSpan(current), &depends_on);
        !s.ok()) {
      results[i] = s;
      continue;
    }
    results[i] = DecideOperation(ops[i], p.keys, current, now_us, absl::MakeSpan(writes));
    for (size_t k = 0; k < n; ++k) {
      if (writes[k]) latest.insert_or_assign(absl::string_view(p.encoded[k]), *writes[k]);
    }
  }
  std::vector<std::string> keys;
  absl::InlinedVector<std::optional<State>, 4> writes;
  keys.reserve(latest.size());
  writes.reserve(latest.size());
  for (const auto& [key, state] : latest) {
    keys.emplace_back(key);
    writes.emplace_back(state);
  }
  absl::StatusOr<uint64_t> ticket = QueueLocked(epoch, keys, writes, [](rocksdb::WriteBatch&) {});
  // Every decision of the chunk waits for the chunk's group (and what it read): a later one may
  // have read an earlier one's state. Nothing queued: none of the chunk's decisions happened.
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!results[i].ok()) continue;
    if (ticket.ok()) {
      pending[i] = Pending{std::max(*ticket, depends_on), epoch};
    } else {
      results[i] = ticket.status();
    }
  }
}

absl::StatusOr<RocksDbStateStore::Pending> RocksDbStateStore::DecideOperationLocked(
    const Operation& op, const Clock& clock, Outcome& outcome) {
  const OperationKeys keys = DistinctKeys(op.limits);
  absl::InlinedVector<size_t, 4> stripes;
  absl::InlinedVector<std::string, 4> encoded;
  StripesAndNames(stripes_, keys.keys, {}, stripes, encoded);
  auto decide = [&](absl::Span<const std::optional<State>> current,
                    absl::Span<std::optional<State>> writes) -> absl::Status {
    outcome = DecideOperation(op, keys, current, clock.NowMicros(), writes);
    return absl::OkStatus();
  };
  DecideFn decide_fn(decide);
  StripeLocks locked(stripes_, stripes);
  return DecideLocked(keys.keys, encoded, decide_fn);
}

void RocksDbStateStore::ApplyAsync(const Operation& op, const Clock& clock, ApplyDone done) {
  Outcome outcome;
  absl::StatusOr<Pending> queued;
  {
    absl::ReaderMutexLock db_lock(&db_mu_);
    absl::Status refused = db_ ? WritesAllowed() : NotOpenLocked();
    if (!refused.ok()) {
      queued = refused;
    } else {
      queued = DecideOperationLocked(op, clock, outcome);
      if (queued.ok() && DurableLocked(*queued)) queued->ticket = 0;
    }
  }
  if (!queued.ok()) {
    std::move(done)(queued.status());
    return;
  }
  GroupCommit::Done answer = [outcome = std::move(outcome),
                              done = std::move(done)](absl::Status written) mutable {
    if (written.ok()) {
      std::move(done)(std::move(outcome));
    } else {
      std::move(done)(std::move(written));
    }
  };
  // The stripes are free. Under a WritesHereScope this thread writes the pending group itself
  // unless a write is in progress; otherwise the writer thread writes this decision with
  // whatever else is queued meanwhile, then answers.
  if (!StateStore::WritesHereScope::Active()) {
    group_.OnResolved(queued->ticket, std::move(answer));
    return;
  }
  GroupCommit::Completions ready;
  {
    absl::ReaderMutexLock db_lock(&db_mu_);
    group_.OnResolvedWriteHere(
        queued->ticket, std::move(answer),
        [this](rocksdb::WriteBatch& batch) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          // db_mu_ is held (above). Closing fails every queued ticket under db_mu_ held
          // exclusively, so a ticket pending here has a database to be written to.
          return db_ ? WriteGroupLocked(batch) : NotOpenLocked();
        },
        &ready);
  }
  GroupCommit::RunCompletions(ready);  // outside every lock
}

absl::StatusOr<RocksDbStateStore::Pending> RocksDbStateStore::DecideLocked(
    absl::Span<const StateKey> keys, absl::Span<const std::string> encoded, DecideFn& decide) {
  const size_t n = keys.size();
  Pending pending;
  pending.epoch = group_.epoch();
  absl::InlinedVector<std::optional<State>, 4> current(n);
  absl::InlinedVector<std::optional<State>, 4> writes(n);
  if (absl::Status s =
          ReadStatesLocked(keys, encoded, pending.epoch, absl::MakeSpan(current), &pending.ticket);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = decide(current, absl::MakeSpan(writes)); !s.ok()) return s;
  absl::StatusOr<uint64_t> ticket =
      QueueLocked(pending.epoch, encoded, writes, [](rocksdb::WriteBatch&) {});
  if (!ticket.ok()) return ticket.status();
  pending.ticket = std::max(pending.ticket, *ticket);
  return pending;
}

absl::StatusOr<uint64_t> RocksDbStateStore::QueueLocked(
    uint64_t epoch, absl::Span<const std::string> encoded,
    absl::Span<const std::optional<State>> writes,
    absl::FunctionRef<void(rocksdb::WriteBatch&)> fill_more) {
  // Encoded outside the group's lock, which every reactor's decisions share.
  absl::InlinedVector<EncodedState, 4> values(writes.size());
  for (size_t i = 0; i < writes.size(); ++i) {
    if (writes[i]) values[i] = EncodeStateBytes(*writes[i]);
  }
  absl::StatusOr<uint64_t> ticket = group_.Append(epoch, [&](rocksdb::WriteBatch& batch) {
    for (size_t i = 0; i < writes.size(); ++i) {
      if (writes[i]) {
        batch.Put(states_, encoded[i], rocksdb::Slice(values[i].data(), values[i].size()))
            .PermitUncheckedError();
      }
    }
    fill_more(batch);
  });
  if (!ticket.ok() || *ticket == 0) return ticket;
  for (size_t i = 0; i < writes.size(); ++i) {
    if (writes[i]) cache_->Put(encoded[i], StateCache::Entry{writes[i], *ticket}, epoch);
  }
  return ticket;
}

bool RocksDbStateStore::DurableLocked(const Pending& pending) {
  return pending.ticket == 0 ||
         (group_.resolved() >= pending.ticket && group_.epoch() == pending.epoch);
}

absl::Status RocksDbStateStore::WaitLocked(const Pending& pending) {
  // Written already, and no write failed since this decision read its states.
  if (DurableLocked(pending)) return absl::OkStatus();
  return group_.Wait(pending.ticket,
                     [this](rocksdb::WriteBatch& batch) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                       return WriteGroupLocked(batch);  // db_mu_ is held
                     });
}

absl::Status RocksDbStateStore::WriteGroupLocked(rocksdb::WriteBatch& batch) {
  if (options_.before_group_write) options_.before_group_write();
  // Only the last write of a key repeated in the group goes to the WAL (the group is written
  // all or nothing, so the earlier ones are never seen).
  if (const size_t dropped = CoalesceRepeatedKeys(handles_, batch); dropped > 0) {
    coalesced_.fetch_add(dropped, std::memory_order_relaxed);
  }
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync;
  rocksdb::Status s = db_->Write(wo, &batch);
  if (s.ok()) return absl::OkStatus();
  // Nothing of the group was applied: the queued states in the cache are dropped (the group
  // commit's epoch moves on, so none of them is read again) and writes stop.
  cache_->Clear();
  return WriteFailed(FromRocks(s, "write"));
}

absl::Status RocksDbStateStore::ReadStatesLocked(absl::Span<const StateKey> keys,
                                                 absl::Span<const std::string> encoded,
                                                 uint64_t epoch,
                                                 absl::Span<std::optional<State>> current,
                                                 uint64_t* depends_on) {
  const size_t n = keys.size();
  rocksdb::PinnableSlice value;
  for (size_t i = 0; i < n; ++i) {
    if (current[i]) continue;  // the caller's own newer state
    if (std::optional<StateCache::Entry> hit = cache_->Lookup(encoded[i], epoch)) {
      current[i] = std::move(hit->state);
      *depends_on = std::max(*depends_on, hit->ticket);
      continue;
    }
    value.Reset();
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), states_, encoded[i], &value);
    if (!s.ok() && !s.IsNotFound()) return FromRocks(s, "get");
    if (s.ok()) {
      current[i] = DecodeState(absl::string_view(value.data(), value.size()));
      if (!current[i]) {
        return absl::DataLossError(
            absl::StrCat("state of ", keys[i].name, " has a malformed encoding"));
      }
    }
    cache_->Put(encoded[i], StateCache::Entry{current[i], 0}, epoch);
  }
  return absl::OkStatus();
}

absl::Status RocksDbStateStore::UpdateWithRecords(absl::Span<const StateKey> keys,
                                                  absl::Span<const RecordSpec> records,
                                                  const Clock& clock, RecordDecideFn decide) {
  absl::InlinedVector<size_t, 4> stripes;
  absl::InlinedVector<std::string, 4> encoded;
  StripesAndNames(stripes_, keys, records, stripes, encoded);

  absl::ReaderMutexLock db_lock(&db_mu_);
  if (!db_) return NotOpenLocked();
  if (absl::Status s = WritesAllowed(); !s.ok()) return s;
  StripeLocks locked(stripes_, stripes);
  return DecideWithRecordsLocked(keys, encoded, records, clock, decide);
}

absl::Status RocksDbStateStore::DecideWithRecordsLocked(absl::Span<const StateKey> keys,
                                                        absl::Span<const std::string> encoded,
                                                        absl::Span<const RecordSpec> records,
                                                        const Clock& clock,
                                                        RecordDecideFn& decide) {
  const size_t n = keys.size();
  Pending pending;
  pending.epoch = group_.epoch();
  absl::InlinedVector<std::optional<State>, 4> current(n);
  absl::InlinedVector<std::optional<State>, 4> writes(n);
  absl::InlinedVector<std::optional<std::string>, 4> found(records.size());
  absl::InlinedVector<std::optional<std::string>, 4> record_writes(records.size());
  if (absl::Status s =
          ReadStatesLocked(keys, encoded, pending.epoch, absl::MakeSpan(current), &pending.ticket);
      !s.ok()) {
    return s;
  }
  rocksdb::PinnableSlice value;
  const int64_t now = clock.NowMicros();
  for (size_t r = 0; r < records.size(); ++r) {
    value.Reset();
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), records_, records[r].key, &value);
    if (s.IsNotFound()) continue;
    if (!s.ok()) return FromRocks(s, "get record");
    const auto record = DecodeRecord(absl::string_view(value.data(), value.size()));
    if (!record) return absl::DataLossError("idempotency record has a malformed encoding");
    if (record->first > now) found[r] = std::string(record->second);
  }

  absl::Status status =
      decide(current, found, absl::MakeSpan(writes), absl::MakeSpan(record_writes));
  if (!status.ok()) return status;
  absl::InlinedVector<std::string, 4> record_values(records.size());
  for (size_t r = 0; r < records.size(); ++r) {
    if (record_writes[r]) {
      record_values[r] = EncodeRecord(records[r].expires_at_us, *record_writes[r]);
    }
  }
  absl::StatusOr<uint64_t> ticket =
      QueueLocked(pending.epoch, encoded, writes, [&](rocksdb::WriteBatch& batch) {
        for (size_t r = 0; r < records.size(); ++r) {
          if (record_writes[r]) {
            batch.Put(records_, records[r].key, record_values[r]).PermitUncheckedError();
          }
        }
      });
  if (!ticket.ok()) return ticket.status();
  pending.ticket = std::max(pending.ticket, *ticket);
  // Records are read from RocksDB only, so the stripes (the records' too) stay held until the
  // write is in the WAL: a retry naming the same record then finds it.
  return WaitLocked(pending);
}

absl::StatusOr<std::string> RocksDbStateStore::Secret(absl::string_view name,
                                                      absl::FunctionRef<std::string()> generate) {
  absl::MutexLock secret_lock(&secret_mu_);
  absl::ReaderMutexLock db_lock(&db_mu_);
  if (!db_) return NotOpenLocked();
  const std::string key = absl::StrCat(kSecretPrefix, name);
  std::string stored;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), meta_, key, &stored);
  if (s.ok()) return stored;
  if (!s.IsNotFound()) return FromRocks(s, "read secret");
  if (absl::Status w = WritesAllowed(); !w.ok()) return w;
  stored = generate();
  rocksdb::WriteOptions sync_write;
  sync_write.sync = true;
  s = db_->Put(sync_write, meta_, key, stored);
  if (!s.ok()) return WriteFailed(FromRocks(s, "write secret"));
  // Flushed at once, like the format version: the meta family is rarely written again.
  if (s = db_->Flush(rocksdb::FlushOptions(), meta_); !s.ok()) return FromRocks(s, "flush secret");
  return stored;
}

absl::StatusOr<std::optional<State>> RocksDbStateStore::Get(const StateKey& key) {
  absl::ReaderMutexLock db_lock(&db_mu_);
  if (!db_) return NotOpenLocked();
  const std::string encoded = EncodeStateKey(key.source, key.name, key.key);
  // A state queued for the WAL is waited for, then read from RocksDB like any other: RocksDB is
  // the truth (garbage collection may have dropped a refilled state the cache still holds). A
  // read is not cached: without the key's stripe, a decision could queue a newer state meanwhile.
  const uint64_t epoch = group_.epoch();
  if (std::optional<StateCache::Entry> hit = cache_->Lookup(encoded, epoch)) {
    if (absl::Status s = WaitLocked(Pending{hit->ticket, epoch}); !s.ok()) return s;
  }
  rocksdb::PinnableSlice value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), states_, encoded, &value);
  if (s.IsNotFound()) return std::optional<State>();
  if (!s.ok()) return FromRocks(s, "get");
  std::optional<State> state = DecodeState(absl::string_view(value.data(), value.size()));
  if (!state) return absl::DataLossError("malformed state encoding");
  return state;
}

absl::StatusOr<uint64_t> RocksDbStateStore::Delete(const StateKey& key) {
  const size_t stripe = stripes_.StripeOf(StableKeyHash(key.name, key.key));
  const std::string encoded = EncodeStateKey(key.source, key.name, key.key);
  absl::ReaderMutexLock db_lock(&db_mu_);
  if (!db_) return NotOpenLocked();
  if (absl::Status s = WritesAllowed(); !s.ok()) return s;
  Pending pending;
  uint64_t deleted = 0;
  {
    // Through the group like a decision, so that it lands after every decision queued before it
    // and before every later one.
    StripeLocks locked(stripes_, absl::MakeConstSpan(&stripe, 1));
    pending.epoch = group_.epoch();
    // Whether there is a state to delete (a queued one included), for the caller's count.
    std::optional<State> current;
    if (absl::Status s =
            ReadStatesLocked(absl::MakeConstSpan(&key, 1), absl::MakeConstSpan(&encoded, 1),
                             pending.epoch, absl::MakeSpan(&current, 1), &pending.ticket);
        !s.ok()) {
      return s;
    }
    deleted = current.has_value() ? 1 : 0;
    absl::StatusOr<uint64_t> ticket = group_.Append(pending.epoch, [&](rocksdb::WriteBatch& batch) {
      batch.Delete(states_, encoded).PermitUncheckedError();
    });
    if (!ticket.ok()) return ticket.status();
    pending.ticket = *ticket;
    cache_->Put(encoded, StateCache::Entry{std::nullopt, *ticket}, pending.epoch);
  }
  if (absl::Status s = WaitLocked(pending); !s.ok()) return s;
  return deleted;
}

absl::StatusOr<uint64_t> RocksDbStateStore::DeleteAll(LimitSource source, absl::string_view name) {
  absl::ReaderMutexLock db_lock(&db_mu_);
  if (!db_) return NotOpenLocked();
  if (absl::Status s = WritesAllowed(); !s.ok()) return s;
  // Key by key, in batches, each batch under its keys' stripe locks (in increasing order), so
  // that a concurrent decision on a key lands either before its reset or after it. A decision
  // acknowledged before the call is in RocksDB (every decision waits for the WAL), so the
  // iteration sees its key.
  constexpr size_t kBatch = 256;
  const std::string begin = NameRangeBegin(source, name), end = NameRangeEnd(source, name);
  rocksdb::Slice upper(end);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, states_));
  it->Seek(begin);
  uint64_t deleted = 0;
  while (it->Valid()) {
    std::vector<std::string> keys;
    std::vector<size_t> stripes;
    for (; it->Valid() && keys.size() < kBatch; it->Next()) {
      keys.push_back(it->key().ToString());
      stripes.push_back(stripes_.StripeOf(
          StableKeyHash(name, absl::string_view(keys.back()).substr(begin.size()))));
    }
    std::sort(stripes.begin(), stripes.end());
    stripes.erase(std::unique(stripes.begin(), stripes.end()), stripes.end());
    Pending pending;
    {
      StripeLocks locked(stripes_, stripes);
      pending.epoch = group_.epoch();
      for (const std::string& k : keys) {
        // A state a queued write already deleted is not counted again.
        std::optional<StateCache::Entry> hit = cache_->Lookup(k, pending.epoch);
        if (!hit || hit->state) ++deleted;
      }
      absl::StatusOr<uint64_t> ticket =
          group_.Append(pending.epoch, [&](rocksdb::WriteBatch& batch) {
            for (const std::string& k : keys) batch.Delete(states_, k).PermitUncheckedError();
          });
      if (!ticket.ok()) return ticket.status();
      pending.ticket = *ticket;
      for (const std::string& k : keys) {
        cache_->Put(k, StateCache::Entry{std::nullopt, *ticket}, pending.epoch);
      }
    }
    if (absl::Status s = WaitLocked(pending); !s.ok()) return s;
  }
  if (absl::Status s = FromRocks(it->status(), "iterate"); !s.ok()) return s;
  return deleted;
}

absl::Status RocksDbStateStore::CompactAll() { return FlushAndCompact(/*exclusive=*/true); }

absl::Status RocksDbStateStore::CollectGarbage() {
  return FlushAndCompact(/*exclusive=*/false);  // automatic compactions go on meanwhile
}

absl::Status RocksDbStateStore::FlushAndCompact(bool exclusive) {
  absl::ReaderMutexLock db_lock(&db_mu_);
  if (!db_) return NotOpenLocked();
  // A flush switches the memtable, which writes through the WAL writer: after a failed write
  // that writer must not be used again (see Health), so nothing is flushed until the store has
  // recovered.
  if (absl::Status s = WritesAllowed(); !s.ok()) return s;
  // The cache forgets refilled states first, so that no read returns one from the cache once the
  // compaction has dropped it from RocksDB (and again below, for any cached meanwhile).
  cache_->DropRefilled(options_.clock->NowMicros());
  // Idle states may sit in the memtable: flush them so that the compaction sees them.
  rocksdb::FlushOptions flush;
  flush.wait = true;
  if (absl::Status s = FromRocks(db_->Flush(flush, states_), "flush"); !s.ok()) return s;
  rocksdb::CompactRangeOptions compact;
  compact.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  compact.exclusive_manual_compaction = exclusive;
  if (absl::Status s = FromRocks(db_->CompactRange(compact, states_, nullptr, nullptr), "compact");
      !s.ok()) {
    return s;
  }
  cache_->DropRefilled(options_.clock->NowMicros());
  if (absl::Status s = FromRocks(db_->Flush(flush, records_), "flush records"); !s.ok()) return s;
  return FromRocks(db_->CompactRange(compact, records_, nullptr, nullptr), "compact records");
}

std::vector<StateStore::Gauge> RocksDbStateStore::Gauges() {
  auto property = [this](const char* name) {
    return [this, name] { return static_cast<double>(IntProperty(name)); };
  };
  return {
      {"store_live_states",
       "States stored (RocksDB's estimate; refilled states are dropped by compaction).",
       property("rocksdb.estimate-num-keys")},
      {"rocksdb_pending_compaction_bytes",
       "Bytes RocksDB estimates compaction still has to rewrite.",
       property("rocksdb.estimate-pending-compaction-bytes")},
      {"rocksdb_memtable_bytes", "Bytes in the states memtables.",
       property("rocksdb.cur-size-all-mem-tables")},
      {"rocksdb_write_stopped", "1 while RocksDB stops writes (a write stall).",
       property("rocksdb.is-write-stopped")},
      {"rocksdb_delayed_write_rate_bytes",
       "RocksDB's throttled write rate while it slows writes down; 0 when not stalling.",
       property("rocksdb.actual-delayed-write-rate")},
      {"rocksdb_live_sst_bytes", "Bytes of SST files of the states.",
       property("rocksdb.live-sst-files-size")},
      {"state_cache_entries", "States held in the cache of hot states.",
       [this] { return static_cast<double>(cache_->entries()); }},
      {"state_cache_bytes", "Memory charged to the cache of hot states.",
       [this] { return static_cast<double>(cache_->bytes()); }},
  };
}

std::vector<StateStore::MetricFamily> RocksDbStateStore::MetricFamilies() {
  auto counter = [](const char* name, const char* help, std::function<double()> read) {
    return MetricFamily{name, help, "counter", {}, [read = std::move(read)] {
                          return MetricFamily::Samples{{{}, read()}};
                        }};
  };
  return {
      counter("state_cache_hits_total", "State reads answered by the cache of hot states.",
              [this] { return static_cast<double>(cache_->hits()); }),
      counter("state_cache_misses_total", "State reads the cache of hot states sent to RocksDB.",
              [this] { return static_cast<double>(cache_->misses()); }),
      counter("state_cache_evictions_total", "States evicted from the cache of hot states.",
              [this] { return static_cast<double>(cache_->evictions()); }),
      counter("rocksdb_group_writes_total",
              "WAL writes of decision groups (one write carries every decision queued meanwhile).",
              [this] { return static_cast<double>(group_.stats().writes); }),
      counter("rocksdb_group_decisions_total",
              "Decisions and resets queued for a WAL write (at most one write each).",
              [this] { return static_cast<double>(group_.stats().tickets); }),
      counter("rocksdb_info_log_lines_dropped_total",
              "Lines of RocksDB's info log (LOG in the data directory) the disk refused.",
              [this] { return static_cast<double>(info_log_lines_dropped()); }),
      counter("rocksdb_group_coalesced_writes_total",
              "State writes left out of a WAL write because a later decision of the same group "
              "wrote the same key.",
              [this] { return static_cast<double>(coalesced_writes()); }),
  };
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
