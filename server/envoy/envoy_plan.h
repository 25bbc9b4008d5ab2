#ifndef RATELIMIT_SERVER_ENVOY_ENVOY_PLAN_H_
#define RATELIMIT_SERVER_ENVOY_ENVOY_PLAN_H_

// The Envoy API's domain types: what the server does with each descriptor of a request (the
// plan, made from the request by PlanEnvoyRequest in envoy_convert.h) and what came of it (the
// outcome, made by EvaluateEnvoyPlan in envoy_evaluator.h). No protos: plain values, so the
// evaluation policy is tested without gRPC. Free functions and plain structs (values, owned by
// whoever holds them); thread-compatible.

#include <cstdint>
#include <optional>
#include <string>

#include "absl/types/span.h"
#include "server/envoy/envoy_config.h"
#include "storage/limiter.h"

namespace ratelimit {

// What the server does with one descriptor of a request.
struct EnvoyDescriptorPlan {
  enum class Kind {
    kNoLimit,    // unknown domain, no rule at this depth, or a rule replaced by another: OK
    kUnlimited,  // an `unlimited` rule: OK, limit_remaining UINT32_MAX
    kBlocked,    // requests_per_unit 0: over limit, nothing to count
    kLimited,    // evaluated against the store
  };
  Kind kind = Kind::kNoLimit;
  // The configured rule that applied (points into the configuration snapshot), or the limit
  // Envoy sent in the descriptor's `limit` override. See rule().
  const EnvoyRateLimit* config_rule = nullptr;
  std::optional<EnvoyRateLimit> override_rule;
  // Statistics key (the rule's limit name, per value with detailed_metric).
  std::string stat_key;
  // Hits this descriptor adds: its own hits_addend, else the request's (0 meaning 1).
  uint64_t hits = 1;
  // hits was 0: check whether one more hit would be allowed, consume nothing.
  bool check_only = false;
  // kLimited: the limit to evaluate, count = hits (1 when check_only).
  LimitRequest request;

  // The rule that applied; nullptr for kNoLimit.
  const EnvoyRateLimit* rule() const { return override_rule ? &*override_rule : config_rule; }
  bool shadow() const { return rule() != nullptr && rule()->shadow_mode; }
  // The rule lets one request take the limit into debt (max_reserved), from a positive balance.
  bool overdraft() const { return rule() != nullptr && rule()->max_reserved.has_value(); }
};

// The algebra's definition of a rule: a fixed window of requests_per_unit per unit, aligned to
// unit boundaries (start 0), or a token bucket refilling requests_per_unit per unit up to burst.
// REQUIRES: rule.requests_per_unit > 0 and !rule.unlimited.
LimitConfig EnvoyLimitConfig(const EnvoyRateLimit& rule);

// The state key of a descriptor: its entry values joined by '|', with '\' and '|' inside values
// escaped by a '\'. Unambiguous, so different value tuples never share a counter.
std::string EnvoyStateKey(absl::Span<const EnvoyEntry> entries);

// The result of evaluating one descriptor.
struct EnvoyOutcome {
  // Over its limit on its own (for kBlocked: always).
  bool over = false;
  // Tokens after the decision (consumed only if the whole request was allowed).
  double value = 0;
  // When the decision was made.
  int64_t now_us = 0;
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_ENVOY_ENVOY_PLAN_H_
