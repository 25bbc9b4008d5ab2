#include "server/envoy/envoy_convert.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "server/serving/grpc_convert.h"
#include "storage/leases/lease_id.h"
#include "storage/status_util.h"

namespace ratelimit {
namespace {

using DescriptorProto = ::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;

absl::Status ValidateDescriptor(const DescriptorProto& d, const std::string& field) {
  if (d.entries_size() == 0)
    return InvalidField(field + ".entries", "at least one entry is required");
  if (d.entries_size() > kMaxEnvoyEntries) {
    return InvalidField(field + ".entries",
                        absl::StrCat("at most ", kMaxEnvoyEntries, " entries per descriptor, got ",
                                     d.entries_size()));
  }
  for (int j = 0; j < d.entries_size(); ++j) {
    const std::string f = absl::StrCat(field, ".entries[", j, "]");
    if (d.entries(j).key().empty()) return InvalidField(f + ".key", "must not be empty");
    if (d.entries(j).value().empty()) return InvalidField(f + ".value", "must not be empty");
  }
  if (d.has_hits_addend() && d.hits_addend().value() > kMaxAmount) {
    return InvalidField(field + ".hits_addend",
                        absl::StrCat("must be at most 1e15, got ", d.hits_addend().value()));
  }
  if (d.has_limit()) {
    const int unit = d.limit().unit();
    if (unit < 1 || unit > 7) {
      return InvalidField(
          field + ".limit.unit",
          absl::StrCat("must be SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR, got ", unit));
    }
  }
  return absl::OkStatus();
}

// The rule Envoy sent in a descriptor's `limit`: a fixed window, never shadowed, with counters of
// its own (statistics name "<domain>.<key1>.<key2>...#override").
absl::StatusOr<EnvoyRateLimit> OverrideRule(absl::string_view domain, const DescriptorProto& d,
                                            const std::string& field) {
  EnvoyRateLimit r;
  r.limit_name = std::string(domain);
  for (const auto& e : d.entries()) absl::StrAppend(&r.limit_name, ".", e.key());
  r.limit_name += "#override";
  std::vector<EnvoyEntry> keys;
  for (const auto& e : d.entries()) keys.push_back(EnvoyEntry{e.key(), ""});
  r.state_name = EnvoyStateName(domain, keys, /*override_limit=*/true);
  if (absl::Status s = ValidateName(r.limit_name, "the limit name made of domain and keys");
      !s.ok()) {
    return InvalidField(field + ".entries", s.message());
  }
  EnvoyLimit limit;
  limit.requests_per_unit = d.limit().requests_per_unit();
  limit.unit = static_cast<EnvoyUnit>(d.limit().unit());
  r.limits.push_back(limit);
  r.where = "limit override";
  return r;
}

// A release descriptor (one entry, keyed kEnvoyLeaseKey, whose value is a lease token): the plan
// that releases the token's lease, or kNoLimit when the token's rule is no longer configured (its
// leases then end by their TTL). A token of another domain, or not a token, is INVALID_ARGUMENT.
absl::Status PlanRelease(const EnvoyConfig& config, absl::string_view domain,
                         absl::string_view token, const std::string& field,
                         EnvoyDescriptorPlan& p) {
  std::optional<EnvoyLeaseRef> ref = ParseEnvoyLeaseToken(token);
  if (!ref) {
    return InvalidField(field + ".entries[0].value",
                        absl::StrCat("not a lease token (the ", kEnvoyLeaseKey,
                                     " field of a response's dynamic_metadata)"));
  }
  if (ref->domain != domain) {
    return InvalidField(field + ".entries[0].value",
                        "the token names a lease of another domain than the request's");
  }
  const EnvoyRateLimit* rule = FindEnvoyRule(config, ref->domain, ref->state_name);
  if (rule == nullptr || !rule->concurrency) return absl::OkStatus();
  p.kind = EnvoyDescriptorPlan::Kind::kRelease;
  p.config_rule = rule;
  p.stat_key = rule->limit_name;
  p.lease.key = StateKey{std::move(ref->state_name), std::move(ref->key), LimitSource::kEnvoy};
  p.lease.config = EnvoyConcurrencyConfig(*rule->concurrency);
  p.lease.action = LeaseAction::kRelease;
  p.lease.lease_id = ref->lease_id;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<EnvoyDescriptorPlan>> PlanEnvoyRequest(
    const rlsv3::RateLimitRequest& request, const EnvoyConfig& config, EnvoyPolicy policy) {
  if (request.domain().empty()) return InvalidField("domain", "must not be empty");
  if (absl::Status s = ValidateName(request.domain(), "domain"); !s.ok()) return s;
  const int n = request.descriptors_size();
  if (n == 0) return InvalidField("descriptors", "at least one descriptor is required");
  if (n > kMaxEnvoyDescriptors) {
    return InvalidField("descriptors", absl::StrCat("at most ", kMaxEnvoyDescriptors,
                                                    " descriptors per request, got ", n));
  }
  for (int i = 0; i < n; ++i) {
    if (absl::Status s =
            ValidateDescriptor(request.descriptors(i), absl::StrCat("descriptors[", i, "]"));
        !s.ok()) {
      return s;
    }
  }

  std::vector<EnvoyDescriptorPlan> plan(n);
  const EnvoyDomain* domain = config.FindDomain(request.domain());
  if (domain == nullptr) return plan;  // unknown domain: every descriptor is OK

  absl::flat_hash_set<absl::string_view> replaced;
  std::vector<EnvoyEntry> entries;
  int acquiring = -1;  // the descriptor that takes a concurrency rule's slots
  for (int i = 0; i < n; ++i) {
    const DescriptorProto& d = request.descriptors(i);
    const std::string field = absl::StrCat("descriptors[", i, "]");
    EnvoyDescriptorPlan& p = plan[i];
    if (d.entries_size() == 1 && d.entries(0).key() == kEnvoyLeaseKey) {
      if (absl::Status s = PlanRelease(config, request.domain(), d.entries(0).value(), field, p);
          !s.ok()) {
        return s;
      }
      continue;
    }
    entries.clear();
    for (const auto& e : d.entries()) entries.push_back(EnvoyEntry{e.key(), e.value()});
    if (d.has_limit()) {
      absl::StatusOr<EnvoyRateLimit> r = OverrideRule(request.domain(), d, field);
      if (!r.ok()) return r.status();
      p.override_rule = *std::move(r);
      p.stat_key = p.override_rule->limit_name;
    } else {
      EnvoyMatch m = MatchDescriptor(*domain, entries);
      if (m.limit == nullptr) continue;
      p.config_rule = m.limit;
      p.stat_key = std::move(m.stat_key);
      // share_threshold: the level's pattern stands for every value it matches (one counter).
      for (size_t j = 0; j < m.shared_values.size(); ++j) {
        if (!m.shared_values[j].empty()) entries[j].value = m.shared_values[j];
      }
    }
    const EnvoyRateLimit& rule = *p.rule();
    p.hits = d.has_hits_addend() ? d.hits_addend().value()
                                 : std::max<uint64_t>(1, request.hits_addend());
    p.shadow = rule.shadow_mode || policy.shadow_mode;
    p.quota = rule.quota_mode || policy.quota_mode;
    // An unlimited rule replaces the rules it names too ("this path is unlimited, instead of
    // the general limit"), as in the reference.
    for (const std::string& r : rule.replaces) replaced.insert(r);
    if (rule.unlimited) {
      p.kind = EnvoyDescriptorPlan::Kind::kUnlimited;
      continue;
    }
    if (rule.concurrency) {
      const std::string hits_field =
          d.has_hits_addend() ? field + ".hits_addend" : std::string("hits_addend");
      if (d.is_negative_hits()) {
        return InvalidField(field + ".is_negative_hits",
                            absl::StrCat("a concurrency rule's slots are given back by the "
                                         "release descriptor (",
                                         kEnvoyLeaseKey, "), not by negative hits"));
      }
      if (static_cast<double>(p.hits) > kMaxSlots) {
        return InvalidField(hits_field, absl::StrCat("a concurrency rule takes at most ", kMaxSlots,
                                                     " slots, got ", p.hits));
      }
      p.kind = EnvoyDescriptorPlan::Kind::kAcquire;
      p.check_only = p.hits == 0;
      if (!p.check_only) {
        if (acquiring >= 0) {
          return InvalidField(
              field, absl::StrCat("a request takes the slots of one concurrency rule at most; "
                                  "descriptors[",
                                  acquiring, "] takes some already"));
        }
        acquiring = i;
      }
    } else if (d.is_negative_hits()) {
      // A refund: nothing to give back for 0 hits or a blocking rule (nothing was ever taken).
      if (p.hits == 0 || rule.blocks()) continue;
      p.kind = EnvoyDescriptorPlan::Kind::kRefund;
    } else if (rule.blocks()) {
      p.kind = EnvoyDescriptorPlan::Kind::kBlocked;
      p.check_only = p.hits == 0;
      continue;
    } else {
      p.kind = EnvoyDescriptorPlan::Kind::kLimited;
      p.check_only = p.hits == 0;
    }
    const std::string key = EnvoyStateKey(entries);
    // Each limit's key is the joined values and its suffix (a rule's second limit on, or the
    // unit of a limit Envoy sent): the values leave room for the longest. (Held inline: a rule
    // has one or two limits, and this runs for every descriptor of every request.)
    absl::InlinedVector<std::string, 2> suffixes;
    if (!rule.concurrency) {
      for (size_t l = 0; l < rule.limits.size(); ++l) {
        suffixes.push_back(p.override_rule ? EnvoyOverrideKeySuffix(rule.limits[l].unit)
                                           : EnvoyLimitKeySuffix(l));
      }
    }
    size_t room = kMaxKeyBytes;
    for (const std::string& suffix : suffixes) room = std::min(room, kMaxKeyBytes - suffix.size());
    if (!ValidateKey(key, field + ".entries").ok() || key.size() > room) {
      return InvalidField(field + ".entries",
                          absl::StrCat("the joined values are ", key.size(), " bytes; at most ",
                                       room, " are accepted"));
    }
    if (rule.concurrency) {
      p.lease.key = StateKey{rule.state_name, key, LimitSource::kEnvoy};
      p.lease.config = EnvoyConcurrencyConfig(*rule.concurrency);
      p.lease.action = p.check_only ? LeaseAction::kCheck : LeaseAction::kAcquire;
      p.lease.count = p.check_only ? 1 : static_cast<int64_t>(p.hits);
      p.lease.ttl_us = rule.concurrency->lease_ttl_us;
      if (!p.check_only) p.lease.lease_id = LeaseId::New();
      continue;
    }
    for (size_t l = 0; l < rule.limits.size(); ++l) {
      LimitRequest& r = p.requests.emplace_back();
      r.name = rule.state_name;
      r.source = LimitSource::kEnvoy;
      r.key = key + suffixes[l];
      r.config = EnvoyLimitConfig(rule.limits[l]);
      r.count = p.check_only ? 1 : static_cast<double>(p.hits);
    }
  }
  if (!replaced.empty()) {
    for (EnvoyDescriptorPlan& p : plan) {
      const EnvoyRateLimit* rule = p.rule();
      if (rule == nullptr || rule->unlimited) continue;
      if (std::any_of(replaced.begin(), replaced.end(),
                      [rule](absl::string_view n) { return !n.empty() && rule->Named(n); })) {
        p.kind = EnvoyDescriptorPlan::Kind::kNoLimit;
        p.config_rule = nullptr;
        p.override_rule.reset();
        p.requests.clear();
      }
    }
  }
  return plan;
}

bool BuildEnvoyResponse(absl::Span<const EnvoyDescriptorPlan> plan,
                        absl::Span<const EnvoyOutcome> outcomes,
                        const EnvoyResponseOptions& options, rlsv3::RateLimitResponse* response) {
  using Kind = EnvoyDescriptorPlan::Kind;
  bool over = false;  // a descriptor that is not a quota descriptor is over
  // The quota descriptors: whether there are any, all are over, and one of those is not a shadow.
  bool quotas = false, quotas_all_over = true, quota_over_for_real = false;
  int tightest = -1;
  uint32_t tightest_remaining = 0;
  int64_t tightest_reset = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const EnvoyDescriptorPlan& p = plan[i];
    rlsv3::RateLimitResponse::DescriptorStatus* s = response->add_statuses();
    s->set_code(rlsv3::RateLimitResponse::OK);
    if (p.kind == Kind::kNoLimit) continue;
    if (p.kind == Kind::kUnlimited) {
      s->set_limit_remaining(std::numeric_limits<uint32_t>::max());
      continue;
    }
    const EnvoyRateLimit& rule = *p.rule();
    const EnvoyOutcome& o = outcomes[i];
    // The status of a rule in shadow mode is OK; the server's shadow mode leaves statuses as they
    // are and answers OK overall, as the reference does.
    const bool status_over = o.over && !rule.shadow_mode;
    if (p.quota && p.kind != Kind::kRefund && p.kind != Kind::kRelease) {
      quotas = true;
      quotas_all_over = quotas_all_over && o.over;
      quota_over_for_real = quota_over_for_real || status_over;
    }
    if (status_over) {
      s->set_code(rlsv3::RateLimitResponse::OVER_LIMIT);
      if (!p.quota) over = true;
    }
    rlsv3::RateLimitResponse::RateLimit* current = s->mutable_current_limit();
    const uint32_t remaining = p.kind == Kind::kBlocked ? 0 : EnvoyRemaining(o.value);
    int64_t reset = 0;
    if (rule.concurrency) {
      // Slots: the capacity, no unit; until reset, when a denied request's slots free at the
      // latest (0 when allowed).
      current->set_requests_per_unit(rule.concurrency->capacity);
      if (o.over && o.retry_at_us) reset = std::max<int64_t>(0, *o.retry_at_us - o.now_us);
    } else {
      const EnvoyLimit& limit = rule.limits[o.limit];
      current->set_name(limit.name.empty() ? rule.name : limit.name);
      current->set_requests_per_unit(limit.requests_per_unit);
      current->set_unit(static_cast<rlsv3::RateLimitResponse::RateLimit::Unit>(limit.unit));
      reset = EnvoyResetMicros(limit, o.value, o.now_us);
    }
    s->set_limit_remaining(remaining);
    SetDuration(reset, s->mutable_duration_until_reset());
    if (!rule.shadow_mode && p.kind != Kind::kRelease &&
        (tightest < 0 || remaining < tightest_remaining ||
         (remaining == tightest_remaining && reset > tightest_reset))) {
      tightest = static_cast<int>(i);
      tightest_remaining = remaining;
      tightest_reset = reset;
    }
  }
  over = over || (quotas && quotas_all_over && quota_over_for_real);
  const bool shadowed = over && options.shadow_mode;
  response->set_overall_code(over && !shadowed ? rlsv3::RateLimitResponse::OVER_LIMIT
                                               : rlsv3::RateLimitResponse::OK);
  if (!options.ratelimit_headers || tightest < 0) return shadowed;
  // The limit: a token bucket's burst (what it holds full), a concurrency rule's capacity.
  const EnvoyRateLimit& rule = *plan[tightest].rule();
  uint32_t limit_value = 0;
  if (rule.concurrency) {
    limit_value = rule.concurrency->capacity;
  } else {
    const EnvoyLimit& limit = rule.limits[outcomes[tightest].limit];
    limit_value = limit.algorithm == EnvoyAlgorithm::kTokenBucket
                      ? limit.burst.value_or(limit.requests_per_unit)
                      : limit.requests_per_unit;
  }
  auto add = [response](absl::string_view key, uint64_t value) {
    auto* h = response->add_response_headers_to_add();
    h->set_key(std::string(key));
    h->set_value(absl::StrCat(value));
  };
  add(options.header_names.limit, limit_value);
  add(options.header_names.remaining, tightest_remaining);
  add(options.header_names.reset, static_cast<uint64_t>((tightest_reset + 999999) / 1000000));
  return shadowed;
}

bool IsHttpHeaderName(absl::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) &&
        absl::string_view("!#$%&'*+-.^_`|~").find(c) == absl::string_view::npos) {
      return false;
    }
  }
  return true;
}

}  // namespace ratelimit
