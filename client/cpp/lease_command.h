#ifndef RATELIMIT_CLIENT_CPP_LEASE_COMMAND_H_
#define RATELIMIT_CLIENT_CPP_LEASE_COMMAND_H_

// `ratelimit acquire|release|extend|leases`: the requests the command line makes of a
// concurrency limit (docs/leases.md), and how the answers are printed. Apart from main, so that
// each is tested on its own.

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ratelimit/v1/ratelimit.pb.h"

namespace ratelimit {

// The command line of a lease command (flags not given are empty or 0).
struct LeaseFlags {
  std::string name;
  std::string key;
  double count = 1;  // acquire: slots, sent as given (the server refuses what is not 1..1e9)
  std::string ttl;   // acquire, extend: a duration ("30s"); empty: the limit's lease_ttl
  std::string lease_id;
  std::string request_id;
  std::string holder;
  // An inline concurrency limit (--kind=concurrency, client/cpp/inline_config.h), sent with the
  // request; ListLeases then names source INLINE.
  std::optional<v1::LimitConfig> config;
  bool inline_limits = false;  // leases: --source=inline
  int32_t page_size = 0;       // leases: the most shown (0: the server's 100)
  std::string page_token;      // leases: the page to show, as the previous page printed it
};

// The requests; INVALID_ARGUMENT naming the flag when --ttl does not parse or a required flag
// is missing (the server checks the rest).
absl::StatusOr<v1::AcquireRequest> AcquireOf(const LeaseFlags& flags);
absl::StatusOr<v1::ReleaseRequest> ReleaseOf(const LeaseFlags& flags);
absl::StatusOr<v1::ExtendRequest> ExtendOf(const LeaseFlags& flags);
v1::ListLeasesRequest ListLeasesOf(const LeaseFlags& flags);

// One line per lease: "lease 0123... jobs/t1: 2 slots until 2026-11-28T12:00:30Z (worker-3)".
std::string FormatLease(const v1::Lease& lease);
// "acquired lease ..." or "refused: NO_FREE_SLOTS, a slot frees in 4.2s (held 10 of 10)".
std::string FormatAcquire(const v1::AcquireResponse& response, absl::Time now);
// "released" / "extended lease ..." / "not held (expired, released or reset)".
std::string FormatRelease(const v1::ReleaseResponse& response);
std::string FormatExtend(const v1::ExtendResponse& response);
// "jobs/t1: 3 of 10 slots held", a line per lease of the page, and "next page: --page_token=T"
// when more follow.
std::string FormatLeases(const v1::ListLeasesRequest& request,
                         const v1::ListLeasesResponse& response);

}  // namespace ratelimit

#endif  // RATELIMIT_CLIENT_CPP_LEASE_COMMAND_H_
