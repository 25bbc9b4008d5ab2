#ifndef RATELIMIT_SERVER_V1_RECEIPT_H_
#define RATELIMIT_SERVER_V1_RECEIPT_H_

// Receipts: what an allowed Consume or Reserve took from one limit, signed by the server so that
// Settle can trust it.
//
// Encoding (version 2), all integers little-endian:
//   [version = 2][key id: 8 bytes][source: 1 byte, the LimitSource value][mode: 1 = consume,
//   2 = reserve][count: double][decided_at_us: int64][value_after: double][unique id: 16 bytes]
//   [name length: uint16][name][key length: uint16][key]
//   [has config: 0 or 1] and, when 1: [kind: 0 token bucket, 1 fixed window][rate: double]
//   [period_us: int64][capacity present: 0/1][capacity: double][max_reserved present: 0/1]
//   [max_reserved: double][start present: 0/1][start_us: int64][jitter: double]
//   [HMAC-SHA256 of everything before, 32 bytes]
// The key id is the first 8 bytes of SHA-256 of the signing key: it picks the key that verifies.
// Version 1 (signed by earlier releases, still verified until they expire) lacks value_after.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/v1/hmac_sha256.h"
#include "storage/algebra.h"
#include "storage/limit_config.h"

namespace ratelimit {

// What a receipt names.
struct Receipt {
  LimitSource source = LimitSource::kDefined;
  Mode mode = Mode::kConsume;  // kConsume or kReserve
  std::string name;
  std::string key;
  double count = 0;
  int64_t decided_at_us = 0;
  // The limit's balance right after the take (a settlement's refund is bounded by it, see
  // storage/algebra Settle); unset in a version 1 receipt.
  std::optional<double> value_after;
  std::array<uint8_t, 16> unique_id{};
  // The inline config the take was decided with; unset for a limit of the limits file.
  std::optional<LimitConfig> config;

  friend bool operator==(const Receipt&, const Receipt&) = default;
};

// The keys receipts are signed and verified with: the current one signs and verifies; the
// previous ones only verify (so that rotating the key keeps outstanding receipts valid).
//
// Thread safety: immutable once built; safe to share.
class ReceiptKeys {
 public:
  // An empty key set: Sign and Verify fail with FAILED_PRECONDITION.
  ReceiptKeys() = default;
  // REQUIRES: every key at least kMinKeyBytes.
  ReceiptKeys(std::string current, std::vector<std::string> previous);

  static constexpr size_t kMinKeyBytes = 32;

  // Parses a key file: the first non-empty line is the current key, further non-empty lines are
  // previous keys still accepted; each hex or base64 (standard or URL-safe), at least 32 bytes
  // decoded. Lines starting with '#' are comments. INVALID_ARGUMENT naming the line otherwise.
  static absl::StatusOr<ReceiptKeys> Parse(absl::string_view file);

  bool empty() const { return keys_.empty(); }
  size_t size() const { return keys_.size(); }

  // The signed receipt.
  std::string Sign(const Receipt& receipt) const;

  // The receipt `bytes` name, when they were signed by one of the keys and not altered.
  // INVALID_ARGUMENT naming `field` otherwise (malformed, unknown key, bad signature).
  absl::StatusOr<Receipt> Verify(absl::string_view bytes, absl::string_view field) const;

 private:
  struct Key {
    explicit Key(absl::string_view secret);
    HmacSha256 mac;
    std::array<uint8_t, 8> id{};
  };
  std::vector<Key> keys_;  // current first
};

// A fresh receipt id, unique across threads and restarts: a per-thread prefix drawn from the OS's
// CSPRNG once, then a per-thread counter.
std::array<uint8_t, 16> NewReceiptId();

// 32 random bytes, for a generated key.
std::string NewReceiptKey();

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_V1_RECEIPT_H_
