// The SHA256_* functions are deprecated in OpenSSL 3 in favour of EVP_MD, whose contexts cannot be
// copied without a heap allocation; they remain supported and use the same SHA extensions.
#define OPENSSL_SUPPRESS_DEPRECATED 1

#include "server/v1/hmac_sha256.h"

#include <openssl/crypto.h>

#include <cstdlib>

namespace ratelimit {
namespace {

constexpr size_t kBlockBytes = 64;  // SHA-256 block

// A SHA-256 context that has absorbed `block ^ pad` (one whole block).
SHA256_CTX Absorb(const std::array<uint8_t, kBlockBytes>& block, uint8_t pad) {
  std::array<uint8_t, kBlockBytes> padded;
  for (size_t i = 0; i < kBlockBytes; ++i) padded[i] = block[i] ^ pad;
  SHA256_CTX ctx;
  // These fail only on null arguments; a failed hash must never yield a MAC.
  if (SHA256_Init(&ctx) != 1 || SHA256_Update(&ctx, padded.data(), padded.size()) != 1) {
    std::abort();
  }
  OPENSSL_cleanse(padded.data(), padded.size());
  return ctx;
}

}  // namespace

HmacSha256::HmacSha256(absl::string_view key) {
  // RFC 2104: a key longer than the block is replaced by its hash; a shorter one is zero-padded.
  std::array<uint8_t, kBlockBytes> block{};
  if (key.size() > kBlockBytes) {
    SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), block.data());
  } else if (!key.empty()) {
    std::copy(key.begin(), key.end(), block.begin());
  }
  inner_ = Absorb(block, 0x36);
  outer_ = Absorb(block, 0x5c);
  OPENSSL_cleanse(block.data(), block.size());
}

HmacSha256::~HmacSha256() {
  OPENSSL_cleanse(&inner_, sizeof inner_);
  OPENSSL_cleanse(&outer_, sizeof outer_);
}

HmacSha256::Digest HmacSha256::Mac(absl::string_view message) const {
  Digest inner_digest;
  Digest out;
  SHA256_CTX ctx = inner_;
  if (SHA256_Update(&ctx, message.data(), message.size()) != 1 ||
      SHA256_Final(inner_digest.data(), &ctx) != 1) {
    std::abort();
  }
  ctx = outer_;
  if (SHA256_Update(&ctx, inner_digest.data(), inner_digest.size()) != 1 ||
      SHA256_Final(out.data(), &ctx) != 1) {
    std::abort();
  }
  return out;
}

}  // namespace ratelimit
