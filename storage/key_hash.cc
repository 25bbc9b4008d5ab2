#include "storage/key_hash.h"

namespace ratelimit {
namespace {

constexpr uint64_t kFnvOffset = 14695981039346656037ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

uint64_t FnvBytes(uint64_t h, absl::string_view bytes) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= kFnvPrime;
  }
  return h;
}

uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t StableKeyHash(absl::string_view name, absl::string_view key) {
  const uint64_t n = name.size();
  const char len[4] = {static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                       static_cast<char>(n >> 8), static_cast<char>(n)};
  uint64_t h = FnvBytes(kFnvOffset, absl::string_view(len, 4));
  h = FnvBytes(h, name);
  h = FnvBytes(h, key);
  return Mix(h);
}

double StableKeyFraction(absl::string_view name, absl::string_view key) {
  // The top 53 bits make an exactly representable double in [0, 1).
  return static_cast<double>(StableKeyHash(name, key) >> 11) * 0x1.0p-53;
}

}  // namespace ratelimit
