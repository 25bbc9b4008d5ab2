#include "storage/redis/redis_state_store.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "storage/apply.h"
#include "storage/redis/redis_function_library.h"

namespace ratelimit {
namespace {

constexpr int kMaxUpdateAttempts = 64;

absl::Status ErrorReply(absl::string_view what, const redis::Reply& reply) {
  return absl::InternalError(absl::StrCat(what, ": ", reply.str));
}

}  // namespace

absl::StatusOr<std::unique_ptr<RedisStateStore>> RedisStateStore::Open(
    std::unique_ptr<RedisCommandRunner> connection, RedisStateStoreOptions options) {
  if (absl::Status s = ValidateRedisKeyPrefix(options.key_prefix); !s.ok()) return s;
  absl::StatusOr<bool> loaded = EnsureRedisLibrary(*connection);
  if (!loaded.ok()) return loaded.status();
  return std::unique_ptr<RedisStateStore>(
      new RedisStateStore(std::move(connection), std::move(options)));
}

absl::StatusOr<redis::Reply> RedisStateStore::Command(absl::Span<const std::string> argv) {
  if (closed_.load()) return absl::UnavailableError("the Redis store is closed");
  return connection_->Command(argv);
}

std::string RedisStateStore::KeyFor(const StateKey& key) const {
  return RedisKeyFor(options_.key_prefix, key, "");
}

absl::StatusOr<Outcome> RedisStateStore::Apply(const Operation& op, const Clock&) {
  const OperationKeys keys = DistinctKeys(op.limits);
  std::vector<std::string> redis_keys;
  redis_keys.reserve(keys.keys.size());
  for (const StateKey& k : keys.keys) redis_keys.push_back(KeyFor(k));
  std::optional<int64_t> now;
  if (options_.clock_override != nullptr) now = options_.clock_override->NowMicros();
  absl::StatusOr<redis::Reply> reply = Command(RedisApplyCommand(op, keys, redis_keys, now));
  if (!reply.ok()) return reply.status();
  return RedisApplyOutcome(op, keys, *reply);
}

absl::Status RedisStateStore::Update(absl::Span<const StateKey> keys, DecideFn decide) {
  const size_t n = keys.size();
  std::vector<std::string> redis_keys;
  for (const StateKey& k : keys) redis_keys.push_back(KeyFor(k));
  for (int attempt = 0; attempt < kMaxUpdateAttempts; ++attempt) {
    std::vector<std::string> get = {"MGET"};
    get.insert(get.end(), redis_keys.begin(), redis_keys.end());
    absl::StatusOr<redis::Reply> read = Command(get);
    if (!read.ok()) return read.status();
    if (read->type != redis::Reply::Type::kArray || read->elements.size() != n) {
      return ErrorReply("MGET", *read);
    }
    std::vector<std::optional<State>> current(n);
    std::vector<std::string> expected(n);
    for (size_t i = 0; i < n; ++i) {
      const redis::Reply& r = read->elements[i];
      if (r.type != redis::Reply::Type::kString) continue;
      expected[i] = r.str;
      current[i] = DecodeRedisState(r.str);
      if (!current[i])
        return absl::InternalError(absl::StrCat("unreadable state at ", redis_keys[i]));
    }
    std::vector<std::optional<State>> writes(n);
    if (absl::Status s = decide(current, absl::MakeSpan(writes)); !s.ok()) return s;
    std::vector<std::string> cas = {"FCALL", std::string(kRedisCompareAndSetFunction),
                                    absl::StrCat(n)};
    cas.insert(cas.end(), redis_keys.begin(), redis_keys.end());
    cas.insert(cas.end(), expected.begin(), expected.end());
    for (size_t i = 0; i < n; ++i) cas.push_back(writes[i] ? EncodeRedisState(*writes[i]) : "");
    absl::StatusOr<redis::Reply> done = Command(cas);
    if (!done.ok()) return done.status();
    if (done->type != redis::Reply::Type::kInteger) return ErrorReply("compare-and-set", *done);
    if (done->integer == 1) return absl::OkStatus();
  }
  return absl::AbortedError("the Redis store: too many conflicting writes");
}

absl::StatusOr<std::optional<State>> RedisStateStore::Get(const StateKey& key) {
  const std::string argv[] = {"GET", KeyFor(key)};
  absl::StatusOr<redis::Reply> reply = Command(argv);
  if (!reply.ok()) return reply.status();
  if (reply->type == redis::Reply::Type::kNil) return std::optional<State>();
  if (reply->type != redis::Reply::Type::kString) return ErrorReply("GET", *reply);
  std::optional<State> state = DecodeRedisState(reply->str);
  if (!state) return absl::InternalError(absl::StrCat("unreadable state at ", argv[1]));
  return state;
}

absl::Status RedisStateStore::Delete(const StateKey& key) {
  const std::string argv[] = {"DEL", KeyFor(key)};
  absl::StatusOr<redis::Reply> reply = Command(argv);
  if (!reply.ok()) return reply.status();
  if (reply->type == redis::Reply::Type::kError) return ErrorReply("DEL", *reply);
  return absl::OkStatus();
}

absl::Status RedisStateStore::DeleteAll(LimitSource source, absl::string_view name) {
  for (const std::string& pattern : RedisNamePatterns(options_.key_prefix, source, name)) {
    std::string cursor = "0";
    do {
      const std::string scan[] = {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"};
      absl::StatusOr<redis::Reply> reply = Command(scan);
      if (!reply.ok()) return reply.status();
      if (reply->type != redis::Reply::Type::kArray || reply->elements.size() != 2) {
        return ErrorReply("SCAN", *reply);
      }
      cursor = reply->elements[0].str;
      std::vector<std::string> del = {"DEL"};
      for (const redis::Reply& k : reply->elements[1].elements) {
        const std::optional<StateKey> state = ParseRedisKey(options_.key_prefix, k.str);
        if (state && state->source == source && state->name == name) del.push_back(k.str);
      }
      if (del.size() > 1) {
        absl::StatusOr<redis::Reply> deleted = Command(del);
        if (!deleted.ok()) return deleted.status();
        if (deleted->type == redis::Reply::Type::kError) return ErrorReply("DEL", *deleted);
      }
    } while (cursor != "0");
  }
  return absl::OkStatus();
}

absl::Status RedisStateStore::Health() {
  const std::string ping[] = {"PING"};
  absl::StatusOr<redis::Reply> reply = Command(ping);
  if (!reply.ok()) return reply.status();
  if (reply->type == redis::Reply::Type::kError) {
    return absl::UnavailableError(absl::StrCat("redis: ", reply->str));
  }
  return absl::OkStatus();
}

absl::Status RedisStateStore::Close() {
  closed_.store(true);
  return absl::OkStatus();
}

}  // namespace ratelimit
