#include "server/v1/convert.h"

#include <algorithm>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "server/serving/grpc_convert.h"
#include "storage/status_util.h"

namespace ratelimit {

std::string DurationText(const google::protobuf::Duration& d) {
  // Fields no valid Duration has are shown as sent: their sum would be another, valid, duration.
  if (DurationNanosMalformed(d)) {
    return absl::StrCat("{seconds: ", d.seconds(), ", nanos: ", d.nanos(), "}");
  }
  return absl::FormatDuration(absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos()));
}

absl::StatusOr<int64_t> DurationMicros(const google::protobuf::Duration& d, absl::string_view field,
                                       absl::string_view leaf) {
  if (const char* problem = NonNegativeDurationProblem(d)) {
    return InvalidField(field, leaf, absl::StrCat(problem, ", got ", DurationText(d)));
  }
  const int64_t s = d.seconds();
  const int32_t n = d.nanos();
  if (s > kMaxPeriodMicros / 1000000) {
    return InvalidField(field, leaf, "must be at most 100 years");
  }
  return s * 1000000 + n / 1000;
}

namespace {

v1::DenyReason ReasonToProto(DenyReason r) {
  switch (r) {
    case DenyReason::kNone:
      return v1::DENY_REASON_UNSPECIFIED;
    case DenyReason::kInsufficientTokens:
      return v1::INSUFFICIENT_TOKENS;
    case DenyReason::kCountExceedsCapacity:
      return v1::COUNT_EXCEEDS_CAPACITY;
    case DenyReason::kMaxReservedExceeded:
      return v1::MAX_RESERVED_EXCEEDED;
    case DenyReason::kBlocked:
      return v1::BLOCKED;
    case DenyReason::kNoFreeSlots:
      return v1::NO_FREE_SLOTS;
  }
  return v1::DENY_REASON_UNSPECIFIED;
}

}  // namespace

absl::StatusOr<LimitConfig> ConfigFromProto(const v1::LimitConfig& p, absl::string_view prefix) {
  LimitConfig c;
  switch (p.kind()) {
    case v1::TOKEN_BUCKET:
      c.kind = LimitKind::kTokenBucket;
      break;
    case v1::FIXED_WINDOW:
      c.kind = LimitKind::kFixedWindow;
      break;
    case v1::CONCURRENCY:
      c.kind = LimitKind::kConcurrency;
      break;
    case v1::KIND_UNSPECIFIED:
      return InvalidField(prefix, "kind", "required (TOKEN_BUCKET, FIXED_WINDOW or CONCURRENCY)");
    default:
      return InvalidField(prefix, "kind", absl::StrCat("unknown kind ", p.kind()));
  }
  c.rate = p.rate();
  if (p.has_period()) {
    absl::StatusOr<int64_t> period = DurationMicros(p.period(), prefix, "period");
    if (!period.ok()) return period.status();
    c.period_us = *period;
  } else if (c.kind != LimitKind::kConcurrency) {
    return InvalidField(prefix, "period", "required");
  }
  if (p.has_capacity()) c.capacity = p.capacity();
  if (p.has_max_reserved()) c.max_reserved = p.max_reserved();
  if (p.has_start()) {
    absl::StatusOr<int64_t> start = DurationMicros(p.start(), prefix, "start");
    if (!start.ok()) return start.status();
    c.start_us = *start;
  }
  c.jitter = p.jitter();
  if (p.has_lease_ttl()) {
    absl::StatusOr<int64_t> ttl = DurationMicros(p.lease_ttl(), prefix, "lease_ttl");
    if (!ttl.ok()) return ttl.status();
    if (*ttl <= 0) {
      return InvalidField(
          prefix, "lease_ttl",
          absl::StrCat("must be between 1ms and max_lease_ttl, got ", DurationText(p.lease_ttl())));
    }
    c.lease_ttl_us = *ttl;
  }
  if (p.has_max_lease_ttl()) {
    absl::StatusOr<int64_t> ttl = DurationMicros(p.max_lease_ttl(), prefix, "max_lease_ttl");
    if (!ttl.ok()) return ttl.status();
    if (*ttl <= 0) {
      return InvalidField(
          prefix, "max_lease_ttl",
          absl::StrCat("must be between 1ms and 1 day, got ", DurationText(p.max_lease_ttl())));
    }
    c.max_lease_ttl_us = *ttl;
  }
  FillLeaseTtlDefaults(c);
  if (absl::Status s = ValidateLimitConfig(c, prefix); !s.ok()) return s;
  return c;
}

namespace {

// A limit as a request names it: a v1::LimitRequest's fields, or a Release's own.
struct LimitFields {
  absl::string_view name;
  absl::string_view key;
  std::optional<double> count;              // unset: 1
  const v1::LimitConfig* config = nullptr;  // unset: none
};

LimitFields FieldsOf(const v1::LimitRequest& l) {
  LimitFields f{l.name(), l.key(), std::nullopt, l.has_config() ? &l.config() : nullptr};
  if (l.has_count()) f.count = l.count();
  return f;
}

// One limit of a request, resolved and validated; errors name `field` ("limits[2]") and its
// subfields. `earlier`: the limits of the request before it.
absl::StatusOr<LimitRequest> ResolveLimit(const LimitFields& l, absl::string_view field,
                                          absl::Span<const LimitRequest> earlier,
                                          const LimitSet& limits, InlineLimits inline_limits) {
  if (absl::Status s = ValidateName(l.name, field, ".name"); !s.ok()) return s;
  if (absl::Status s = ValidateKey(l.key, field, ".key"); !s.ok()) return s;
  LimitRequest r;
  r.name = std::string(l.name);
  r.key = std::string(l.key);
  if (l.count.has_value()) {
    if (absl::Status s = ValidateCount(*l.count, field, ".count"); !s.ok()) {
      return s;
    }
    r.count = *l.count;
  }
  if (const LimitConfig* defined = limits.Find(l.name)) {
    if (l.config != nullptr) {
      return InvalidField(absl::StrCat(field, ".config"),
                          absl::StrCat("limit \"", l.name,
                                       "\" is defined by the server; an inline config is not "
                                       "allowed for it"));
    }
    r.config = *defined;
    r.source = LimitSource::kDefined;
  } else if (l.config != nullptr) {
    if (inline_limits == InlineLimits::kDeny) {
      return absl::PermissionDeniedError(
          absl::StrCat(field,
                       ".config: inline limits are disabled on this server "
                       "(--inline_limits=deny); use a limit of its limits file"));
    }
    r.source = LimitSource::kInline;
    // Unnamed (the first, allocation-free pass of ResolveRequest): subfields named bare.
    const std::string prefix = field.empty() ? std::string() : absl::StrCat(field, ".config.");
    absl::StatusOr<LimitConfig> c = ConfigFromProto(*l.config, prefix);
    if (!c.ok()) return c.status();
    r.config = *c;
    // One state decided under two configs in one transaction would refill at one rate and be
    // judged against another's capacity: a request must give each state one config.
    for (size_t j = 0; j < earlier.size(); ++j) {
      const LimitRequest& e = earlier[j];
      if (e.source == r.source && e.name == r.name && e.key == r.key && !(e.config == r.config)) {
        return InvalidField(absl::StrCat(field, ".config"),
                            absl::StrCat("limits[", j, "] names the same limit \"", r.name,
                                         "\" and key with a different config"));
      }
    }
  } else {
    return absl::NotFoundError(absl::StrCat(field, ".name: limit \"", l.name,
                                            "\" is not defined and has no inline config"));
  }
  return r;
}

}  // namespace

absl::StatusOr<LimitRequests> ResolveRequest(const v1::RateLimitRequest& request,
                                             const LimitSet& limits, InlineLimits inline_limits) {
  return ResolveLimits(request.limits(), limits, inline_limits);
}

absl::StatusOr<LimitRequests> ResolveLimits(
    const google::protobuf::RepeatedPtrField<v1::LimitRequest>& request, const LimitSet& limits,
    InlineLimits inline_limits) {
  const int n = request.size();
  if (n == 0) return InvalidField("limits", "at least one limit is required");
  if (n > kMaxLimitsPerRequest) {
    return InvalidField(
        "limits", absl::StrCat("at most ", kMaxLimitsPerRequest, " limits per request, got ", n));
  }
  LimitRequests out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) {
    const v1::LimitRequest& l = request.Get(i);
    // Resolved with an empty field name, whose subfield names (".config.rate") stay within a
    // string's inline buffer: a valid limit, the common case, costs no allocation for names it
    // never shows. Resolving is a pure function of its arguments, so a limit that fails is
    // resolved again with its real name ("limits[2]") for the error.
    const LimitFields fields = FieldsOf(l);
    absl::StatusOr<LimitRequest> r = ResolveLimit(fields, "", out, limits, inline_limits);
    if (!r.ok()) {
      r = ResolveLimit(fields, absl::StrCat("limits[", i, "]"), out, limits, inline_limits);
      if (!r.ok()) return r.status();
    }
    out.push_back(*std::move(r));
  }
  return out;
}

absl::StatusOr<LimitRequest> ResolveNamedLimit(absl::string_view name, absl::string_view key,
                                               const v1::LimitConfig* config,
                                               const LimitSet& defined,
                                               InlineLimits inline_limits) {
  const LimitFields fields{name, key, std::nullopt, config};
  absl::StatusOr<LimitRequest> r = ResolveLimit(fields, "", {}, defined, inline_limits);
  if (r.ok()) return r;
  // Resolved again as a request's first limit for the error, whose field names then lose their
  // "limits[0]." ("limits[0].key: ..." -> "key: ...").
  r = ResolveLimit(fields, "limits[0]", {}, defined, inline_limits);
  if (r.ok()) return r;
  absl::string_view message = r.status().message();
  constexpr absl::string_view kPrefix = "limits[0].";
  if (absl::StartsWith(message, kPrefix)) message.remove_prefix(kPrefix.size());
  return absl::Status(r.status().code(), message);
}

absl::StatusOr<std::vector<BatchEntryPlan>> ResolveBatch(const v1::BatchRequest& request,
                                                         const LimitSet& limits,
                                                         InlineLimits inline_limits) {
  const int n = request.entries_size();
  if (n == 0) return InvalidField("entries", "at least one entry is required");
  if (n > kMaxBatchEntries) {
    return InvalidField("entries",
                        absl::StrCat("at most ", kMaxBatchEntries, " entries per batch, got ", n));
  }
  int64_t total = 0;
  for (const v1::BatchEntry& e : request.entries()) total += e.request().limits_size();
  if (total > kMaxBatchLimits) {
    return InvalidField("entries", absl::StrCat("at most ", kMaxBatchLimits,
                                                " limits over all entries, got ", total));
  }
  std::vector<BatchEntryPlan> plans(n);
  for (int i = 0; i < n; ++i) {
    const v1::BatchEntry& e = request.entries(i);
    BatchEntryPlan& plan = plans[i];
    // Built for an error only.
    auto field = [i] { return absl::StrCat("entries[", i, "]"); };
    switch (e.method()) {
      case v1::BatchEntry::CONSUME:
        plan.mode = Mode::kConsume;
        break;
      case v1::BatchEntry::CHECK:
        plan.mode = Mode::kCheck;
        break;
      case v1::BatchEntry::RESERVE:
        plan.mode = Mode::kReserve;
        break;
      default:
        plan.error = InvalidField(absl::StrCat(field(), ".method"),
                                  absl::StrCat("unknown method ", static_cast<int>(e.method())));
        continue;
    }
    if (!e.request().request_id().empty()) {
      plan.error = InvalidField(absl::StrCat(field(), ".request_id"),
                                "not allowed in a batch (send an idempotent request by itself "
                                "with Consume or Reserve)");
      continue;
    }
    absl::StatusOr<LimitRequests> resolved = ResolveRequest(e.request(), limits, inline_limits);
    if (!resolved.ok()) {
      // Every error of ResolveRequest starts with the field it names.
      plan.error = absl::Status(resolved.status().code(),
                                absl::StrCat(field(), ".", resolved.status().message()));
      continue;
    }
    // A CHECK reads slots as Check does; a CONSUME or RESERVE cannot take them.
    if (absl::Status s = plan.mode == Mode::kCheck ? CheckSlotCounts(*resolved)
                                                   : RefuseConcurrencyLimits(*resolved, "a Batch");
        !s.ok()) {
      plan.error = absl::Status(s.code(), absl::StrCat(field(), ".", s.message()));
      continue;
    }
    plan.limits = *std::move(resolved);
    plan.receipts = !e.request().omit_receipts();
  }
  return plans;
}

absl::Status RefuseConcurrencyLimits(absl::Span<const LimitRequest> limits,
                                     absl::string_view where) {
  for (size_t i = 0; i < limits.size(); ++i) {
    if (limits[i].config.kind != LimitKind::kConcurrency) continue;
    return InvalidField(
        absl::StrCat("limits[", i, "].name"),
        absl::StrCat("limit \"", limits[i].name, "\" is a concurrency limit: ", where,
                     " cannot take its slots (take them with Acquire, see "
                     "them with Check)"));
  }
  return absl::OkStatus();
}

bool NamesConcurrencyLimit(absl::Span<const LimitRequest> limits) {
  return std::any_of(limits.begin(), limits.end(), [](const LimitRequest& l) {
    return l.config.kind == LimitKind::kConcurrency;
  });
}

absl::Status CheckSlotCounts(absl::Span<const LimitRequest> limits) {
  for (size_t i = 0; i < limits.size(); ++i) {
    const LimitRequest& l = limits[i];
    if (l.config.kind != LimitKind::kConcurrency) continue;
    if (!IsSlotCount(l.count)) {
      return InvalidField(
          absl::StrCat("limits[", i, "].count"),
          absl::StrFormat("must be a whole number of slots, 1..1e9, got %.15g", l.count));
    }
  }
  return absl::OkStatus();
}

void EntryErrorToProto(const absl::Status& error, v1::BatchResult* result) {
  v1::EntryError* e = result->mutable_error();
  e->set_code(static_cast<int32_t>(error.code()));
  e->set_message(std::string(error.message()));
}

namespace {

template <typename Response>
void FillVerdict(const Verdict& v, absl::Span<const LimitRequest> limits, Response* response) {
  response->set_allowed(v.allowed);
  response->set_denied_by(v.denied_by);
  for (size_t i = 0; i < limits.size(); ++i) {
    const Decision& d = v.decisions[i];
    v1::LimitResult* r = response->add_results();
    r->set_name(limits[i].name);
    r->set_key(limits[i].key);
    r->set_allowed(d.allowed);
    r->set_value(d.value);
    r->set_reason(ReasonToProto(d.reason));
    r->set_capacity(limits[i].config.EffectiveCapacity());
    if (!limits[i].override_target.empty()) r->set_override(limits[i].override_target);
    if (d.retry_at_us) {
      SetTimestamp(*d.retry_at_us, r->mutable_retry_at());
      SetDuration(std::max<int64_t>(0, *d.retry_at_us - v.now_us), r->mutable_retry_after());
    }
  }
  if (v.denied_by >= 0) response->set_reason(ReasonToProto(v.decisions[v.denied_by].reason));
  if (v.retry_at_us) {
    SetTimestamp(*v.retry_at_us, response->mutable_retry_at());
    SetDuration(std::max<int64_t>(0, *v.retry_at_us - v.now_us), response->mutable_retry_after());
  }
}

}  // namespace

void VerdictToProto(const Verdict& v, absl::Span<const LimitRequest> limits,
                    v1::RateLimitResponse* response) {
  FillVerdict(v, limits, response);
}

void VerdictToProto(const Verdict& v, absl::Span<const LimitRequest> limits,
                    v1::AcquireResponse* response) {
  FillVerdict(v, limits, response);
}

void FailedOpenToProto(absl::Span<const LimitRequest> limits, v1::RateLimitResponse* response) {
  response->set_allowed(true);
  response->set_failed_open(true);
  response->set_denied_by(-1);
  for (const LimitRequest& l : limits) {
    v1::LimitResult* r = response->add_results();
    r->set_name(l.name);
    r->set_key(l.key);
    r->set_allowed(true);
    r->set_capacity(l.config.EffectiveCapacity());
  }
}

absl::StatusOr<ResetTarget> ResetFromProto(const v1::ResetRequest& request) {
  ResetTarget t;
  switch (request.source()) {
    case v1::LIMITS_FILE:
      t.source = LimitSource::kDefined;
      break;
    case v1::INLINE:
      t.source = LimitSource::kInline;
      break;
    case v1::ENVOY:
      t.source = LimitSource::kEnvoy;
      break;
    default:
      return InvalidField("source", absl::StrCat("unknown source ", request.source()));
  }
  if (absl::Status s = ValidateName(request.name(), "name"); !s.ok()) return s;
  if (t.source == LimitSource::kEnvoy) {
    if (request.envoy_path_size() == 0) {
      return InvalidField("envoy_path", "required for source ENVOY (the rule's descriptor path)");
    }
    std::string display = request.name();
    for (int i = 0; i < request.envoy_path_size(); ++i) {
      const v1::EnvoyPathEntry& e = request.envoy_path(i);
      if (e.key().empty()) {
        return InvalidField(absl::StrCat("envoy_path[", i, "].key"), "must not be empty");
      }
      if (request.envoy_override() && !e.value().empty()) {
        return InvalidField(absl::StrCat("envoy_path[", i, "].value"),
                            "must be empty for an override (its path lists keys only)");
      }
      t.envoy_path.emplace_back(e.key(), e.value());
      absl::StrAppend(&display, ".", e.key(), e.value().empty() ? "" : "_", e.value());
    }
    t.envoy_domain = request.name();
    t.envoy_override = request.envoy_override();
    t.display_name = absl::StrCat(display, request.envoy_override() ? "#override" : "");
  } else {
    if (request.envoy_path_size() > 0) return InvalidField("envoy_path", "only applies to ENVOY");
    if (request.envoy_override()) return InvalidField("envoy_override", "only applies to ENVOY");
    t.name = request.name();
    t.display_name = t.name;
  }
  t.all_keys = request.all_keys();
  if (t.all_keys) {
    if (!request.key().empty()) return InvalidField("key", "must be empty when all_keys is set");
    return t;
  }
  if (absl::Status s = ValidateKey(request.key(), "key"); !s.ok()) return s;
  t.key = request.key();
  return t;
}

}  // namespace ratelimit
