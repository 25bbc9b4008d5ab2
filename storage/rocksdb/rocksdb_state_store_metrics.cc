#include "storage/rocksdb/rocksdb_state_store.h"

// RocksDbStateStore: what it reports for monitoring (RocksDB's properties, the state cache, group
// commit and the info log).

#include "rocksdb/db.h"

namespace ratelimit {

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
      {"lease_cache_entries", "Lease sets of concurrency keys held in the cache of lease sets.",
       [this] { return static_cast<double>(lease_cache_->entries()); }},
      {"lease_cache_bytes", "Memory charged to the cache of lease sets.",
       [this] { return static_cast<double>(lease_cache_->bytes()); }},
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
      counter("lease_cache_hits_total", "Lease set reads answered by the cache of lease sets.",
              [this] { return static_cast<double>(lease_cache_->hits()); }),
      counter("lease_cache_misses_total",
              "Lease set reads the cache of lease sets sent to RocksDB.",
              [this] { return static_cast<double>(lease_cache_->misses()); }),
      counter("rocksdb_group_writes_total",
              "WAL writes of decision groups (one write carries every decision queued meanwhile).",
              [this] { return static_cast<double>(group_.stats().writes); }),
      counter("rocksdb_group_decisions_total",
              "Decisions and resets queued for a WAL write (at most one write each).",
              [this] { return static_cast<double>(group_.stats().tickets); }),
      counter("rocksdb_info_log_lines_dropped_total",
              "Lines of RocksDB's info log (LOG in the data directory) the disk refused.",
              [this] { return static_cast<double>(info_log_lines_dropped()); }),
      counter("rocksdb_lease_record_writes_total",
              "Lease records written by lease decisions: one per lease a decision changed, once "
              "per record in a run of decisions on one key.",
              [this] { return static_cast<double>(lease_record_writes()); }),
      counter("rocksdb_group_coalesced_writes_total",
              "State writes left out of a WAL write because a later decision of the same group "
              "wrote the same key.",
              [this] { return static_cast<double>(coalesced_writes()); }),
  };
}

namespace {

// A RocksDB integer property of `family`; 0 when the database is closed or it is unavailable.
uint64_t IntPropertyOf(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* family,
                       const std::string& property) {
  uint64_t v = 0;
  return db != nullptr && db->GetIntProperty(family, property, &v) ? v : 0;
}

}  // namespace

uint64_t RocksDbStateStore::IntProperty(const std::string& property) {
  absl::ReaderMutexLock db_lock(&db_mu_);
  return IntPropertyOf(db_.get(), states_, property);
}

uint64_t RocksDbStateStore::RecordsIntProperty(const std::string& property) {
  absl::ReaderMutexLock db_lock(&db_mu_);
  return IntPropertyOf(db_.get(), records_, property);
}

uint64_t RocksDbStateStore::EstimateNumStates() { return IntProperty("rocksdb.estimate-num-keys"); }

uint64_t RocksDbStateStore::LiveSstBytes() { return IntProperty("rocksdb.live-sst-files-size"); }

}  // namespace ratelimit
