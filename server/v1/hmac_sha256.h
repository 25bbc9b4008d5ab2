#ifndef RATELIMIT_SERVER_V1_HMAC_SHA256_H_
#define RATELIMIT_SERVER_V1_HMAC_SHA256_H_

// HMAC-SHA256 (RFC 2104) with the key absorbed once: the SHA-256 states after the key's inner and
// outer pad blocks are kept, and each MAC starts from copies of them. A MAC then costs the
// compressions of the message and of one outer block, nothing else: no allocation, no lookup, no
// re-hashing of the key. OpenSSL's EVP_MAC re-initialisation duplicates both digest contexts on
// the heap per MAC; receipts are signed once per allowed take, so this is on the hot path.

#include <openssl/sha.h>

#include <array>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace ratelimit {

// Thread safety: immutable once built; Mac may be called from any number of threads at once.
class HmacSha256 {
 public:
  static constexpr size_t kBytes = 32;
  using Digest = std::array<uint8_t, kBytes>;

  explicit HmacSha256(absl::string_view key);
  ~HmacSha256();
  HmacSha256(const HmacSha256&) = default;
  HmacSha256& operator=(const HmacSha256&) = default;

  Digest Mac(absl::string_view message) const;

 private:
  SHA256_CTX inner_;  // after SHA-256 of (key ^ ipad)
  SHA256_CTX outer_;  // after SHA-256 of (key ^ opad)
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_V1_HMAC_SHA256_H_
