#include "server/serving/arena_blocks.h"

#include <array>
#include <new>

namespace ratelimit {
namespace {

struct KeptBlocks {
  KeptBlocks() = default;
  KeptBlocks(const KeptBlocks&) = delete;
  KeptBlocks& operator=(const KeptBlocks&) = delete;
  ~KeptBlocks() {
    for (size_t i = 0; i < count; ++i) ::operator delete(blocks[i]);
  }
  std::array<void*, kArenaBlocksKept> blocks{};
  size_t count = 0;
};

KeptBlocks& Kept() {
  thread_local KeptBlocks kept;
  return kept;
}

}  // namespace

void* AllocateArenaBlock(size_t size) {
  if (size == kArenaBlockSize) {
    KeptBlocks& kept = Kept();
    if (kept.count > 0) return kept.blocks[--kept.count];
  }
  return ::operator new(size);
}

void FreeArenaBlock(void* block, size_t size) {
  if (size == kArenaBlockSize) {
    KeptBlocks& kept = Kept();
    if (kept.count < kArenaBlocksKept) {
      kept.blocks[kept.count++] = block;
      return;
    }
  }
  ::operator delete(block);
}

size_t ArenaBlocksKeptHere() { return Kept().count; }

google::protobuf::ArenaOptions RecycledArenaOptions() {
  google::protobuf::ArenaOptions o;
  o.start_block_size = kArenaBlockSize;
  o.max_block_size = 64 * 1024;
  o.block_alloc = &AllocateArenaBlock;
  o.block_dealloc = &FreeArenaBlock;
  return o;
}

}  // namespace ratelimit
