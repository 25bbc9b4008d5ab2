#ifndef RATELIMIT_SERVER_ENVOY_ENVOY_PLAN_H_
#define RATELIMIT_SERVER_ENVOY_ENVOY_PLAN_H_

// The Envoy API's domain types: what the server does with each descriptor of a request (the
// plan, made from the request by PlanEnvoyRequest in envoy_convert.h) and what came of it (the
// outcome, made by EvaluateEnvoyPlan in envoy_evaluator.h). No protos: plain values, so the
// evaluation policy is tested without gRPC. Free functions and plain structs (values, owned by
// whoever holds them); thread-compatible.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "server/envoy/envoy_config.h"
#include "storage/leases/lease.h"
#include "storage/limiter.h"

namespace ratelimit {

// What the server does with one descriptor of a request.
struct EnvoyDescriptorPlan {
  enum class Kind {
    kNoLimit,    // unknown domain, no rule at this depth, or a rule replaced by another: OK
    kUnlimited,  // an `unlimited` rule: OK, limit_remaining UINT32_MAX
    kBlocked,    // requests_per_unit 0: over limit, nothing to count
    kLimited,    // evaluated against the store
    kRefund,     // is_negative_hits: `hits` given back to every limit of the rule (a settlement)
    kAcquire,    // a concurrency rule: `hits` slots taken by a new lease (`lease`), or checked
    kRelease,    // a release descriptor: the lease its token names given back (`lease`)
  };
  Kind kind = Kind::kNoLimit;
  // The configured rule that applied (points into the configuration snapshot), or the limit
  // Envoy sent in the descriptor's `limit` override. See rule().
  const EnvoyRateLimit* config_rule = nullptr;
  std::optional<EnvoyRateLimit> override_rule;
  // Statistics key (the rule's limit name, per value with detailed_metric).
  std::string stat_key;
  // Hits this descriptor adds (or gives back): its own hits_addend, else the request's (0
  // meaning 1).
  uint64_t hits = 1;
  // hits was 0: check whether one more hit would be allowed, consume nothing.
  bool check_only = false;
  // Never denies the request: its rule is in shadow mode, or the server is (--envoy_shadow_mode).
  bool shadow = false;
  // A quota descriptor (its rule's quota_mode, or --envoy_quota_mode): over its limit, it denies
  // the request only when every quota descriptor of the request is over.
  bool quota = false;
  // The key or key pattern of the runtime override that decided this descriptor
  // (envoy_overrides.h); empty when none did.
  std::string runtime_override;
  // kLimited and kRefund: one request per limit of the rule, in the rule's order (count = hits,
  // 1 when check_only).
  LimitRequests requests;
  // kAcquire: the lease op on the descriptor's concurrency key (kAcquire of `hits` slots with the
  // rule's lease_ttl, the new lease's id chosen by PlanEnvoyRequest; kCheck when check_only).
  // kRelease: the kRelease of the token's lease on its key.
  LeaseOp lease;

  // The rule that applied; nullptr for kNoLimit.
  const EnvoyRateLimit* rule() const { return override_rule ? &*override_rule : config_rule; }
  // Over its limit, this descriptor alone does not deny the request.
  bool soft() const { return shadow || quota; }
  // The rule lets one request take the limit into debt (max_reserved), from a positive balance.
  bool overdraft() const {
    const EnvoyRateLimit* r = rule();
    if (r == nullptr) return false;
    for (const EnvoyLimit& l : r->limits) {
      if (l.max_reserved.has_value()) return true;
    }
    return false;
  }
};

// The algebra's definition of a limit: a fixed window of requests_per_unit per unit, aligned to
// unit boundaries (start 0), or a token bucket refilling requests_per_unit per unit up to burst.
// REQUIRES: limit.requests_per_unit > 0.
LimitConfig EnvoyLimitConfig(const EnvoyLimit& limit);

// The lease config of a concurrency rule: kConcurrency, `capacity` slots, lease_ttl as given
// (max_lease_ttl its default: the TTL or more).
LimitConfig EnvoyConcurrencyConfig(const EnvoyConcurrency& concurrency);

// The state key of a descriptor: its entry values joined by '|', with '\' and '|' inside values
// escaped by a '\'. Unambiguous, so different value tuples never share a counter.
std::string EnvoyStateKey(absl::Span<const EnvoyEntry> entries);

// Whether `key` is a state key EnvoyStateKey makes for a rule of `levels` levels: `levels`
// non-empty values joined by '|', a '\' escaping only a '|' or a '\'. An operator's key that is
// not (SetOverride's target, Reset) could never match a descriptor: INVALID_ARGUMENT naming
// `field`, saying why.
absl::Status ValidateEnvoyStateKey(absl::string_view key, size_t levels, absl::string_view field);

// Whole requests left in a balance (0 when negative; saturates at UINT32_MAX).
uint32_t EnvoyRemaining(double value);

// Until the limit resets, from `now_us`: a fixed window (or a blocking limit) until its window
// ends; a token bucket until it is full again from `value`.
int64_t EnvoyResetMicros(const EnvoyLimit& limit, double value, int64_t now_us);

// The result of evaluating one descriptor.
struct EnvoyOutcome {
  // Over its limit on its own (for kBlocked: always): over any limit of its rule.
  bool over = false;
  // Tokens after the decision (consumed only if the whole request was allowed) of the limit
  // reported (`limit`).
  double value = 0;
  // When the decision was made.
  int64_t now_us = 0;
  // The index in rule()->limits of the limit the status reports: the tightest (an over limit
  // before any other, then the fewest whole requests left, then the longest until reset).
  size_t limit = 0;
  // kAcquire and kRelease: `value` is the slots free after the decision. kAcquire: when the
  // request took its lease, the token that releases it (EnvoyLeaseToken), else empty; denied,
  // when enough slots free at the latest (LeaseDecision::retry_at_us).
  std::string lease_token = {};
  std::optional<int64_t> retry_at_us = {};
  // kRelease: whether the lease was held (and so released). kAcquire and kRelease: leases the
  // store's decision found expired unreleased (the leak detector's count).
  bool released = false;
  int64_t leases_expired = 0;
  // kAcquire that took or was refused its slots, and kRelease (not a check): the slots held on the
  // key after the decision, and the store's number of the decision (LeaseDecision::seq), for the
  // held-slots gauge.
  bool lease_decided = false;
  int64_t lease_held = 0;
  uint64_t lease_seq = 0;
};

// The token of a lease a concurrency rule's descriptor took: what the response's
// dynamic_metadata hands Envoy under kEnvoyLeaseKey and what a release descriptor sends back. It
// names the lease and where it is kept: "<lease id>.<state name>.<key>", the last two in URL-safe
// base64 without padding.
std::string EnvoyLeaseToken(const LeaseId& lease_id, absl::string_view state_name,
                            absl::string_view key);

// What a lease token names.
struct EnvoyLeaseRef {
  LeaseId lease_id;
  std::string state_name;
  std::string key;
  std::string domain;  // the domain the state name is of
};

// The lease a token names; nullopt when `token` is not one EnvoyLeaseToken makes (three parts, a
// server lease id, an EnvoyStateName of a configured rule, a key of at most kMaxKeyBytes).
std::optional<EnvoyLeaseRef> ParseEnvoyLeaseToken(absl::string_view token);

// Whether the quota descriptors of `plan` deny the request: there are some, every one of them is
// over its limit (outcomes of descriptors not decided yet read "not over"), and not every one of
// them is in shadow mode. REQUIRES: outcomes.size() == plan.size().
bool EnvoyQuotaDenies(absl::Span<const EnvoyDescriptorPlan> plan,
                      absl::Span<const EnvoyOutcome> outcomes);

// The outcome of a descriptor from its decisions (one per limit of its rule, in order):
// over when any is denied; reports the tightest limit. REQUIRES: the rule has
// decisions.size() limits.
EnvoyOutcome EnvoyOutcomeOf(const EnvoyRateLimit& rule, absl::Span<const Decision> decisions,
                            int64_t now_us);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_ENVOY_ENVOY_PLAN_H_
