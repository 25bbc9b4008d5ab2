#ifndef RATELIMIT_SERVER_ENVOY_ENVOY_CONFIG_H_
#define RATELIMIT_SERVER_ENVOY_ENVOY_CONFIG_H_

// The rate-limit configuration of the Envoy RLS API, in the envoyproxy/ratelimit YAML format:
// domains, each a tree of descriptors whose nodes may carry a rate limit. Parsing is in
// envoy_config_loader.h; this file holds the immutable result and the descriptor matching.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "google/protobuf/struct.pb.h"
#include "server/rlqs/rlqs_config.h"

namespace ratelimit {

// Ownership and thread safety: an EnvoyConfig owns its domains and rule trees; it is immutable
// once built and shared read-only (std::shared_ptr<const EnvoyConfig>) by any number of threads.
// The free functions are pure and safe to call from any thread.

// RateLimitResponse.RateLimit.Unit / envoy.type.v3.RateLimitUnit (same numbers).
enum class EnvoyUnit {
  kSecond = 1,
  kMinute = 2,
  kHour = 3,
  kDay = 4,
  kMonth = 5,
  kYear = 6,
  kWeek = 7
};

// The length of a unit's window, as envoyproxy/ratelimit defines it: a month is 30 days and a
// year 365 days; windows are aligned to multiples of this length since the Unix epoch (UTC).
int64_t EnvoyUnitSeconds(EnvoyUnit unit);

// "second", "MINUTE", ... (case-insensitive) -> unit; nullopt when unknown.
std::optional<EnvoyUnit> ParseEnvoyUnit(absl::string_view text);
// Upper-case name of `unit` ("SECOND").
absl::string_view EnvoyUnitName(EnvoyUnit unit);

enum class EnvoyAlgorithm {
  kFixedWindow,  // the reference's: requests_per_unit per window aligned to unit boundaries
  kTokenBucket,  // our extension: refills continuously at requests_per_unit per unit
};

// The most limits one rule may carry (`rate_limits`).
inline constexpr size_t kMaxEnvoyLimitsPerRule = 8;

// One limit of a rule: requests per unit of time, counted by an algorithm.
struct EnvoyLimit {
  // `name` of its block: reported in current_limit when this limit is the one a status shows.
  std::string name;
  // 0 blocks every request that matches.
  uint32_t requests_per_unit = 0;
  EnvoyUnit unit = EnvoyUnit::kSecond;
  EnvoyAlgorithm algorithm = EnvoyAlgorithm::kFixedWindow;
  // Token bucket only: the most requests that can accumulate. Unset: requests_per_unit.
  std::optional<uint32_t> burst;
  // How far into debt one large request may take the limit (see deploy/envoy/README.md).
  // Unset: no debt.
  std::optional<uint32_t> max_reserved;
};

// A concurrency rule (its `concurrency` block, our extension; docs/leases.md, "Envoy"): at most
// `capacity` slots of a descriptor's values held at once, each request taking hits_addend slots
// (default 1) by a lease that ends when Envoy sends the lease's release descriptor at the end of
// the stream, or when it expires after `lease_ttl_us`.
struct EnvoyConcurrency {
  uint32_t capacity = 1;  // 1..kMaxSlots
  int64_t lease_ttl_us = 0;
};

// The key of the one entry of a release descriptor (its value an EnvoyLeaseToken), and the field
// of the response's dynamic_metadata that hands the token to Envoy. No domain's top-level
// descriptor may use it as its key.
inline constexpr absl::string_view kEnvoyLeaseKey = "ratelimit.lease";

// The rate limit of a descriptor (its `rate_limit` block, or the list of its `rate_limits`, with
// the descriptor-level flags folded in), or its concurrency rule.
struct EnvoyRateLimit {
  // The limit's readable name: "<domain>.<path>", where the path has one segment per level,
  // `key` or `key_value` as written in the configuration (the reference's statistics key), e.g.
  // "messaging.message_type_marketing.to_number". Names statistics, metrics and logs. Two rules
  // of different domains may share it ("a" + "b.c" and "a.b" + "c"), so the store does not use
  // it: see state_name.
  std::string limit_name;
  // The name this rule's counters are kept under in the store (LimitSource::kEnvoy namespace):
  // EnvoyStateName of the domain and the descriptor path. Unique to the rule.
  std::string state_name;
  // `rate_limit.name` (with `rate_limits`: the first limit's), the target of other rules'
  // `replaces` together with every limit's name; may be empty.
  std::string name;
  // Names of limits this one replaces when both apply to one request.
  std::vector<std::string> replaces;
  // Matches, but never limits (reported with limit_remaining = UINT32_MAX).
  bool unlimited = false;
  // The rule's limits, all decided together (all-or-nothing): one from `rate_limit`, one or more
  // from `rate_limits` (our extension). Empty when unlimited. Limit i > 0 keeps its counters
  // under the key of limit 0 followed by EnvoyLimitKeySuffix(i).
  std::vector<EnvoyLimit> limits;
  // A concurrency rule (then `limits` is empty and `unlimited` false).
  std::optional<EnvoyConcurrency> concurrency;
  // Over-limit verdicts are reported OK (and counted as shadow_mode).
  bool shadow_mode = false;
  // A quota descriptor (the reference's quota_mode): over its limit, it makes the request
  // OVER_LIMIT only when every quota descriptor of the request is over.
  bool quota_mode = false;
  // Statistics of a key-only rule are kept per value.
  bool detailed_metric = false;
  // file:line of the descriptor, for logs.
  std::string where;

  // Whether `replaces` naming `n` drops this rule: the rule's name or one of its limits'.
  bool Named(absl::string_view n) const {
    if (n == name) return true;
    for (const EnvoyLimit& l : limits) {
      if (l.name == n) return true;
    }
    return false;
  }
  // Some limit blocks every request (requests_per_unit 0).
  bool blocks() const {
    for (const EnvoyLimit& l : limits) {
      if (l.requests_per_unit == 0) return true;
    }
    return false;
  }
  // The descriptor's `metadata` map, returned in the response's dynamic_metadata when the rule's
  // descriptor passes (--envoy_response_dynamic_metadata). Null: none. Immutable, shared.
  std::shared_ptr<const google::protobuf::Struct> metadata;
};

// What follows the state key of limit `index` (> 0) of a rule with several limits: '|', '#' and
// the index. A rule's descriptors always have the same number of entries, so the suffixed key
// never equals the key of another descriptor of the rule (whose values are joined by '|' with
// '|' inside values escaped). Empty for index 0.
std::string EnvoyLimitKeySuffix(size_t index);

// What follows the joined values in the key of a limit Envoy sent in a descriptor (`limit`):
// "|@" and the unit's name, so that two limits of one descriptor path with different units keep
// counters of their own (one of 3 a minute and one of 5 a day both hold), while limits of the
// same unit share one, whatever their requests_per_unit.
std::string EnvoyOverrideKeySuffix(EnvoyUnit unit);

struct EnvoyDescriptorNode;

// One level of the descriptor tree.
struct EnvoyDescriptorList {
  // Nodes in configuration order.
  std::vector<EnvoyDescriptorNode> nodes;
  // Indexes into `nodes`: exact (key, value) rules; key-only rules; rules whose value has a `*`
  // (in configuration order, the first match wins).
  absl::flat_hash_map<std::pair<std::string, std::string>, size_t> exact;
  absl::flat_hash_map<std::string, size_t> bare;
  std::vector<size_t> wildcards;
};

struct EnvoyDescriptorNode {
  std::string key;
  // Empty: matches any value of `key`.
  std::string value;
  std::optional<EnvoyRateLimit> limit;
  EnvoyDescriptorList children;
  // Statistics keys carry the request's value at this level where the rule has none, or has a
  // `*` pattern (the reference's value_to_metric).
  bool value_to_metric = false;
  // Wildcard values only: every value matching `value` shares one counter (and one statistics
  // key, with the pattern as the value), as the reference's share_threshold.
  bool share_threshold = false;
};

struct EnvoyDomain {
  std::string name;
  // The file that defined it, and where in it the domain is named ("file:line:column").
  std::string source;
  std::string where;
  EnvoyDescriptorList descriptors;
  // Its `quota_buckets` (RLQS, server/rlqs/rlqs_config.h); null when the file has none.
  std::shared_ptr<const RlqsDomainConfig> quota_buckets;
};

// One (key, value) entry of a request descriptor.
struct EnvoyEntry {
  absl::string_view key;
  absl::string_view value;
};

// A matched limit, with the statistics key for this request's values.
struct EnvoyMatch {
  const EnvoyRateLimit* limit = nullptr;
  std::string stat_key;
  // With a limit and some level matched by a share_threshold wildcard: one per entry, that
  // level's pattern (which replaces the request's value in the state key) or empty. Points into
  // the configuration, as `limit`. Empty otherwise.
  std::vector<absl::string_view> shared_values;
};

// All domains in force. Immutable once built.
struct EnvoyConfig {
  absl::flat_hash_map<std::string, EnvoyDomain> domains;

  const EnvoyDomain* FindDomain(absl::string_view domain) const {
    auto it = domains.find(domain);
    return it == domains.end() ? nullptr : &it->second;
  }
};

// Finds the limit for one descriptor, with the reference's rules: at each level an exact
// (key, value) rule beats a wildcard rule beats a key-only rule; the walk stops at a node
// without children; a limit applies only when it sits at the depth of the last entry.
// Returns a match with limit == nullptr when no limit applies.
// The statistics key, as the reference's: with detailed_metric on the rule,
// "<domain>.<key>_<value>" for every level with the request's values (a share_threshold level's
// pattern instead); otherwise the rule's limit_name, except that a level whose node has
// value_to_metric shows the request's value (key-only or wildcard node, a share_threshold
// wildcard keeping its pattern).
EnvoyMatch MatchDescriptor(const EnvoyDomain& domain, absl::Span<const EnvoyEntry> entries);

// The store name of an Envoy limit: an 'R' (a configured rule) or 'O' (a limit Envoy sent in a
// descriptor's `limit` field, whose `path` carries the descriptor's keys with empty values),
// then the domain and each level's key and value, every one as "<decimal length>:<bytes>".
// Unambiguous: two different (domain, path, override) never give the same name.
std::string EnvoyStateName(absl::string_view domain, absl::Span<const EnvoyEntry> path,
                           bool override_limit);

// What an EnvoyStateName is made of. The path's entries are (key, value) pairs.
struct EnvoyStatePath {
  std::string domain;
  std::vector<std::pair<std::string, std::string>> path;
  bool override_limit = false;
};

// The domain, path and kind an EnvoyStateName was made of; nullopt when `state_name` is not one.
std::optional<EnvoyStatePath> ParseEnvoyStateName(absl::string_view state_name);

// The configured rule whose state_name is `state_name` ('R' names only), or nullptr.
const EnvoyRateLimit* FindEnvoyRule(const EnvoyConfig& config, absl::string_view state_name);
// The same when the caller has parsed the state name already: `domain` is its domain.
const EnvoyRateLimit* FindEnvoyRule(const EnvoyConfig& config, absl::string_view domain,
                                    absl::string_view state_name);

// Whether a Reset of Envoy states names something configured: OK, or NOT_FOUND naming the
// field ("name" for a domain `config` has not, "envoy_path" for a rule path none of the domain's
// rules has). A configured rule is found by its `state_name`; an override (a limit Envoy sent in
// a descriptor) needs only its domain.
absl::Status EnvoyResetTargetConfigured(const EnvoyConfig& config, absl::string_view domain,
                                        absl::string_view state_name, bool override_limit);

// The states of a Reset of Envoy states: their name (EnvoyStateName of `domain` and `path`, each
// entry a key and its value) and, for a rule with several limits, the key suffixes of limits
// 1.. (EnvoyLimitKeySuffix).
struct EnvoyResetState {
  std::string name;
  std::vector<std::string> key_suffixes;
  // The rule is a concurrency rule: a reset ends its leases.
  bool concurrency = false;
};

// The states of a Reset of Envoy states, or NOT_FOUND naming the field when `config` has no such
// target (as EnvoyResetTargetConfigured).
absl::StatusOr<EnvoyResetState> EnvoyResetStateName(
    const EnvoyConfig& config, absl::string_view domain,
    absl::Span<const std::pair<std::string, std::string>> path, bool override_limit);

// `*` in `pattern` matches any run of characters (including none); everything else literally.
bool EnvoyGlobMatch(absl::string_view pattern, absl::string_view text);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_ENVOY_ENVOY_CONFIG_H_
