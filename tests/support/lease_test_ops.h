#ifndef RATELIMIT_TESTS_SUPPORT_LEASE_TEST_OPS_H_
#define RATELIMIT_TESTS_SUPPORT_LEASE_TEST_OPS_H_

// Lease operations as tests and fuzz targets build them: a concurrency limit of some slots with
// leases of kLeaseTtl, one op on a key of it, and a store's leases in a comparable order.

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "storage/leases/lease.h"
#include "storage/limit_config.h"
#include "tests/support/lease_test_ids.h"
#include "tests/support/test_support.h"

namespace ratelimit::testing {

inline constexpr int64_t kLeaseTtl = 10 * kSecond;

// A concurrency limit of `capacity` slots, leases of kLeaseTtl (at most 100x).
inline LimitConfig SlotsConfig(double capacity) {
  LimitConfig c;
  c.kind = LimitKind::kConcurrency;
  c.capacity = capacity;
  c.lease_ttl_us = kLeaseTtl;
  c.max_lease_ttl_us = 100 * kLeaseTtl;
  return c;
}

// One lease op on key `key` of limit `name` (capacity `capacity`), on the lease named `lease_id`
// (NamedId; "": none).
inline LeaseOp LeaseOpOf(LeaseAction action, double capacity, absl::string_view lease_id = "",
                         std::string name = "jobs", std::string key = "tenant") {
  LeaseOp op;
  op.key = StateKey{std::move(name), std::move(key)};
  op.config = SlotsConfig(capacity);
  op.action = action;
  op.ttl_us = kLeaseTtl;
  if (!lease_id.empty()) op.lease_id = NamedId(lease_id);
  return op;
}

// `leases` sorted by id, for comparing stores (which keep sets in different orders).
inline std::vector<Lease> ById(std::vector<Lease> leases) {
  std::sort(leases.begin(), leases.end(),
            [](const Lease& a, const Lease& b) { return a.id < b.id; });
  return leases;
}

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_SUPPORT_LEASE_TEST_OPS_H_
