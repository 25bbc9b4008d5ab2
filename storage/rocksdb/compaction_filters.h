#ifndef RATELIMIT_STORAGE_ROCKSDB_COMPACTION_FILTERS_H_
#define RATELIMIT_STORAGE_ROCKSDB_COMPACTION_FILTERS_H_

// What RocksDB's compactions may drop from the store because it carries no information any more
// (storage/rocksdb/rocksdb_state_store.h, "Layout"): refilled states (a missing state means
// "full") and expired idempotency records (they read as absent).

#include <memory>

#include "storage/clock.h"

namespace rocksdb {
class CompactionFilter;
}  // namespace rocksdb

namespace ratelimit {

// For the "states" column family: drops a state whose `full_at` is not after `clock`'s time. A
// state that does not decode is kept, for an operator to look at. `clock` must outlive the filter.
std::unique_ptr<rocksdb::CompactionFilter> NewRefilledStateFilter(const Clock& clock);

// For the "records" column family: drops a record whose expiry is not after `clock`'s time.
// `clock` must outlive the filter.
std::unique_ptr<rocksdb::CompactionFilter> NewExpiredRecordFilter(const Clock& clock);

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_ROCKSDB_COMPACTION_FILTERS_H_
