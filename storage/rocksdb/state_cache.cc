#include "storage/rocksdb/state_cache.h"

namespace ratelimit {

void StateCache::DropRefilled(int64_t now_us) {
  DropWrittenIf([now_us](const Entry& e) { return e.state && e.state->full_at_us <= now_us; });
}

}  // namespace ratelimit
