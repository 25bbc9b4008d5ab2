#ifndef RATELIMIT_STORAGE_KEY_HASH_H_
#define RATELIMIT_STORAGE_KEY_HASH_H_

#include <cstdint>
#include "absl/strings/string_view.h"

namespace ratelimit {

// A 64-bit hash of a limit's (name, key) that is stable across processes, builds and machines:
// it picks default fixed-window starts and retry jitter, which must not change when the server
// restarts. (absl::Hash is salted per process and so cannot be used for this.)
// FNV-1a over the length-prefixed name and the key, finished with the splitmix64 mixer.
uint64_t StableKeyHash(absl::string_view name, absl::string_view key);

// The hash mapped to [0, 1).
double StableKeyFraction(absl::string_view name, absl::string_view key);

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_KEY_HASH_H_
