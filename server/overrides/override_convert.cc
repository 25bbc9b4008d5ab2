#include "server/overrides/override_convert.h"

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/envoy/envoy_config.h"
#include "server/envoy/envoy_plan.h"
#include "server/serving/grpc_convert.h"
#include "server/v1/convert.h"
#include "storage/overrides/override_codec.h"
#include "storage/status_util.h"

namespace ratelimit {
namespace {

constexpr int64_t kMaxTimestampSeconds = 253402300799;  // 9999-12-31T23:59:59Z
// An Envoy rule's descriptor path: at most this many levels, and bytes with the domain.
constexpr int kMaxEnvoyPathLevels = 16;
constexpr size_t kMaxEnvoyPathBytes = 2048;

void ActionToProto(const OverrideAction& a, v1::Override* out) {
  switch (a.effect) {
    case OverrideAction::Effect::kUnlimited:
      out->set_unlimited(true);
      return;
    case OverrideAction::Effect::kBlocked:
      out->set_blocked(true);
      return;
    case OverrideAction::Effect::kLimit:
      break;
  }
  v1::OverrideLimit* l = out->mutable_limit();
  if (a.rate) l->set_rate(*a.rate);
  if (a.period_us) {
    l->mutable_period()->set_seconds(*a.period_us / 1000000);
    l->mutable_period()->set_nanos(static_cast<int32_t>(*a.period_us % 1000000) * 1000);
  }
  if (a.capacity) l->set_capacity(*a.capacity);
  if (a.max_reserved) l->set_max_reserved(*a.max_reserved);
}

// The state name of the Envoy rule `t` names: its domain (t.name) and descriptor path.
absl::StatusOr<std::string> EnvoyRuleName(const v1::OverrideTarget& t, absl::string_view field) {
  const std::string path_field = absl::StrCat(field, ".envoy_path");
  if (t.envoy_path_size() == 0) {
    return InvalidField(path_field, "required for source ENVOY (the rule's descriptor path)");
  }
  if (t.envoy_path_size() > kMaxEnvoyPathLevels) {
    return InvalidField(path_field, absl::StrCat("at most ", kMaxEnvoyPathLevels, " levels"));
  }
  std::vector<EnvoyEntry> entries;
  size_t bytes = t.name().size();
  for (int i = 0; i < t.envoy_path_size(); ++i) {
    const v1::EnvoyPathEntry& e = t.envoy_path(i);
    if (e.key().empty()) {
      return InvalidField(absl::StrCat(path_field, "[", i, "].key"), "required");
    }
    bytes += e.key().size() + e.value().size();
    entries.push_back(EnvoyEntry{e.key(), e.value()});
  }
  if (bytes > kMaxEnvoyPathBytes) {
    return InvalidField(path_field, absl::StrCat("the domain and path are ", bytes,
                                                 " bytes; at most ", kMaxEnvoyPathBytes));
  }
  return EnvoyStateName(t.name(), entries, /*override_limit=*/false);
}

}  // namespace

absl::Status ValidateText(absl::string_view text, size_t max_bytes, absl::string_view field) {
  if (text.size() > max_bytes) {
    return InvalidField(field,
                        absl::StrCat("must be at most ", max_bytes, " bytes, got ", text.size()));
  }
  return absl::OkStatus();
}

absl::StatusOr<OverrideTarget> TargetFromProto(const v1::OverrideTarget& t,
                                               absl::string_view field) {
  OverrideTarget out;
  switch (t.source()) {
    case v1::LIMITS_FILE:
      out.source = LimitSource::kDefined;
      break;
    case v1::ENVOY:
      out.source = LimitSource::kEnvoy;
      break;
    case v1::INLINE:
      return InvalidField(absl::StrCat(field, ".source"),
                          "inline limits have no configuration to override (LIMITS_FILE or "
                          "ENVOY)");
    default:
      return InvalidField(absl::StrCat(field, ".source"),
                          absl::StrCat("unknown source ", static_cast<int>(t.source())));
  }
  if (absl::Status s = ValidateName(t.name(), field, ".name"); !s.ok()) return s;
  out.name = t.name();
  if (out.source == LimitSource::kEnvoy) {
    absl::StatusOr<std::string> rule = EnvoyRuleName(t, field);
    if (!rule.ok()) return rule.status();
    out.name = *std::move(rule);
  } else if (t.envoy_path_size() > 0) {
    return InvalidField(absl::StrCat(field, ".envoy_path"), "only for source ENVOY");
  }
  if (!t.key().empty() && !t.key_pattern().empty()) {
    return InvalidField(absl::StrCat(field, ".key_pattern"),
                        "set either key or key_pattern, not both");
  }
  if (!t.key_pattern().empty()) {
    if (absl::Status s = ValidatePattern(t.key_pattern(), absl::StrCat(field, ".key_pattern"));
        !s.ok()) {
      return s;
    }
    out.key = t.key_pattern();
    out.pattern = true;
    return out;
  }
  if (t.key().empty()) {
    return InvalidField(absl::StrCat(field, ".key"), "one of key and key_pattern is required");
  }
  if (absl::Status s = ValidateKey(t.key(), field, ".key"); !s.ok()) return s;
  out.key = t.key();
  return out;
}

absl::StatusOr<Override> OverrideFromProto(const v1::SetOverrideRequest& request,
                                           const OverridableLimits& limits, int64_t now_us) {
  if (!request.has_override()) return InvalidField("override", "required");
  const v1::Override& p = request.override();
  if (!p.has_target()) return InvalidField("override.target", "required");
  absl::StatusOr<OverrideTarget> target = TargetFromProto(p.target(), "override.target");
  if (!target.ok()) return target.status();
  // A key no descriptor can make is refused here, not in TargetFromProto, so that one stored
  // before this check can still be read and deleted.
  if (target->source == LimitSource::kEnvoy && !target->pattern) {
    if (absl::Status s =
            ValidateEnvoyStateKey(target->key, p.target().envoy_path_size(), "override.target.key");
        !s.ok()) {
      return s;
    }
  }
  Override o;
  o.target = *std::move(target);
  switch (p.effect_case()) {
    case v1::Override::kUnlimited:
      if (!p.unlimited()) return InvalidField("override.unlimited", "must be true when set");
      o.action.effect = OverrideAction::Effect::kUnlimited;
      break;
    case v1::Override::kBlocked:
      if (!p.blocked()) return InvalidField("override.blocked", "must be true when set");
      o.action.effect = OverrideAction::Effect::kBlocked;
      break;
    case v1::Override::kLimit: {
      const v1::OverrideLimit& l = p.limit();
      if (l.has_rate()) o.action.rate = l.rate();
      if (l.has_period()) {
        absl::StatusOr<int64_t> period = DurationMicros(l.period(), "override.limit.period", "");
        if (!period.ok()) return period.status();
        o.action.period_us = *period;
      }
      if (l.has_capacity()) o.action.capacity = l.capacity();
      if (l.has_max_reserved()) o.action.max_reserved = l.max_reserved();
      break;
    }
    case v1::Override::EFFECT_NOT_SET:
      return InvalidField("override.effect", "one of limit, unlimited and blocked is required");
  }
  if (p.has_expires_at()) {
    const google::protobuf::Timestamp& t = p.expires_at();
    if (t.seconds() < 0 || t.seconds() > kMaxTimestampSeconds || t.nanos() < 0 ||
        t.nanos() >= 1000000000) {
      return InvalidField("override.expires_at", "is not a valid google.protobuf.Timestamp");
    }
    const int64_t at = t.seconds() * 1000000 + t.nanos() / 1000;
    if (at <= now_us) return InvalidField("override.expires_at", "must be in the future");
    if (at - now_us > kMaxPeriodMicros) {
      return InvalidField("override.expires_at", "must be at most 100 years ahead");
    }
    o.expires_at_us = at;
  }
  if (absl::Status s = ValidateText(p.reason(), kMaxOverrideReasonBytes, "override.reason");
      !s.ok()) {
    return s;
  }
  o.reason = p.reason();
  if (absl::Status s = ValidateText(request.actor(), kMaxOverrideActorBytes, "actor"); !s.ok()) {
    return s;
  }
  // Every field is well formed: now the limit it adjusts.
  if (absl::Status s = limits.RequireDefined(o.target, "override.target"); !s.ok()) return s;
  if (absl::Status s =
          CheckAction(*limits.Find(o.target.source, o.target.name), o.action, "override.");
      !s.ok()) {
    return s;
  }
  return o;
}

void OverrideToProto(const Override& o, const OverridableLimits& limits, int64_t now_us,
                     v1::Override* out) {
  v1::OverrideTarget* t = out->mutable_target();
  if (o.target.source == LimitSource::kEnvoy) {
    t->set_source(v1::ENVOY);
    if (std::optional<EnvoyStatePath> rule = ParseEnvoyStateName(o.target.name)) {
      t->set_name(rule->domain);
      for (const auto& [key, value] : rule->path) {
        v1::EnvoyPathEntry* e = t->add_envoy_path();
        e->set_key(key);
        e->set_value(value);
      }
    }
  } else {
    t->set_source(v1::LIMITS_FILE);
    t->set_name(o.target.name);
  }
  if (o.target.pattern) {
    t->set_key_pattern(o.target.key);
  } else {
    t->set_key(o.target.key);
  }
  ActionToProto(o.action, out);
  if (o.expires_at_us) SetTimestamp(*o.expires_at_us, out->mutable_expires_at());
  out->set_reason(o.reason);
  out->set_set_by(o.set_by);
  SetTimestamp(o.set_at_us, out->mutable_set_at());
  out->set_expired(o.expires_at_us && *o.expires_at_us <= now_us);
  const std::optional<LimitConfig> base = limits.Find(o.target.source, o.target.name);
  out->set_inert(!base || !CheckAction(*base, o.action, "").ok());
}

void AuditEntryToProto(const OverrideAuditEntry& e, const OverridableLimits& limits, int64_t now_us,
                       v1::OverrideAuditEntry* out) {
  out->set_sequence(e.sequence);
  SetTimestamp(e.at_us, out->mutable_at());
  out->set_action(e.action);
  out->set_authorized_by(e.authorized_by);
  out->set_actor(e.actor);
  out->set_peer(e.peer);
  out->set_reason(e.reason);
  if (e.before) OverrideToProto(*e.before, limits, now_us, out->mutable_before());
  if (e.after) OverrideToProto(*e.after, limits, now_us, out->mutable_after());
}

absl::StatusOr<size_t> PageSize(int32_t page_size, absl::string_view field) {
  if (page_size == 0) return size_t{100};
  if (page_size < 0 || page_size > 1000) {
    return InvalidField(field, absl::StrCat("must be 0 (100) or 1..1000, got ", page_size));
  }
  return static_cast<size_t>(page_size);
}

std::string OverridePageToken(const OverrideTarget& last) {
  return absl::WebSafeBase64Escape(EncodeOverrideKey(last));
}

absl::StatusOr<std::string> OverridePageStart(absl::string_view token) {
  std::string key;
  if (!absl::WebSafeBase64Unescape(token, &key) || key.rfind(kOverrideKeyPrefix, 0) != 0) {
    return InvalidField("page_token", "is not a token of ListOverrides");
  }
  return key;
}

std::string AuditPageToken(uint64_t last_sequence) { return absl::StrCat(last_sequence); }

absl::StatusOr<uint64_t> AuditPageStart(absl::string_view token) {
  uint64_t sequence = 0;
  if (!absl::SimpleAtoi(token, &sequence) || sequence == 0) {
    return InvalidField("page_token", "is not a token of ListOverrideAudit");
  }
  return sequence;
}

}  // namespace ratelimit
