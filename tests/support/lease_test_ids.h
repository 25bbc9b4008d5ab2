#ifndef RATELIMIT_TESTS_SUPPORT_LEASE_TEST_IDS_H_
#define RATELIMIT_TESTS_SUPPORT_LEASE_TEST_IDS_H_

// Lease ids that tests name: NamedId("b") is the id whose bytes are "b" and then zeros, so that a
// test's ids read as the names it gives them and order as those names do; IdName gives the name
// back.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"
#include "storage/leases/lease_id.h"

namespace ratelimit {

// REQUIRES: `name` is 1..16 bytes.
inline LeaseId NamedId(absl::string_view name) {
  if (name.empty() || name.size() > LeaseId::kBytes) std::abort();
  uint8_t bytes[LeaseId::kBytes] = {};
  std::memcpy(bytes, name.data(), name.size());
  return LeaseId::FromBytes(bytes);
}

// The name of an id NamedId made: its bytes up to the first zero.
inline std::string IdName(const LeaseId& id) {
  uint8_t bytes[LeaseId::kBytes];
  id.ToBytes(bytes);
  const size_t n = static_cast<size_t>(std::find(bytes, bytes + LeaseId::kBytes, 0) - bytes);
  return std::string(reinterpret_cast<const char*>(bytes), n);
}

}  // namespace ratelimit

#endif  // RATELIMIT_TESTS_SUPPORT_LEASE_TEST_IDS_H_
