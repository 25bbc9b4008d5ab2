#include "storage/replica_board.h"

#include <unistd.h>

#include <cstring>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"

namespace ratelimit {

std::string NewReplicaName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') std::strcpy(host, "host");
  std::string name(host);
  // Record and decision fields are separated by spaces and newlines.
  for (char& c : name) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') c = '_';
  }
  absl::BitGen gen;
  return absl::StrCat(name, "-", getpid(), "-",
                      absl::Hex(absl::Uniform<uint64_t>(gen), absl::kZeroPad16));
}

}  // namespace ratelimit
