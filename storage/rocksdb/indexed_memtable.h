#ifndef RATELIMIT_STORAGE_ROCKSDB_INDEXED_MEMTABLE_H_
#define RATELIMIT_STORAGE_ROCKSDB_INDEXED_MEMTABLE_H_

// A memtable representation for a family with in-place updates (the records family): another
// representation (the hash of skiplists) keeps and orders the entries and serves every read, and
// beside it an index from each user key to its newest entry finds the entry an in-place update
// overwrites without searching.
//
// Why: RocksDB writes a key in place by first seeking the key's newest entry through an iterator
// of the representation (MemTable::Update). In a hash of skiplists that is a search of the key's
// bucket, which holds every record of one concurrency key (a hot key's 60-70), and Debian's RocksDB
// is built with its assertions, which compare the key twice more at every step of the search: 27
// key comparisons, 3,700 instructions a record written, most of what a lease decision on a hot key
// cost the store beyond a Consume's (docs/performance-log.md). Through the index that seek is one
// hash lookup.
//
// What uses the index: GetDynamicPrefixIterator without an arena, which RocksDB calls only to find
// the entry an in-place update writes. Its Seek answers from the index when the target's user key
// has an entry no newer than the target (exactly the entry the inner representation's Seek would
// give: a key's entries are ordered newest first), and otherwise, and for every other move, from an
// iterator of the inner representation. Iterators with an arena (reads, flushes) and Get are the
// inner representation's own.
//
// REQUIRES: the family's comparator orders bytewise (two user keys are one key only when their
// bytes are equal), as every family of the store does.
//
// Thread safety: RocksDB inserts into a memtable from one thread at a time (this family has no
// concurrent memtable writes, which in-place updates exclude) while any thread reads; the index is
// guarded by its own mutex, so a lookup from any thread is safe. MarkReadOnly drops the index: an
// immutable memtable is never updated in place.
//
// Memory: one pointer per entry in a hash set (the set's slots and control bytes), reported in
// ApproximateMemoryUsage so that it counts toward the memtable's size.

#include <memory>

#include "rocksdb/memtablerep.h"

namespace ratelimit {

// A factory of the representation above around the representations `inner` makes.
std::shared_ptr<rocksdb::MemTableRepFactory> NewIndexedMemTableFactory(
    std::shared_ptr<rocksdb::MemTableRepFactory> inner);

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_ROCKSDB_INDEXED_MEMTABLE_H_
