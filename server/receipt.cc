#include "server/receipt.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ratelimit {
namespace {

constexpr uint8_t kVersion = 1;
constexpr size_t kMacBytes = 32;

void PutU64(std::string& out, uint64_t v) {
  char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out.append(bytes, sizeof bytes);  // one append, not eight push_backs
}
void PutI64(std::string& out, int64_t v) { PutU64(out, static_cast<uint64_t>(v)); }
void PutDouble(std::string& out, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  PutU64(out, bits);
}
void PutString(std::string& out, absl::string_view s) {
  out.push_back(static_cast<char>(s.size() & 0xff));
  out.push_back(static_cast<char>((s.size() >> 8) & 0xff));
  out.append(s.data(), s.size());
}

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
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(in_[i])) << (8 * i);
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

// HMAC-SHA256 contexts, one per (thread, key), keyed once and re-initialised per MAC: a
// re-initialisation copies the keyed inner state instead of hashing the key again, and nothing is
// fetched, parsed or allocated per MAC (the one-shot HMAC() did all three each time).
class MacContexts {
 public:
  MacContexts() = default;
  MacContexts(const MacContexts&) = delete;
  MacContexts& operator=(const MacContexts&) = delete;
  ~MacContexts() {
    for (Slot& slot : slots_) EVP_MAC_CTX_free(slot.ctx);
  }

  // A context ready for EVP_MAC_update with `key`, or nullptr when OpenSSL fails.
  EVP_MAC_CTX* For(absl::string_view key) {
    for (Slot& slot : slots_) {
      if (slot.ctx != nullptr && slot.key == key) {
        return EVP_MAC_init(slot.ctx, nullptr, 0, nullptr) == 1 ? slot.ctx : nullptr;
      }
    }
    // A key set holds the current key and a few previous ones: a small round-robin cache.
    Slot& slot = slots_[next_++ % slots_.size()];
    EVP_MAC_CTX_free(slot.ctx);
    slot.ctx = nullptr;
    slot.key.clear();
    EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(Hmac());
    if (ctx == nullptr) return nullptr;
    char digest[] = "SHA256";
    const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                                 OSSL_PARAM_END};
    if (EVP_MAC_init(ctx, reinterpret_cast<const unsigned char*>(key.data()), key.size(), params) !=
        1) {
      EVP_MAC_CTX_free(ctx);
      return nullptr;
    }
    slot.ctx = ctx;
    slot.key = std::string(key);
    return ctx;
  }

 private:
  static EVP_MAC* Hmac() {
    static EVP_MAC* const mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
    return mac;
  }
  struct Slot {
    std::string key;
    EVP_MAC_CTX* ctx = nullptr;
  };
  std::array<Slot, 4> slots_;
  size_t next_ = 0;
};

std::array<uint8_t, kMacBytes> Mac(absl::string_view key, absl::string_view data) {
  thread_local MacContexts contexts;
  std::array<uint8_t, kMacBytes> out{};
  size_t len = 0;
  EVP_MAC_CTX* ctx = contexts.For(key);
  // A MAC that cannot be computed must not yield a receipt (nor verify one): as for the CSPRNG
  // below, an OpenSSL that fails here is unusable.
  if (ctx == nullptr ||
      EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(data.data()), data.size()) != 1 ||
      EVP_MAC_final(ctx, out.data(), &len, out.size()) != 1 || len != out.size()) {
    std::abort();
  }
  return out;
}

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

ReceiptKeys::Key ReceiptKeys::MakeKey(std::string secret) {
  Key k;
  uint8_t digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(secret.data()), secret.size(), digest);
  std::memcpy(k.id.data(), digest, k.id.size());
  k.secret = std::move(secret);
  return k;
}

ReceiptKeys::ReceiptKeys(std::string current, std::vector<std::string> previous) {
  current_ = current;
  keys_.push_back(MakeKey(std::move(current)));
  for (std::string& p : previous) keys_.push_back(MakeKey(std::move(p)));
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
  std::string out;
  out.reserve(64 + r.name.size() + r.key.size() + (r.config ? 60 : 0) + kMacBytes);
  out.push_back(static_cast<char>(kVersion));
  out.append(reinterpret_cast<const char*>(keys_[0].id.data()), keys_[0].id.size());
  out.push_back(static_cast<char>(r.source));
  out.push_back(static_cast<char>(r.mode == Mode::kReserve ? 2 : 1));
  PutDouble(out, r.count);
  PutI64(out, r.decided_at_us);
  out.append(reinterpret_cast<const char*>(r.unique_id.data()), r.unique_id.size());
  PutString(out, r.name);
  PutString(out, r.key);
  out.push_back(r.config ? 1 : 0);
  if (r.config) {
    const LimitConfig& c = *r.config;
    out.push_back(c.kind == LimitKind::kFixedWindow ? 1 : 0);
    PutDouble(out, c.rate);
    PutI64(out, c.period_us);
    out.push_back(c.capacity ? 1 : 0);
    PutDouble(out, c.capacity.value_or(0));
    out.push_back(c.max_reserved ? 1 : 0);
    PutDouble(out, c.max_reserved.value_or(0));
    out.push_back(c.start_us ? 1 : 0);
    PutI64(out, c.start_us.value_or(0));
    PutDouble(out, c.jitter);
  }
  const auto mac = Mac(keys_[0].secret, out);
  out.append(reinterpret_cast<const char*>(mac.data()), mac.size());
  return out;
}

absl::StatusOr<Receipt> ReceiptKeys::Verify(absl::string_view bytes,
                                            absl::string_view field) const {
  auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
  };
  if (bytes.empty()) return invalid("required");
  if (bytes.size() < 1 + 8 + kMacBytes || static_cast<uint8_t>(bytes[0]) != kVersion) {
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
  const auto expected = Mac(key->secret, body);
  if (CRYPTO_memcmp(expected.data(), bytes.data() + body.size(), kMacBytes) != 0) {
    return invalid("signature does not match (forged or altered)");
  }
  Reader in(body.substr(1 + 8));
  Receipt r;
  const uint8_t source = in.Byte();
  const uint8_t mode = in.Byte();
  r.count = in.Double();
  r.decided_at_us = in.I64();
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
