#ifndef RATELIMIT_SERVER_SERVING_ARENA_BLOCKS_H_
#define RATELIMIT_SERVER_SERVING_ARENA_BLOCKS_H_

// Blocks for the protobuf arenas of the calls a server parses (parsed_unary.h), recycled per
// thread. Each call's arena starts with one block of kArenaBlockSize; a block freed on a thread
// goes to that thread's free list (at most kArenaBlocksKept of them) and is the next call's there.
//
// Why not the heap: glibc's per-thread cache keeps blocks of at most 1032 bytes, seven of a size.
// A first block that small left an Acquire's answer (its lease, two timestamps and a result)
// without room, and the arena's second block (2 KiB) was a malloc from the shared bins, each
// preceded by a pass that merges the fast bins (in profiles, 0.1-0.2 us of a lease call). A
// burst's calls also free more first blocks at once than that cache keeps. A 4 KiB block held
// here serves every unary call in one block, with neither.
//
// Thread safety: each thread has its own list; a block may be freed on a thread other than the
// one that took it (it then joins the freeing thread's list).

#include <cstddef>

#include "google/protobuf/arena.h"

namespace ratelimit {

inline constexpr size_t kArenaBlockSize = 4096;
inline constexpr size_t kArenaBlocksKept = 64;  // 256 KiB a thread at most

// A block of `size` bytes: one of this thread's kept blocks when `size` is kArenaBlockSize,
// else (or when none is kept) a new one from the heap.
void* AllocateArenaBlock(size_t size);
// Returns a block AllocateArenaBlock gave: kept by this thread when it is of kArenaBlockSize and
// fewer than kArenaBlocksKept are kept, else freed.
void FreeArenaBlock(void* block, size_t size);

// The number of blocks this thread keeps (for tests).
size_t ArenaBlocksKeptHere();

// Options for the arena of a parsed call: a first block of kArenaBlockSize from this thread's
// list, later ones growing to 64 KiB (a Batch of many entries).
google::protobuf::ArenaOptions RecycledArenaOptions();

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_SERVING_ARENA_BLOCKS_H_
