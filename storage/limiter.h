#ifndef RATELIMIT_STORAGE_LIMITER_H_
#define RATELIMIT_STORAGE_LIMITER_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "storage/algebra.h"
#include "storage/clock.h"
#include "storage/limit_config.h"
#include "storage/state_store.h"

namespace ratelimit {

// One limit of a request, resolved to its definition and validated.
struct LimitRequest {
  std::string name;
  std::string key;
  LimitConfig config;
  double count = 1;
  // The namespace of the limit's state: the source of its definition.
  LimitSource source = LimitSource::kDefined;
};

// The answer to a whole request.
struct Verdict {
  // Every limit allowed (and, unless checking, every one was consumed).
  bool allowed = false;
  // One per requested limit, in request order.
  std::vector<Decision> decisions;
  // Index of the deciding denial (one that can never allow, else the one with the latest
  // retry_at); -1 when allowed.
  int denied_by = -1;
  // Denied: the latest retry_at among the denials, unset when one can never allow.
  // Allowed reservation: the latest retry_at among the limits.
  std::optional<int64_t> retry_at_us;
  // The time the decision was made at.
  int64_t now_us = 0;
};

// Evaluates requests of one or more limits against a StateStore, all-or-nothing: either every
// limit is consumed in one store transaction, or nothing is written. The store decides
// (StateStore::Apply); the Limiter picks the deciding denial and the verdict's retry_at.
//
// Thread safety: thread-safe; the store provides the isolation.
class Limiter {
 public:
  // `store` and `clock` are not owned and must outlive the Limiter.
  Limiter(StateStore& store, const Clock& clock) : store_(store), clock_(clock) {}
  Limiter(const Limiter&) = delete;
  Limiter& operator=(const Limiter&) = delete;

  // REQUIRES: 1 <= limits.size(), every config and count valid (see limit_config.h).
  // A store failure is returned as the store's status; nothing was consumed then.
  absl::StatusOr<Verdict> Evaluate(absl::Span<const LimitRequest> limits, Mode mode);

  // Deletes the state of one key / every key of `name`, in the namespace of `source`.
  absl::Status Reset(const std::string& name, const std::string& key,
                     LimitSource source = LimitSource::kDefined);
  absl::Status ResetAll(const std::string& name, LimitSource source = LimitSource::kDefined);

 private:
  StateStore& store_;
  const Clock& clock_;
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_LIMITER_H_
