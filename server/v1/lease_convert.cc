#include "server/v1/lease_convert.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "server/serving/grpc_convert.h"
#include "storage/key_hash.h"
#include "storage/leases/lease_id.h"
#include "storage/status_util.h"

namespace ratelimit {
namespace {

absl::Status CheckBytes(absl::string_view value, size_t max, absl::string_view field) {
  if (value.size() > max) {
    return InvalidField(field, absl::StrCat("must be at most ", max, " bytes, got ", value.size()));
  }
  return absl::OkStatus();
}

// Free text shown to operators (ListLeases, the CLI): no control characters, which a terminal
// would act on.
absl::Status CheckPrintable(absl::string_view value, absl::string_view field) {
  if (ContainsControlCharacter(value)) {
    return InvalidField(field, "must not contain control characters");
  }
  return absl::OkStatus();
}

// A TTL asked for: within 1 ms .. the limit's max_lease_ttl; unset: the limit's lease_ttl.
absl::StatusOr<int64_t> TtlFromProto(bool has_ttl, const google::protobuf::Duration& ttl,
                                     const LimitConfig& config, absl::string_view field) {
  if (!has_ttl) return config.lease_ttl_us;
  const absl::Status out_of_range = InvalidField(
      field, absl::StrCat("must be between 1ms and the limit's max_lease_ttl (",
                          absl::FormatDuration(absl::Microseconds(config.max_lease_ttl_us)),
                          "), got ", DurationText(ttl)));
  // A well-formed duration past the bound is out of the range, whatever its size (not "at most
  // 100 years", the bound of every duration).
  if (ttl.seconds() > config.max_lease_ttl_us / 1000000 && !DurationNanosMalformed(ttl)) {
    return out_of_range;
  }
  absl::StatusOr<int64_t> us = DurationMicros(ttl, field, "");
  if (!us.ok()) return us.status();
  if (*us < kMinLeaseTtlMicros || *us > config.max_lease_ttl_us) return out_of_range;
  return *us;
}

absl::StatusOr<LeaseId> LeaseIdFromProto(absl::string_view id) {
  if (id.empty()) return InvalidField("lease_id", "required (Lease.id from Acquire)");
  const std::optional<LeaseId> parsed = LeaseId::Parse(id);
  if (!parsed) {
    return InvalidField("lease_id", "must be 32 lowercase hex digits, not all zeros (Lease.id)");
  }
  return *parsed;
}

// The concurrency key a Release, Extend or ListLeases names: resolved as a one-limit request
// (limits file, or the inline `config`), which must be a concurrency limit. Errors name the
// request's own fields (`name`, `key`, `config.capacity`).
absl::StatusOr<LeaseOp> TargetFromProto(absl::string_view name, absl::string_view key,
                                        bool has_config, const v1::LimitConfig& config,
                                        const LimitSet& defined, InlineLimits inline_limits) {
  absl::StatusOr<LimitRequest> resolved =
      ResolveNamedLimit(name, key, has_config ? &config : nullptr, defined, inline_limits);
  if (!resolved.ok()) return resolved.status();
  LimitRequest& r = *resolved;
  if (r.config.kind != LimitKind::kConcurrency) {
    return InvalidField("name", absl::StrCat("limit \"", r.name, "\" is not a concurrency limit"));
  }
  LeaseOp op;
  op.key = StateKey{std::move(r.name), std::move(r.key), r.source};
  op.config = r.config;
  return op;
}

}  // namespace

absl::Status AcquireFromProto(const v1::AcquireRequest& request, const LimitSet& defined,
                              InlineLimits inline_limits, LeaseId lease_id, AcquirePlan& plan) {
  absl::StatusOr<LimitRequests> resolved = ResolveLimits(request.limits(), defined, inline_limits);
  if (!resolved.ok()) return resolved.status();
  plan.limits = *std::move(resolved);
  int found = 0;
  for (size_t i = 0; i < plan.limits.size(); ++i) {
    const LimitRequest& l = plan.limits[i];
    if (l.config.kind != LimitKind::kConcurrency) continue;
    if (++found > 1) {
      return InvalidField(absl::StrCat("limits[", i, "].name"),
                          absl::StrCat("a second concurrency limit (limits[", plan.concurrency,
                                       "] is one): an Acquire takes the slots of exactly one"));
    }
    plan.concurrency = i;
  }
  if (absl::Status s = CheckSlotCounts(plan.limits); !s.ok()) return s;
  if (found == 0) {
    return InvalidField("limits",
                        "an Acquire needs exactly one concurrency limit (kind CONCURRENCY); use "
                        "Consume for rate limits alone");
  }
  if (absl::Status s = CheckBytes(request.request_id(), kMaxLeaseRequestIdBytes, "request_id");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckBytes(request.holder(), kMaxHolderBytes, "holder"); !s.ok()) return s;
  if (absl::Status s = CheckPrintable(request.holder(), "holder"); !s.ok()) return s;
  const LimitRequest& c = plan.limits[plan.concurrency];
  absl::StatusOr<int64_t> ttl = TtlFromProto(request.has_ttl(), request.ttl(), c.config, "ttl");
  if (!ttl.ok()) return ttl.status();
  LeaseOp& op = plan.lease;
  op.key = StateKey{c.name, c.key, c.source};
  op.config = c.config;
  op.action = LeaseAction::kAcquire;
  op.count = static_cast<int64_t>(c.count);
  op.ttl_us = *ttl;
  op.lease_id = lease_id;
  op.request_id = request.request_id();
  op.holder = request.holder();
  return absl::OkStatus();
}

absl::Status CheckSameAcquire(const LeaseOp& acquire, const Lease& replayed) {
  if (acquire.count == replayed.count && acquire.holder == replayed.holder) {
    return absl::OkStatus();
  }
  const std::string by =
      replayed.holder.empty() ? "no holder" : absl::StrCat("holder \"", replayed.holder, "\"");
  return InvalidField(
      "request_id",
      absl::StrCat("names an earlier acquire on this key of ", replayed.count, " slot(s) by ", by,
                   ": a retry must ask for the same count and holder (a new "
                   "acquire takes a new request_id)"));
}

absl::StatusOr<LeaseOp> ReleaseFromProto(const v1::ReleaseRequest& request, const LimitSet& defined,
                                         InlineLimits inline_limits) {
  absl::StatusOr<LeaseOp> op = TargetFromProto(request.name(), request.key(), request.has_config(),
                                               request.config(), defined, inline_limits);
  if (!op.ok()) return op.status();
  absl::StatusOr<LeaseId> id = LeaseIdFromProto(request.lease_id());
  if (!id.ok()) return id.status();
  op->action = LeaseAction::kRelease;
  op->lease_id = *id;
  return op;
}

absl::StatusOr<LeaseOp> ExtendFromProto(const v1::ExtendRequest& request, const LimitSet& defined,
                                        InlineLimits inline_limits) {
  absl::StatusOr<LeaseOp> op = TargetFromProto(request.name(), request.key(), request.has_config(),
                                               request.config(), defined, inline_limits);
  if (!op.ok()) return op.status();
  absl::StatusOr<LeaseId> id = LeaseIdFromProto(request.lease_id());
  if (!id.ok()) return id.status();
  absl::StatusOr<int64_t> ttl = TtlFromProto(request.has_ttl(), request.ttl(), op->config, "ttl");
  if (!ttl.ok()) return ttl.status();
  op->action = LeaseAction::kExtend;
  op->lease_id = *id;
  op->ttl_us = *ttl;
  return op;
}

namespace {

// The key a page token belongs to: 16 hex digits of its limit's name, key and source.
std::string KeyTag(const StateKey& key) {
  const uint64_t tag = StableKeyHash(key.name, key.key) ^ static_cast<uint64_t>(key.source);
  return absl::StrCat(absl::Hex(tag, absl::kZeroPad16));
}

// A page token: "<expires_at_us>.<acquired_at_us>.<id>.<key tag>", web-safe base64 (opaque to
// callers).
std::string PageToken(const StateKey& key, const Lease& l) {
  char id[LeaseId::kDigits];
  l.id.WriteDigits(id);
  return absl::WebSafeBase64Escape(absl::StrCat(l.expires_at_us, ".", l.acquired_at_us, ".",
                                                absl::string_view(id, sizeof(id)), ".",
                                                KeyTag(key)));
}

absl::Status ReadPage(const v1::ListLeasesRequest& request, LeaseOp& op) {
  if (request.page_size() < 0 || request.page_size() > kMaxLeasePageSize) {
    return InvalidField(
        "page_size", absl::StrCat("must be 0 (", kDefaultLeasePageSize, ") to ", kMaxLeasePageSize,
                                  ", got ", request.page_size()));
  }
  op.list_limit = request.page_size() > 0 ? request.page_size() : kDefaultLeasePageSize;
  if (request.page_token().empty()) return absl::OkStatus();
  const absl::Status not_a_token =
      InvalidField("page_token", "not a next_page_token of ListLeases");
  std::string text;
  if (!absl::WebSafeBase64Unescape(request.page_token(), &text)) return not_a_token;
  const std::vector<absl::string_view> parts = absl::StrSplit(text, '.');
  LeasePlace after;
  if (parts.size() != 4 || !absl::SimpleAtoi(parts[0], &after.expires_at_us) ||
      !absl::SimpleAtoi(parts[1], &after.acquired_at_us)) {
    return not_a_token;
  }
  const std::optional<LeaseId> id = LeaseId::Parse(parts[2]);
  if (!id) return not_a_token;
  if (parts[3] != KeyTag(op.key)) {
    return InvalidField("page_token",
                        "not a next_page_token of this key's leases (another key's or limit's, "
                        "or altered)");
  }
  after.id = *id;
  op.list_after = after;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LeaseOp> ListLeasesFromProto(const v1::ListLeasesRequest& request,
                                            const LimitSet& defined, InlineLimits inline_limits) {
  // A config names an inline limit, as in Release and Extend: with the default source too.
  const v1::LimitSource source =
      request.source() == v1::LIMITS_FILE && request.has_config() ? v1::INLINE : request.source();
  switch (source) {
    case v1::LIMITS_FILE:
      if (absl::Status s = ValidateName(request.name(), "name"); !s.ok()) return s;
      if (defined.Find(request.name()) == nullptr) {
        return absl::NotFoundError(
            absl::StrCat("name: no limit \"", request.name(), "\" in the limits file"));
      }
      break;
    case v1::INLINE:
      if (!request.has_config()) return InvalidField("config", "required for source INLINE");
      break;
    default:
      return InvalidField("source", "must be LIMITS_FILE or INLINE (concurrency limits)");
  }
  // Only an explicit INLINE source names the inline namespace whatever the limits file holds; a
  // config with the default source is refused for a name the file defines, as in Release.
  absl::StatusOr<LeaseOp> op =
      TargetFromProto(request.name(), request.key(), request.has_config(), request.config(),
                      request.source() == v1::INLINE ? LimitSet() : defined, inline_limits);
  if (!op.ok()) return op.status();
  op->action = LeaseAction::kList;
  if (absl::Status s = ReadPage(request, *op); !s.ok()) return s;
  return op;
}

Decision LeaseAsDecision(const LeaseDecision& lease) {
  Decision d;
  d.allowed = lease.allowed;
  d.reason = lease.reason;
  d.value = static_cast<double>(lease.free);
  d.retry_at_us = lease.allowed ? std::nullopt : lease.retry_at_us;
  return d;
}

namespace {

void LeaseToProto(const Lease& lease, absl::string_view name, absl::string_view key,
                  LimitSource source, v1::Lease* out) {
  char id[LeaseId::kDigits];
  lease.id.WriteDigits(id);
  out->set_id(id, sizeof(id));
  out->set_name(name.data(), name.size());
  out->set_key(key.data(), key.size());
  out->set_source(source == LimitSource::kInline ? v1::INLINE : v1::LIMITS_FILE);
  out->set_count(static_cast<uint64_t>(lease.count));
  SetTimestamp(lease.acquired_at_us, out->mutable_acquired_at());
  SetTimestamp(lease.expires_at_us, out->mutable_expires_at());
  out->set_holder(lease.holder);
}

}  // namespace

void LeaseToProto(const Lease& lease, const StateKey& key, v1::Lease* out) {
  LeaseToProto(lease, key.name, key.key, key.source, out);
}

void AcquireToProto(const AcquirePlan& plan, const LeaseOutcome& outcome,
                    v1::AcquireResponse* out) {
  // The decisions in request order: the store's rate decisions around the lease's.
  Outcome merged;
  merged.allowed = outcome.allowed;
  merged.now_us = outcome.now_us;
  size_t next_rate = 0;
  for (size_t i = 0; i < plan.limits.size(); ++i) {
    if (i == plan.concurrency) {
      merged.decisions.push_back(LeaseAsDecision(outcome.lease));
    } else if (next_rate < outcome.decisions.size()) {
      merged.decisions.push_back(outcome.decisions[next_rate++]);
    } else {
      // A replayed acquire decides no rate limit: report the limit as allowed, unchanged.
      Decision d;
      d.allowed = outcome.allowed;
      merged.decisions.push_back(d);
    }
  }
  VerdictToProto(VerdictOf(std::move(merged)), plan.limits, out);
  out->set_replayed(outcome.lease.replayed);
  if (outcome.allowed && outcome.lease.lease) {
    const LimitRequest& c = plan.limits[plan.concurrency];
    LeaseToProto(*outcome.lease.lease, c.name, c.key, c.source, out->mutable_lease());
  }
}

void ReleaseToProto(const LeaseDecision& decision, v1::ReleaseResponse* out) {
  out->set_state(decision.state == LeaseState::kReleased ? v1::RELEASED : v1::NOT_HELD);
  out->set_held(static_cast<uint64_t>(std::max<int64_t>(0, decision.held)));
}

void ExtendToProto(const LeaseOp& op, const LeaseDecision& decision, v1::ExtendResponse* out) {
  const bool held = decision.state == LeaseState::kHeld && decision.lease.has_value();
  out->set_state(held ? v1::HELD : v1::NOT_HELD);
  if (held) LeaseToProto(*decision.lease, op.key, out->mutable_lease());
}

void ListLeasesToProto(const LeaseOp& op, const LeaseDecision& decision,
                       v1::ListLeasesResponse* out) {
  out->set_held(static_cast<uint64_t>(std::max<int64_t>(0, decision.held)));
  out->set_capacity(static_cast<uint64_t>(op.config.EffectiveCapacity()));
  for (const Lease& l : decision.held_leases) LeaseToProto(l, op.key, out->add_leases());
  if (decision.more_listed && !decision.held_leases.empty()) {
    out->set_next_page_token(PageToken(op.key, decision.held_leases.back()));
  }
}

}  // namespace ratelimit
