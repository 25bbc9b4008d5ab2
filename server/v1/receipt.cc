#include "server/v1/receipt.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "storage/byte_codec.h"

namespace ratelimit {
namespace {

constexpr uint8_t kVersion = 2;
// Receipts of the previous encoding (without value_after), still verified.
constexpr uint8_t kVersionWithoutValueAfter = 1;
constexpr size_t kMacBytes = HmacSha256::kBytes;

// Writes the encoding into a buffer sized beforehand (one allocation, no per-field appends).
class Writer {
 public:
  explicit Writer(char* out) : p_(out) {}
  char* end() const { return p_; }
  void Byte(uint8_t b) { *p_++ = static_cast<char>(b); }
  void U64(uint64_t v) {
    StoreFixed64(p_, v);
    p_ += 8;
  }
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void Double(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    U64(bits);
  }
  void Raw(const void* data, size_t n) {
    std::memcpy(p_, data, n);
    p_ += n;
  }
  void String(absl::string_view s) {
    Byte(static_cast<uint8_t>(s.size() & 0xff));
    Byte(static_cast<uint8_t>((s.size() >> 8) & 0xff));
    Raw(s.data(), s.size());
  }

 private:
  char* p_;
};

// Reads the encoding front to back; any read past the end makes ok() false.
class Reader {
 public:
  explicit Reader(absl::string_view in) : in_(in) {}
  bool ok() const { return ok_; }
  bool done() const { return in_.empty(); }
  uint8_t Byte() {
    if (in_.empty()) return Fail();
    const uint8_t b = static_cast<uint8_t>(in_[0]);
    in_.remove_prefix(1);
    return b;
  }
  uint64_t U64() {
    if (in_.size() < 8) return Fail();
    const uint64_t v = LoadFixed64(in_.data());
    in_.remove_prefix(8);
    return v;
  }
  int64_t I64() { return static_cast<int64_t>(U64()); }
  double Double() {
    const uint64_t bits = U64();
    double v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  }
  std::string String() {
    const size_t n = Byte() | (static_cast<size_t>(Byte()) << 8);
    if (!ok_ || in_.size() < n) return Fail(), std::string();
    std::string s(in_.substr(0, n));
    in_.remove_prefix(n);
    return s;
  }
  template <size_t N>
  void Bytes(std::array<uint8_t, N>& out) {
    if (in_.size() < N) return (void)Fail();
    std::memcpy(out.data(), in_.data(), N);
    in_.remove_prefix(N);
  }

 private:
  uint8_t Fail() {
    ok_ = false;
    in_ = absl::string_view();
    return 0;
  }
  absl::string_view in_;
  bool ok_ = true;
};

absl::StatusOr<std::string> DecodeKey(absl::string_view text) {
  std::string bytes;
  const bool hex = text.size() % 2 == 0 && std::all_of(text.begin(), text.end(), [](char c) {
                     return absl::ascii_isxdigit(c);
                   });
  if (hex) {
    bytes = absl::HexStringToBytes(text);
  } else if (!absl::Base64Unescape(text, &bytes) && !absl::WebSafeBase64Unescape(text, &bytes)) {
    return absl::InvalidArgumentError("not hex or base64");
  }
  if (bytes.size() < ReceiptKeys::kMinKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(bytes.size(), " bytes; a key must have at least ", ReceiptKeys::kMinKeyBytes));
  }
  return bytes;
}

}  // namespace

ReceiptKeys::Key::Key(absl::string_view secret) : mac(secret) {
  uint8_t digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(secret.data()), secret.size(), digest);
  std::memcpy(id.data(), digest, id.size());
}

ReceiptKeys::ReceiptKeys(std::string current, std::vector<std::string> previous) {
  keys_.reserve(1 + previous.size());
  keys_.emplace_back(current);
  for (const std::string& p : previous) keys_.emplace_back(p);
  OPENSSL_cleanse(current.data(), current.size());
  for (std::string& p : previous) OPENSSL_cleanse(p.data(), p.size());
}

absl::StatusOr<ReceiptKeys> ReceiptKeys::Parse(absl::string_view file) {
  std::vector<std::string> keys;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(file, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    absl::StatusOr<std::string> key = DecodeKey(line);
    if (!key.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("receipt key file line ", line_number, ": ", key.status().message()));
    }
    keys.push_back(*std::move(key));
  }
  if (keys.empty()) return absl::InvalidArgumentError("receipt key file: no key");
  std::string current = std::move(keys.front());
  keys.erase(keys.begin());
  return ReceiptKeys(std::move(current), std::move(keys));
}

std::string ReceiptKeys::Sign(const Receipt& r) const {
  constexpr size_t kConfigBytes = 1 + 8 + 8 + 1 + 8 + 1 + 8 + 1 + 8 + 8;
  const size_t body = 1 + 8 + 1 + 1 + 8 + 8 + 8 + r.unique_id.size() + 2 + r.name.size() + 2 +
                      r.key.size() + 1 + (r.config ? kConfigBytes : 0);
  std::string out(body + kMacBytes, '\0');
  Writer w(out.data());
  w.Byte(kVersion);
  w.Raw(keys_[0].id.data(), keys_[0].id.size());
  w.Byte(static_cast<uint8_t>(r.source));
  w.Byte(r.mode == Mode::kReserve ? 2 : 1);
  w.Double(r.count);
  w.I64(r.decided_at_us);
  // NaN when unknown: Verify reads it back as unset.
  w.Double(r.value_after.value_or(std::numeric_limits<double>::quiet_NaN()));
  w.Raw(r.unique_id.data(), r.unique_id.size());
  w.String(r.name);
  w.String(r.key);
  w.Byte(r.config ? 1 : 0);
  if (r.config) {
    const LimitConfig& c = *r.config;
    w.Byte(c.kind == LimitKind::kFixedWindow ? 1 : 0);
    w.Double(c.rate);
    w.I64(c.period_us);
    w.Byte(c.capacity ? 1 : 0);
    w.Double(c.capacity.value_or(0));
    w.Byte(c.max_reserved ? 1 : 0);
    w.Double(c.max_reserved.value_or(0));
    w.Byte(c.start_us ? 1 : 0);
    w.I64(c.start_us.value_or(0));
    w.Double(c.jitter);
  }
  const HmacSha256::Digest mac = keys_[0].mac.Mac(absl::string_view(out.data(), body));
  w.Raw(mac.data(), mac.size());
  // The size computed above and the fields written must agree, or the MAC covers the wrong bytes.
  if (w.end() != out.data() + out.size()) std::abort();
  return out;
}

absl::StatusOr<Receipt> ReceiptKeys::Verify(absl::string_view bytes,
                                            absl::string_view field) const {
  auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
  };
  if (bytes.empty()) return invalid("required");
  const uint8_t version = bytes.empty() ? 0 : static_cast<uint8_t>(bytes[0]);
  if (bytes.size() < 1 + 8 + kMacBytes ||
      (version != kVersion && version != kVersionWithoutValueAfter)) {
    return invalid("not a receipt of this service");
  }
  std::array<uint8_t, 8> id{};
  std::memcpy(id.data(), bytes.data() + 1, id.size());
  const Key* key = nullptr;
  for (const Key& k : keys_) {
    if (k.id == id) key = &k;
  }
  if (key == nullptr) return invalid("signed by an unknown key");
  const absl::string_view body = bytes.substr(0, bytes.size() - kMacBytes);
  const HmacSha256::Digest expected = key->mac.Mac(body);
  if (CRYPTO_memcmp(expected.data(), bytes.data() + body.size(), expected.size()) != 0) {
    return invalid("signature does not match (forged or altered)");
  }
  Reader in(body.substr(1 + 8));
  Receipt r;
  const uint8_t source = in.Byte();
  const uint8_t mode = in.Byte();
  r.count = in.Double();
  r.decided_at_us = in.I64();
  if (version == kVersion) {
    const double value_after = in.Double();
    if (std::isfinite(value_after)) r.value_after = value_after;
  }
  in.Bytes(r.unique_id);
  r.name = in.String();
  r.key = in.String();
  const uint8_t has_config = in.Byte();
  if (has_config == 1) {
    LimitConfig c;
    c.kind = in.Byte() == 1 ? LimitKind::kFixedWindow : LimitKind::kTokenBucket;
    c.rate = in.Double();
    c.period_us = in.I64();
    const bool has_capacity = in.Byte() == 1;
    const double capacity = in.Double();
    if (has_capacity) c.capacity = capacity;
    const bool has_max_reserved = in.Byte() == 1;
    const double max_reserved = in.Double();
    if (has_max_reserved) c.max_reserved = max_reserved;
    const bool has_start = in.Byte() == 1;
    const int64_t start = in.I64();
    if (has_start) c.start_us = start;
    c.jitter = in.Double();
    r.config = c;
  }
  // A correctly signed receipt is always well-formed; this guards against a key reused by
  // another encoder.
  if (!in.ok() || !in.done() || (mode != 1 && mode != 2) || has_config > 1 ||
      (source != static_cast<uint8_t>(LimitSource::kDefined) &&
       source != static_cast<uint8_t>(LimitSource::kInline))) {
    return invalid("malformed receipt");
  }
  r.source = static_cast<LimitSource>(source);
  r.mode = mode == 2 ? Mode::kReserve : Mode::kConsume;
  return r;
}

std::array<uint8_t, 16> NewReceiptId() {
  // 8 bytes from the CSPRNG, drawn once per thread, then a per-thread counter: unique without a
  // CSPRNG call per receipt (two threads share a prefix with probability about 2^-64 per pair).
  // Receipt ids need to be unique, not secret: the MAC is what makes a receipt unforgeable.
  struct Stream {
    Stream() {
      if (RAND_bytes(prefix.data(), static_cast<int>(prefix.size())) != 1) std::abort();
    }
    std::array<uint8_t, 8> prefix{};
    uint64_t counter = 0;
  };
  thread_local Stream stream;
  std::array<uint8_t, 16> id{};
  std::memcpy(id.data(), stream.prefix.data(), stream.prefix.size());
  const uint64_t n = ++stream.counter;
  for (int i = 0; i < 8; ++i) id[8 + i] = static_cast<uint8_t>(n >> (8 * i));
  return id;
}

std::string NewReceiptKey() {
  std::string key(32, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(key.data()), static_cast<int>(key.size())) != 1) {
    std::abort();
  }
  return key;
}

}  // namespace ratelimit
