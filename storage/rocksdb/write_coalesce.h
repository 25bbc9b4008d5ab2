#ifndef RATELIMIT_STORAGE_ROCKSDB_WRITE_COALESCE_H_
#define RATELIMIT_STORAGE_ROCKSDB_WRITE_COALESCE_H_

// Coalescing of a group write: when several decisions of one group write the same key (a hot
// key decided many times while the previous group was being written), only the last write of
// the key needs to reach RocksDB. A WriteBatch is one WAL record, applied all or nothing, also
// by recovery after a crash, so the earlier values of the key are never visible to anyone once
// the group is written: dropping them changes no outcome, and saves their WAL bytes and their
// memtable updates.

#include <cstddef>

#include "absl/types/span.h"

namespace rocksdb {
class ColumnFamilyHandle;
class WriteBatch;
}  // namespace rocksdb

namespace ratelimit {

// Rewrites `batch` so that every key of every column family keeps only its last entry, in the
// order of those last entries, and returns how many entries were dropped (0: `batch` was left
// as it was). Only a batch made of Put and Delete entries of `families` is rewritten; any other
// entry (a merge, a range deletion, log data, a family not listed) leaves it unchanged.
size_t CoalesceRepeatedKeys(absl::Span<rocksdb::ColumnFamilyHandle* const> families,
                            rocksdb::WriteBatch& batch);

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_ROCKSDB_WRITE_COALESCE_H_
