#include "storage/redis/redis_function_library.h"

#include <cstdlib>
#include <cstring>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "storage/redis/cluster/redis_slot.h"

namespace ratelimit {
namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

std::string Exact(double x) { return absl::StrFormat("%.17g", x); }

// strtod: the exact inverse of '%.17g' (absl::SimpleAtod would do too; strtod is what Lua uses).
std::optional<double> ParseDouble(absl::string_view text) {
  if (text.empty() || text.size() > 64) return std::nullopt;
  const std::string s(text);
  char* end = nullptr;
  const double x = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return x;
}

// A time the library printed: an integer below the horizon, or never.
std::optional<int64_t> ParseTime(absl::string_view text) {
  const std::optional<double> x = ParseDouble(text);
  if (!x || *x != *x) return std::nullopt;
  if (*x >= static_cast<double>(kRedisTimeHorizonUs)) return kNever;
  if (*x <= -static_cast<double>(kRedisTimeHorizonUs) || *x != static_cast<int64_t>(*x)) {
    return std::nullopt;
  }
  return static_cast<int64_t>(*x);
}

void EscapeInto(std::string& out, absl::string_view bytes) {
  for (char c : bytes) {
    switch (c) {
      case '%':
        out += "%25";
        break;
      case '{':
        out += "%7B";
        break;
      case '}':
        out += "%7D";
        break;
      default:
        out += c;
    }
  }
}

std::optional<std::string> Unescape(absl::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    const absl::string_view code = text.substr(i + 1, 2);
    if (code == "25") {
      out += '%';
    } else if (code == "7B") {
      out += '{';
    } else if (code == "7D") {
      out += '}';
    } else {
      return std::nullopt;
    }
    i += 2;
  }
  return out;
}

std::string Identity(LimitSource source, absl::string_view name) {
  std::string identity(1, static_cast<char>(source));
  absl::StrAppend(&identity, name.size(), ":", name);
  return identity;
}

std::optional<StateKey> ParseIdentity(absl::string_view identity) {
  if (identity.empty()) return std::nullopt;
  StateKey out;
  const std::optional<LimitSource> source = LimitSourceOfByte(identity[0]);
  if (!source) return std::nullopt;
  out.source = *source;
  const size_t colon = identity.find(':');
  if (colon == absl::string_view::npos || colon < 2) return std::nullopt;
  const absl::string_view digits = identity.substr(1, colon - 1);
  uint32_t length = 0;
  if (!absl::SimpleAtoi(digits, &length) || absl::StrCat(length) != digits ||
      length > identity.size() - colon - 1) {
    return std::nullopt;
  }
  out.name = std::string(identity.substr(colon + 1, length));
  out.key = std::string(identity.substr(colon + 1 + length));
  return out;
}

std::string GlobEscape(absl::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof(double)) == 0; }

// Whether the library's stored state `lua` is the algebra's `cxx`.
bool Agrees(const State& lua, const State& cxx) {
  const bool full_at_agrees = cxx.full_at_us >= kRedisTimeHorizonUs
                                  ? lua.full_at_us == kNever
                                  : lua.full_at_us == cxx.full_at_us;
  return SameBits(lua.value, cxx.value) && lua.ts_us == cxx.ts_us && full_at_agrees &&
         SameBits(lua.counted_against, cxx.counted_against);
}

const redis::Reply* FindField(const redis::Reply& map, absl::string_view name) {
  if (map.type != redis::Reply::Type::kArray) return nullptr;
  for (size_t i = 0; i + 1 < map.elements.size(); i += 2) {
    if (map.elements[i].str == name) return &map.elements[i + 1];
  }
  return nullptr;
}

absl::Status ReplyError(absl::string_view what, const redis::Reply& reply) {
  return absl::InternalError(absl::StrCat(what, ": ", reply.str));
}

}  // namespace

absl::Status ValidateRedisKeyPrefix(absl::string_view prefix) {
  if (prefix.find_first_of("{}") != absl::string_view::npos) {
    return absl::InvalidArgumentError("redis_key_prefix: must not contain '{' or '}'");
  }
  return absl::OkStatus();
}

absl::string_view RedisHashTagOfKey(absl::string_view key) {
  const size_t open = key.find('{');
  if (open == absl::string_view::npos) return "";
  const size_t close = key.find('}', open + 1);
  if (close == absl::string_view::npos) return "";
  return key.substr(open + 1, close - open - 1);
}

std::string RedisKeyFor(absl::string_view prefix, const StateKey& key, absl::string_view hash_tag) {
  const std::string identity = absl::StrCat(Identity(key.source, key.name), key.key);
  std::string out(prefix);
  out += '{';
  if (hash_tag.empty()) {
    EscapeInto(out, identity);
    out += '}';
  } else {
    EscapeInto(out, hash_tag);
    out += '}';
    out += identity;
  }
  return out;
}

std::string RedisRecordKey(absl::string_view prefix, absl::string_view hash_tag,
                           absl::string_view record_key) {
  return absl::StrCat(prefix, "{", hash_tag, "}rec:", record_key);
}

std::string RedisRequestRecordKey(absl::string_view prefix, absl::string_view record_key) {
  const int slot = redis::KeySlot(RedisRecordKey(prefix, "", record_key));
  return RedisRecordKey(prefix, redis::SlotTag(slot), record_key);
}

std::string RedisSecretKey(absl::string_view prefix, absl::string_view name) {
  std::string out = absl::StrCat(prefix, "{secret:");
  EscapeInto(out, name);
  out += '}';
  return out;
}

std::optional<StateKey> ParseRedisKey(absl::string_view prefix, absl::string_view redis_key) {
  if (!absl::ConsumePrefix(&redis_key, prefix) || !absl::ConsumePrefix(&redis_key, "{")) {
    return std::nullopt;
  }
  const size_t close = redis_key.find('}');
  if (close == absl::string_view::npos) return std::nullopt;
  const absl::string_view rest = redis_key.substr(close + 1);
  if (!rest.empty()) return ParseIdentity(rest);
  const std::optional<std::string> identity = Unescape(redis_key.substr(0, close));
  if (!identity) return std::nullopt;
  return ParseIdentity(*identity);
}

std::string RedisGlobEscape(absl::string_view text) { return GlobEscape(text); }

std::vector<std::string> RedisNamePatterns(absl::string_view prefix, LimitSource source,
                                           absl::string_view name) {
  std::string escaped;
  EscapeInto(escaped, Identity(source, name));
  return {absl::StrCat(GlobEscape(prefix), "{", GlobEscape(escaped), "*"),
          absl::StrCat(GlobEscape(prefix), "{*}", GlobEscape(Identity(source, name)), "*")};
}

std::string EncodeRedisState(const State& state) {
  const double full_at = state.full_at_us >= kRedisTimeHorizonUs
                             ? 9223372036854775808.0
                             : static_cast<double>(state.full_at_us);
  std::string out = absl::StrCat(Exact(state.value), " ", Exact(static_cast<double>(state.ts_us)),
                                 " ", Exact(full_at));
  if (state.counted_against != 0) absl::StrAppend(&out, " ", Exact(state.counted_against));
  return out;
}

std::optional<State> DecodeRedisState(absl::string_view text) {
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ' ');
  if (parts.size() != 3 && parts.size() != 4) return std::nullopt;
  const std::optional<double> value = ParseDouble(parts[0]);
  const std::optional<int64_t> ts = ParseTime(parts[1]);
  const std::optional<int64_t> full_at = ParseTime(parts[2]);
  if (!value || !ts || *ts == kNever || !full_at) return std::nullopt;
  State state{*value, *ts, *full_at};
  if (parts.size() == 4) {
    const std::optional<double> counted = ParseDouble(parts[3]);
    if (!counted || !(*counted > 0)) return std::nullopt;
    state.counted_against = *counted;
  }
  return state;
}

absl::StatusOr<bool> EnsureRedisLibrary(RedisCommandRunner& connection) {
  const std::string list[] = {"FUNCTION", "LIST", "LIBRARYNAME", std::string(kRedisLibraryName)};
  absl::StatusOr<redis::Reply> libraries = connection.Command(list);
  if (!libraries.ok()) return libraries.status();
  if (libraries->type != redis::Reply::Type::kArray) {
    return ReplyError("FUNCTION LIST", *libraries);
  }
  bool present = false;
  for (const redis::Reply& library : libraries->elements) {
    const redis::Reply* name = FindField(library, "library_name");
    if (name != nullptr && name->str == kRedisLibraryName) present = true;
  }
  if (present) {
    const std::string fcall[] = {"FCALL_RO", std::string(kRedisVersionFunction), "0"};
    absl::StatusOr<redis::Reply> version = connection.Command(fcall);
    if (!version.ok()) return version.status();
    // An error reply (no such function in an old library) means: another version.
    if (version->type == redis::Reply::Type::kString && version->str == kRedisLibraryVersion) {
      return false;
    }
  }
  const std::string load[] = {"FUNCTION", "LOAD", "REPLACE", std::string(RedisLibraryCode())};
  absl::StatusOr<redis::Reply> loaded = connection.Command(load);
  if (!loaded.ok()) return loaded.status();
  if (loaded->type == redis::Reply::Type::kError) return ReplyError("FUNCTION LOAD", *loaded);
  return true;
}

std::vector<std::string> RedisApplyCommand(const Operation& op, const OperationKeys& keys,
                                           absl::Span<const std::string> redis_keys,
                                           std::optional<int64_t> now_override_us) {
  std::vector<std::string> argv;
  argv.reserve(6 + redis_keys.size() + 14 * op.limits.size());
  argv.push_back("FCALL");
  argv.push_back(std::string(kRedisApplyFunction));
  argv.push_back(absl::StrCat(redis_keys.size()));
  for (const std::string& k : redis_keys) argv.push_back(k);
  argv.push_back(op.mode == Mode::kCheck ? "c" : op.mode == Mode::kConsume ? "t" : "r");
  argv.push_back(now_override_us ? absl::StrCat(*now_override_us) : "");
  argv.push_back(absl::StrCat(op.limits.size()));
  for (size_t i = 0; i < op.limits.size(); ++i) {
    const LimitOp& l = op.limits[i];
    const LimitConfig& c = l.config;
    argv.push_back(absl::StrCat(keys.slot_of[i] + 1));
    // A limit under a runtime override: 'B' or 'W', its adjustment after the count.
    const bool adjusted = c.adjustment.has_value();
    if (c.kind == LimitKind::kTokenBucket) {
      argv.push_back(adjusted ? "B" : "b");
    } else {
      argv.push_back(adjusted ? "W" : "w");
    }
    argv.push_back(Exact(c.rate));
    argv.push_back(absl::StrCat(c.period_us));
    argv.push_back(Exact(c.EffectiveCapacity()));
    argv.push_back(c.max_reserved ? Exact(*c.max_reserved) : "");
    // The default window start hashes (name, key): computed here, where the hash lives.
    argv.push_back(c.kind == LimitKind::kFixedWindow
                       ? absl::StrCat(WindowStart(c, LimitId{l.key.name, l.key.key}))
                       : "0");
    argv.push_back(Exact(l.count));
    if (adjusted) {
      const LimitConfig::Adjustment& a = *c.adjustment;
      switch (a.effect) {
        case LimitConfig::Adjustment::Effect::kLimit:
          argv.push_back("l");
          break;
        case LimitConfig::Adjustment::Effect::kUnlimited:
          argv.push_back("u");
          break;
        case LimitConfig::Adjustment::Effect::kBlocked:
          argv.push_back("x");
          break;
      }
      argv.push_back(a.changed_at_us ? absl::StrCat(*a.changed_at_us) : "");
      argv.push_back(Exact(a.before_rate));
      argv.push_back(absl::StrCat(a.before_period_us));
      argv.push_back(Exact(a.before_capacity));
      argv.push_back(Exact(a.base_capacity));
    }
  }
  return argv;
}

absl::StatusOr<Outcome> RedisApplyOutcome(const Operation& op, const OperationKeys& keys,
                                          const redis::Reply& reply) {
  if (reply.type == redis::Reply::Type::kError) return ReplyError("FCALL ratelimit_apply", reply);
  const size_t n = keys.keys.size();
  if (reply.type != redis::Reply::Type::kArray || reply.elements.size() != 2 + 2 * n) {
    return absl::InternalError("FCALL ratelimit_apply: malformed reply");
  }
  const std::optional<int64_t> now = ParseTime(reply.elements[0].str);
  if (!now || *now == kNever || reply.elements[1].type != redis::Reply::Type::kInteger) {
    return absl::InternalError("FCALL ratelimit_apply: malformed time or verdict");
  }
  std::vector<std::optional<State>> read(n);
  std::vector<std::optional<State>> written(n);
  for (size_t k = 0; k < n; ++k) {
    for (auto [text, into] : {std::pair{&reply.elements[2 + k].str, &read[k]},
                              std::pair{&reply.elements[2 + n + k].str, &written[k]}}) {
      if (text->empty()) continue;
      *into = DecodeRedisState(*text);
      if (!*into)
        return absl::InternalError(
            absl::StrCat("FCALL ratelimit_apply: unreadable state: ", *text));
    }
  }
  std::vector<std::optional<State>> writes(n);
  Outcome outcome = DecideOperation(op, keys, read, *now, absl::MakeSpan(writes));
  const bool lua_allowed = reply.elements[1].integer == 1;
  bool agree = lua_allowed == outcome.allowed;
  for (size_t k = 0; agree && k < n; ++k) {
    agree = writes[k].has_value() == written[k].has_value() &&
            (!writes[k] || Agrees(*written[k], *writes[k]));
  }
  if (!agree) {
    return absl::InternalError(
        "FCALL ratelimit_apply: the function library and the algebra disagree");
  }
  return outcome;
}

}  // namespace ratelimit
