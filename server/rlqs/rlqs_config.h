#ifndef RATELIMIT_SERVER_RLQS_RLQS_CONFIG_H_
#define RATELIMIT_SERVER_RLQS_RLQS_CONFIG_H_

// Which RLQS buckets get which global budget: the `quota_buckets` section of an Envoy domain
// file (server/envoy/envoy_config_loader.h). The RLQS stream's `domain` selects the file.
//
//   domain: edge
//   quota_buckets:
//     default: allow_all            # allow_all (default) | deny_all | a limit block (below)
//     rules:
//       - name: per_tenant          # optional metric label; default: the match as k=v,...
//         match:                    # required: BucketId pairs, at least one; "*" = any value
//           tenant: "*"
//           route: checkout
//         requests_per_unit: 1000   # required unless deny_all; 0..4294967295
//         unit: second              # second | minute | hour | day (any case)
//         burst: 200                # tokens; default: one second of the rate, at least 1
//         fair_share:               # optional, defaults in rlqs_allocator.h
//           newcomer_reserve: 0.05
//           reassign_threshold: 0.1
//           smoothing: 0.7
//         shadow: false             # report only: assignments ALLOW_ALL, usage still counted
//         deny_all: false           # kill switch: assignments DENY_ALL
//
// A rule matches a bucket when every one of its pairs is in the bucket's BucketId (the bucket
// may have more keys), with an equal value or `*`. The most specific matching rule wins: more
// exact values first, then more wildcard pairs, then the earlier rule. No rule matching: the
// default. Each bucket (each distinct BucketId) has a global budget of its own: a rule with a
// wildcard gives every tenant's bucket the rule's limit.
//
// Errors are INVALID_ARGUMENT "<file>:<line>:<column>: quota_buckets.<field>: <what>". Unknown
// and repeated keys are errors.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/rlqs/rlqs_allocator.h"
#include "yaml-cpp/yaml.h"

namespace ratelimit {

// A bucket's identity: its BucketId pairs sorted by key (keys are unique).
using RlqsBucketKey = std::vector<std::pair<std::string, std::string>>;

// What the subscribers of a bucket are told.
enum class RlqsRuleAction {
  kLimit,     // a share of the global rate, as a token bucket
  kAllowAll,  // ALLOW_ALL (the default default; also what a shadow rule sends)
  kDenyAll,   // DENY_ALL (deny_all: true, or default: deny_all)
};

// One rule (or the default). Immutable once parsed.
struct RlqsRule {
  // Metric label.
  std::string name;
  // The pairs to match, sorted by key; a value "*" matches any. Empty for the default.
  RlqsBucketKey match;
  RlqsRuleAction action = RlqsRuleAction::kAllowAll;
  // kLimit only: the global rate in requests per second, and the global burst in tokens.
  double rate_per_second = 0;
  double burst = 0;
  FairShareSettings fair_share;
  // Report only: the assignments are ALLOW_ALL, the usage is still counted.
  bool shadow = false;
  // "<file>:<line>:<column>" of the rule.
  std::string where;
};

// The `quota_buckets` of one domain. Immutable once parsed; shared read-only by any number of
// threads (std::shared_ptr<const RlqsDomainConfig>).
struct RlqsDomainConfig {
  std::vector<RlqsRule> rules;
  RlqsRule default_rule;

  // The most specific rule matching `bucket` (see the top of this file), else default_rule.
  const RlqsRule& Match(const RlqsBucketKey& bucket) const;
};

// Parses a `quota_buckets` node; `source` names the file in errors. Pure; safe from any thread.
absl::StatusOr<std::shared_ptr<const RlqsDomainConfig>> ParseRlqsQuotaBuckets(
    const YAML::Node& node, absl::string_view source);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_RLQS_RLQS_CONFIG_H_
