#include "storage/leases/lease_id.h"

#include <array>
#include <cstdlib>
#include <cstring>
#include <ostream>

#include "openssl/rand.h"

namespace ratelimit {
namespace {

// The value of each lowercase hex digit; 0x10 for every other byte.
constexpr std::array<uint8_t, 256> kHexValue = [] {
  std::array<uint8_t, 256> t{};
  for (auto& v : t) v = 0x10;
  for (int c = '0'; c <= '9'; ++c) t[c] = static_cast<uint8_t>(c - '0');
  for (int c = 'a'; c <= 'f'; ++c) t[c] = static_cast<uint8_t>(c - 'a' + 10);
  return t;
}();

constexpr char kDigitOf[] = "0123456789abcdef";

// The 16 digits at `digits` as a word, most significant first; `any` gathers every digit's value
// (bit 0x10 set: a byte that is not a digit).
uint64_t WordOf(const char* digits, uint8_t& any) {
  uint64_t word = 0;
  for (size_t i = 0; i < 16; ++i) {
    const uint8_t v = kHexValue[static_cast<uint8_t>(digits[i])];
    any |= v;
    word = word << 4 | (v & 0x0f);
  }
  return word;
}

void WriteWord(uint64_t word, char* out) {
  for (int i = 15; i >= 0; --i) {
    out[i] = kDigitOf[word & 0x0f];
    word >>= 4;
  }
}

uint64_t LoadBigEndian(const uint8_t* bytes) {
  uint64_t word = 0;
  for (size_t i = 0; i < 8; ++i) word = word << 8 | bytes[i];
  return word;
}

void StoreBigEndian(uint64_t word, uint8_t* out) {
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<uint8_t>(word & 0xff);
    word >>= 8;
  }
}

}  // namespace

LeaseId LeaseId::New() {
  // Ids are drawn 1,024 (16 KiB) at a time into a per-thread pool. A CSPRNG call costs 7-12 us
  // on a thread whose caches other work has filled since its last one (its state and the
  // provider's, and a getpid for its fork check), whatever it draws up to 16 KiB: drawn 64 ids at
  // a time, a serving thread spent 0.5 us an acquire on them (docs/performance.md); 1,024 at a
  // time, 0.01-0.1 us. The server never forks, so no two processes share a pool.
  constexpr size_t kPooledIds = 1024;
  struct Pool {
    std::array<uint8_t, kPooledIds * kBytes> bytes{};
    size_t next = kPooledIds * kBytes;  // empty
  };
  thread_local Pool pool;
  for (;;) {
    if (pool.next == pool.bytes.size()) {
      if (RAND_bytes(pool.bytes.data(), static_cast<int>(pool.bytes.size())) != 1) std::abort();
      pool.next = 0;
    }
    const LeaseId id = FromBytes(pool.bytes.data() + pool.next);
    // Used once: wiped, so that an id handed out never stays in the pool.
    std::memset(pool.bytes.data() + pool.next, 0, kBytes);
    pool.next += kBytes;
    if (!id.empty()) return id;  // the empty id is no lease's (a chance of 2^-128)
  }
}

std::optional<LeaseId> LeaseId::Parse(absl::string_view digits) {
  if (digits.size() != kDigits) return std::nullopt;
  uint8_t any = 0;
  const LeaseId id = FromWords(WordOf(digits.data(), any), WordOf(digits.data() + 16, any));
  if ((any & 0x10) != 0 || id.empty()) return std::nullopt;
  return id;
}

LeaseId LeaseId::FromBytes(const uint8_t* bytes) {
  return FromWords(LoadBigEndian(bytes), LoadBigEndian(bytes + 8));
}

void LeaseId::ToBytes(uint8_t* out) const {
  StoreBigEndian(high_, out);
  StoreBigEndian(low_, out + 8);
}

void LeaseId::WriteDigits(char* out) const {
  WriteWord(high_, out);
  WriteWord(low_, out + 16);
}

std::string LeaseId::ToString() const {
  if (empty()) return std::string();
  std::string out(kDigits, '\0');
  WriteDigits(out.data());
  return out;
}

std::ostream& operator<<(std::ostream& os, const LeaseId& id) {
  return os << (id.empty() ? std::string("(no lease id)") : id.ToString());
}

}  // namespace ratelimit
