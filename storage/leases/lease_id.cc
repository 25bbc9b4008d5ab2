#include "storage/leases/lease_id.h"

#include <array>
#include <cstdlib>
#include <cstring>

#include "openssl/rand.h"

namespace ratelimit {

std::string NewLeaseId() {
  // A lease id is what a Release or Extend proves the lease with, so every id is 128 bits of the
  // CSPRNG's output (never a counter). They are drawn 1,024 ids (16 KiB) at a time into a
  // per-thread pool. A CSPRNG call costs 7-12 us on a thread whose caches other work has filled
  // since its last one (its state and the provider's, and a getpid for its fork check), whatever
  // it draws up to 16 KiB: drawn 64 ids at a time, a serving thread spent 0.5 us an acquire on
  // them (docs/performance.md); 1,024 at a time, 0.01-0.1 us. The server never forks, so no two
  // processes share a pool.
  constexpr size_t kIdBytes = kServerLeaseIdBytes;
  constexpr size_t kPooledIds = 1024;
  struct Pool {
    std::array<unsigned char, kPooledIds * kIdBytes> bytes{};
    size_t next = kPooledIds * kIdBytes;  // empty
  };
  thread_local Pool pool;
  if (pool.next == pool.bytes.size()) {
    if (RAND_bytes(pool.bytes.data(), static_cast<int>(pool.bytes.size())) != 1) std::abort();
    pool.next = 0;
  }
  const unsigned char* bytes = pool.bytes.data() + pool.next;
  std::string id;
  ServerLeaseIdOfBytes(bytes, &id);
  // Used once: wiped, so that an id handed out never stays in the pool.
  std::memset(pool.bytes.data() + pool.next, 0, kIdBytes);
  pool.next += kIdBytes;
  return id;
}

}  // namespace ratelimit
