#include "client/cpp/override_command.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cpp/cli_util.h"
#include "client/cpp/proto_time.h"

namespace ratelimit {
namespace {

// "api key k", or for an Envoy rule "envoy web/user key k".
std::string TargetText(const v1::OverrideTarget& t) {
  std::string name = t.name();
  if (t.source() == v1::ENVOY) {
    name = absl::StrCat("envoy ", t.name());
    for (const v1::EnvoyPathEntry& e : t.envoy_path()) {
      absl::StrAppend(&name, "/", e.key(), e.value().empty() ? "" : "=", e.value());
    }
  }
  return t.key_pattern().empty() ? absl::StrCat(name, " key ", t.key())
                                 : absl::StrCat(name, " pattern ", t.key_pattern());
}

std::string EffectText(const v1::Override& o) {
  if (o.unlimited()) return "unlimited";
  if (o.blocked()) return "blocked";
  std::vector<std::string> fields;
  const v1::OverrideLimit& l = o.limit();
  if (l.has_rate()) fields.push_back(absl::StrCat("rate=", l.rate()));
  if (l.has_period()) {
    fields.push_back(
        absl::StrCat("period=", absl::FormatDuration(absl::Seconds(l.period().seconds()) +
                                                     absl::Nanoseconds(l.period().nanos()))));
  }
  if (l.has_capacity()) fields.push_back(absl::StrCat("capacity=", l.capacity()));
  if (l.has_max_reserved()) fields.push_back(absl::StrCat("max_reserved=", l.max_reserved()));
  return absl::StrJoin(fields, " ");
}

}  // namespace

v1::OverrideTarget OverrideTargetOf(const OverrideFlags& flags) {
  v1::OverrideTarget t;
  t.set_source(flags.source);
  t.set_name(flags.name);
  for (const std::string& level : flags.envoy_path) {
    v1::EnvoyPathEntry* e = t.add_envoy_path();
    const size_t eq = level.find('=');
    e->set_key(level.substr(0, eq));
    if (eq != std::string::npos) e->set_value(level.substr(eq + 1));
  }
  t.set_key(flags.key);
  t.set_key_pattern(flags.key_pattern);
  return t;
}

absl::StatusOr<v1::SetOverrideRequest> SetOverrideOf(const OverrideFlags& flags, absl::Time now) {
  v1::SetOverrideRequest r;
  v1::Override* o = r.mutable_override();
  *o->mutable_target() = OverrideTargetOf(flags);
  const bool limit = flags.rate || !flags.period.empty() || flags.capacity || flags.max_reserved;
  if (int{limit} + int{flags.unlimited} + int{flags.blocked} > 1) {
    return absl::InvalidArgumentError(
        "--unlimited, --blocked and the limit flags (--rate, --period, --capacity, "
        "--max_reserved) exclude each other");
  }
  if (flags.unlimited) {
    o->set_unlimited(true);
  } else if (flags.blocked) {
    o->set_blocked(true);
  } else {
    v1::OverrideLimit* l = o->mutable_limit();  // empty: the server names what is missing
    if (flags.rate) l->set_rate(*flags.rate);
    if (!flags.period.empty()) {
      absl::StatusOr<absl::Duration> period = ParseDurationFlag("--period", flags.period);
      if (!period.ok()) return period.status();
      SetProtoDuration(*period, l->mutable_period());
    }
    if (flags.capacity) l->set_capacity(*flags.capacity);
    if (flags.max_reserved) l->set_max_reserved(*flags.max_reserved);
  }
  if (!flags.expires_in.empty()) {
    absl::StatusOr<absl::Duration> in = ParseDurationFlag("--expires_in", flags.expires_in);
    if (!in.ok()) return in.status();
    const absl::Time at = now + *in;
    o->mutable_expires_at()->set_seconds(absl::ToUnixSeconds(at));
    o->mutable_expires_at()->set_nanos(
        static_cast<int32_t>((absl::ToUnixNanos(at) % 1000000000 + 1000000000) % 1000000000));
  }
  o->set_reason(flags.reason);
  r.set_actor(flags.actor);
  return r;
}

std::string FormatOverride(const v1::Override& o) {
  std::string out = absl::StrCat(TargetText(o.target()), ": ", EffectText(o));
  if (o.has_expires_at()) {
    absl::StrAppend(&out, o.expired() ? " expired " : " until ", Rfc3339(o.expires_at()));
  }
  if (o.inert()) {
    absl::StrAppend(&out, o.target().source() == v1::ENVOY
                              ? " (inert: no such rule in the Envoy configuration)"
                              : " (inert: no such limit in the limits file)");
  }
  if (!o.set_by().empty()) absl::StrAppend(&out, ", by ", o.set_by());
  if (!o.reason().empty()) absl::StrAppend(&out, ": ", o.reason());
  return out + "\n";
}

std::string FormatAuditEntry(const v1::OverrideAuditEntry& e) {
  const v1::Override& o = e.has_after() ? e.after() : e.before();
  std::string out = absl::StrCat("#", e.sequence(), " ", Rfc3339(e.at()), " ", e.action(), " ",
                                 TargetText(o.target()));
  if (e.has_after()) absl::StrAppend(&out, " ", EffectText(e.after()));
  absl::StrAppend(&out, " by ", e.authorized_by());
  if (!e.actor().empty()) absl::StrAppend(&out, " (", e.actor(), ")");
  if (!e.reason().empty()) absl::StrAppend(&out, ": ", e.reason());
  return out + "\n";
}

}  // namespace ratelimit
