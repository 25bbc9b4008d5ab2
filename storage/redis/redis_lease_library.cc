#include "storage/redis/redis_lease_library.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "storage/leases/apply_lease.h"
#include "storage/redis/redis_cross_slot.h"
#include "storage/redis/redis_function_library.h"

namespace ratelimit {
namespace {

using Type = redis::Reply::Type;

std::string IdentityOf(const StateKey& key) {
  std::string identity(1, static_cast<char>(key.source));
  absl::StrAppend(&identity, key.name.size(), ":", key.name, key.key);
  return identity;
}

// The state key's "prefix{tag}", the part that chooses the slot.
absl::string_view Braces(absl::string_view state_key, size_t prefix_size) {
  return state_key.substr(0, state_key.find('}', prefix_size) + 1);
}

absl::Status Malformed(absl::string_view what) {
  return absl::InternalError(absl::StrCat("FCALL ratelimit_lease: malformed reply (", what, ")"));
}

// A non-negative whole number the library printed.
bool ParseWhole(absl::string_view text, int64_t& out) {
  return absl::SimpleAtoi(text, &out) && out >= 0;
}

bool ReplyInteger(const redis::Reply& r, int64_t& out) {
  if (r.type != Type::kInteger) return false;
  out = r.integer;
  return true;
}

// "<id> <lease text>" as the library returns a lease.
std::optional<Lease> DecodeIdAndLease(absl::string_view text) {
  const size_t space = text.find(' ');
  if (space == absl::string_view::npos) return std::nullopt;
  return DecodeRedisLease(text.substr(0, space), text.substr(space + 1));
}

char ActionCode(LeaseAction action) {
  switch (action) {
    case LeaseAction::kAcquire:
      return 'a';
    case LeaseAction::kRelease:
      return 'r';
    case LeaseAction::kExtend:
      return 'e';
    case LeaseAction::kCheck:
      return 'c';
    case LeaseAction::kList:
      return 'l';
    case LeaseAction::kReset:
      return 'x';
  }
  return '?';
}

// The rate limits' decisions from the library's ratelimit_apply reply `rates`: taken (mode 't')
// when the lease was allowed, else only read (mode 'c', reporting the balances as they are), as
// StateStore::Apply decides them in mode kConsume or kCheck.
absl::StatusOr<Outcome> RateOutcome(const LeaseOperation& op, const OperationKeys& keys, bool taken,
                                    const redis::Reply& rates) {
  return RedisApplyOutcome(Operation{op.limits, taken ? Mode::kConsume : Mode::kCheck}, keys,
                           rates);
}

}  // namespace

RedisLeaseKeys RedisLeaseKeysFor(absl::string_view prefix, const StateKey& key,
                                 absl::string_view hash_tag) {
  const std::string state = RedisKeyFor(prefix, key, hash_tag);
  const absl::string_view braces = Braces(state, prefix.size());
  const std::string identity = IdentityOf(key);
  return RedisLeaseKeys{absl::StrCat(braces, "Lz", identity), absl::StrCat(braces, "Lh", identity)};
}

std::optional<RedisLeaseSet> ParseRedisLeaseSet(absl::string_view prefix,
                                                absl::string_view redis_key) {
  if (redis_key.substr(0, prefix.size()) != prefix || redis_key.substr(prefix.size(), 1) != "{") {
    return std::nullopt;
  }
  const size_t close = redis_key.find('}', prefix.size());
  if (close == absl::string_view::npos || redis_key.substr(close + 1, 2) != "Lz") {
    return std::nullopt;
  }
  // The state key of the same braces and identity.
  std::optional<StateKey> key = ParseRedisKey(
      prefix, absl::StrCat(redis_key.substr(0, close + 1), redis_key.substr(close + 3)));
  if (!key) return std::nullopt;
  RedisLeaseKeys keys = RedisLeaseKeysFor(prefix, *key, RedisHashTagOfKey(key->key));
  if (keys.expiries != redis_key) return std::nullopt;
  return RedisLeaseSet{*std::move(key), std::move(keys)};
}

std::string RedisLeaseNamePattern(absl::string_view prefix, LimitSource source,
                                  absl::string_view name) {
  // RedisNamePatterns' second pattern, "<prefix>{*}<identity>*", covers every tag (the prefix
  // has no braces, so "{*}" is where the tag goes); the lease keys add "Lz" after the braces.
  std::string pattern = RedisNamePatterns(prefix, source, name)[1];
  const size_t tag = pattern.find("{*}");
  pattern.insert(tag + 3, "Lz");
  return pattern;
}

std::string RedisLeaseKeysPattern(absl::string_view prefix) {
  // Every set's keys have braces (the state's tag, or the identity's); its expiries key has "Lz"
  // right after them.
  return absl::StrCat(RedisGlobEscape(prefix), "{*}Lz*");
}

std::vector<std::string> RedisExpiredLeasesCommand(const std::string& expiries, int64_t now_us) {
  // Kept as long as a RocksDB record keeps a lease (the sets' keys expire then too).
  return {"ZCOUNT", expiries, absl::StrCat("(", now_us - kLeaseRecordMarginMicros),
          absl::StrCat(now_us)};
}

std::vector<std::string> RedisDeleteLeaseSetCommand(const std::string& expiries,
                                                    const std::string& leases,
                                                    const std::string& now_us) {
  // The leases expiring after now, each "<count> <acquired> <expires> <released 0|1> ..." in the
  // hash (leases.lua): one not released is held.
  static constexpr char kScript[] = R"lua(
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2]))
end
local held = 0
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')) do
  local raw = redis.call('HGET', KEYS[2], id)
  if raw and string.match(raw, '^%S+ %S+ %S+ (%d)') == '0' then
    held = 1
    break
  end
end
redis.call('DEL', KEYS[1], KEYS[2])
return held
)lua";
  return {"EVAL", kScript, "2", expiries, leases, now_us};
}

std::vector<std::string> RedisLeaseCommand(const LeaseOperation& op, const RedisLeaseKeys& keys,
                                           const OperationKeys& rate_keys,
                                           absl::Span<const std::string> rate_redis_keys,
                                           std::optional<int64_t> now_override_us) {
  const LeaseOp& l = op.lease;
  std::vector<std::string> argv = {"FCALL", std::string(kRedisLeaseFunction),
                                   absl::StrCat(2 + rate_redis_keys.size()), keys.expiries,
                                   keys.leases};
  argv.insert(argv.end(), rate_redis_keys.begin(), rate_redis_keys.end());
  argv.push_back(std::string(1, ActionCode(l.action)));
  argv.push_back(now_override_us ? absl::StrCat(*now_override_us) : "");
  argv.push_back(absl::StrFormat("%.0f", l.config.capacity.value_or(0)));
  argv.push_back(absl::StrCat(l.count));
  argv.push_back(absl::StrCat(l.ttl_us));
  argv.push_back(l.lease_id.ToString());  // "" when the op names no lease
  argv.push_back(l.request_id);
  argv.push_back(l.holder);
  if (op.limits.empty()) {
    argv.push_back("0");
    if (l.action == LeaseAction::kList && (l.list_after || l.list_limit > 0)) {
      argv.push_back(absl::StrCat(l.list_after ? l.list_after->expires_at_us : 0));
      argv.push_back(absl::StrCat(l.list_after ? l.list_after->acquired_at_us : 0));
      argv.push_back(l.list_after ? l.list_after->id.ToString() : "");
      argv.push_back(absl::StrCat(std::max<int64_t>(l.list_limit, 0)));
    }
    return argv;
  }
  // ratelimit_apply's arguments from the count of limits on: those of RedisApplyCommand after
  // its FCALL, function, key count, keys, mode and time.
  std::vector<std::string> apply = RedisApplyCommand(Operation{op.limits, Mode::kConsume},
                                                     rate_keys, rate_redis_keys, now_override_us);
  const size_t first = 3 + rate_redis_keys.size() + 2;
  for (size_t i = first; i < apply.size(); ++i) argv.push_back(std::move(apply[i]));
  return argv;
}

absl::StatusOr<LeaseOutcome> RedisLeaseOutcome(const LeaseOperation& op,
                                               const OperationKeys& rate_keys,
                                               const redis::Reply& reply) {
  if (reply.type == Type::kError) {
    return absl::InternalError(absl::StrCat("FCALL ratelimit_lease: ", reply.str));
  }
  if (reply.type != Type::kArray || reply.elements.size() != 13) return Malformed("shape");
  const std::vector<redis::Reply>& e = reply.elements;
  LeaseOutcome out;
  LeaseDecision& d = out.lease;
  int64_t allowed = 0, replayed = 0, wrote = 0;
  if (!ParseWhole(e[0].str, out.now_us) || !ReplyInteger(e[1], allowed) ||
      !ReplyInteger(e[4], replayed) || !ReplyInteger(e[5], d.held) || !ReplyInteger(e[6], d.free) ||
      !ReplyInteger(e[8], d.expired_unreleased) || !ReplyInteger(e[9], wrote)) {
    return Malformed("numbers");
  }
  d.allowed = allowed == 1;
  d.replayed = replayed == 1;
  d.write = wrote == 1;
  if (e[2].str == "n") {
    d.reason = DenyReason::kNoFreeSlots;
  } else if (e[2].str == "c") {
    d.reason = DenyReason::kCountExceedsCapacity;
  } else if (!e[2].str.empty()) {
    return Malformed("reason");
  }
  if (e[3].str == "h") {
    d.state = LeaseState::kHeld;
  } else if (e[3].str == "r") {
    d.state = LeaseState::kReleased;
  } else if (e[3].str != "n") {
    return Malformed("state");
  }
  if (!e[7].str.empty()) {
    int64_t retry_at = 0;
    if (!ParseWhole(e[7].str, retry_at)) return Malformed("retry_at");
    d.retry_at_us = retry_at;
  }
  if (!e[10].str.empty()) {
    d.lease = DecodeIdAndLease(e[10].str);
    if (!d.lease) return Malformed("lease");
  }
  if (e[11].type != Type::kArray) return Malformed("list");
  if (!e[11].elements.empty()) {
    std::vector<Lease> listed;
    listed.reserve(e[11].elements.size());
    for (const redis::Reply& text : e[11].elements) {
      std::optional<Lease> lease = DecodeIdAndLease(text.str);
      if (!lease) return Malformed("listed lease");
      listed.push_back(*std::move(lease));
    }
    // The library returns the page and one lease more when more follow; the page is cut here
    // (and would be, the same, from a library of an earlier version that lists every lease).
    d.held_leases = ListingPage(listed, op.lease.list_after, op.lease.list_limit, &d.more_listed);
  }
  // Release and extend always "allowed"; the others as the library decided.
  out.allowed = d.allowed;
  const bool no_rates = e[12].type == Type::kArray && e[12].elements.empty();
  if (op.lease.action == LeaseAction::kAcquire && !d.replayed && !op.limits.empty()) {
    absl::StatusOr<Outcome> rates = RateOutcome(op, rate_keys, d.allowed, e[12]);
    if (!rates.ok()) return rates.status();
    out.decisions = std::move(rates->decisions);
    out.allowed = d.allowed && rates->allowed;
  } else if (op.lease.action == LeaseAction::kAcquire && d.replayed && !op.limits.empty() &&
             !no_rates) {
    // A replay's rate limits, read (a library before version 11 reads none: the answer then
    // reports them allowed without a balance).
    absl::StatusOr<Outcome> rates = RateOutcome(op, rate_keys, /*taken=*/false, e[12]);
    if (!rates.ok()) return rates.status();
    out.decisions = std::move(rates->decisions);
    AsReplayed(out.decisions);
  } else if (!no_rates) {
    return Malformed("rates");
  }
  return out;
}

std::string EncodeRedisLease(const Lease& lease) {
  return absl::StrCat(lease.count, " ", lease.acquired_at_us, " ", lease.expires_at_us, " ",
                      lease.released ? 1 : 0, " ", lease.request_id.size(), ":", lease.request_id,
                      lease.holder);
}

std::optional<Lease> DecodeRedisLease(absl::string_view id, absl::string_view text) {
  Lease lease;
  const std::optional<LeaseId> parsed = LeaseId::Parse(id);
  if (!parsed) return std::nullopt;
  lease.id = *parsed;
  int64_t fields[5];
  size_t pos = 0;
  for (int i = 0; i < 5; ++i) {
    const size_t end = text.find(i < 4 ? ' ' : ':', pos);
    if (end == absl::string_view::npos || !ParseWhole(text.substr(pos, end - pos), fields[i])) {
      return std::nullopt;
    }
    pos = end + 1;
  }
  if (fields[3] > 1 || static_cast<uint64_t>(fields[4]) > text.size() - pos) return std::nullopt;
  lease.count = fields[0];
  lease.acquired_at_us = fields[1];
  lease.expires_at_us = fields[2];
  lease.released = fields[3] == 1;
  lease.request_id = std::string(text.substr(pos, fields[4]));
  lease.holder = std::string(text.substr(pos + fields[4]));
  return lease;
}

absl::StatusOr<LeaseSet> RedisLeaseSetFromHash(const redis::Reply& hgetall) {
  if (hgetall.type != Type::kArray || hgetall.elements.size() % 2 != 0) {
    return absl::InternalError("HGETALL of a lease set: malformed reply");
  }
  LeaseSet set;
  for (size_t i = 0; i < hgetall.elements.size(); i += 2) {
    const std::string& field = hgetall.elements[i].str;
    if (field == "#" || field.rfind("r:", 0) == 0) continue;
    std::optional<Lease> lease = DecodeRedisLease(field, hgetall.elements[i + 1].str);
    if (!lease) return absl::InternalError(absl::StrCat("unreadable lease ", field));
    set.leases.push_back(*std::move(lease));
  }
  std::sort(set.leases.begin(), set.leases.end(),
            [](const Lease& a, const Lease& b) { return a.id < b.id; });
  return set;
}

}  // namespace ratelimit
