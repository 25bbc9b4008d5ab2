#include "storage/redis/redis_state_store.h"

// RedisStateStore: administration. Secrets, reads and resets of states, health, closing and
// metrics.

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "storage/redis/redis_function_library.h"
#include "storage/redis/redis_router.h"
#include "storage/redis/redis_store_metrics.h"

namespace ratelimit {
namespace {

// The keys a DEL removed (its integer reply; anything else counts none).
uint64_t DeletedCount(const redis::Reply& reply) {
  return reply.type == redis::Reply::Type::kInteger && reply.integer > 0
             ? static_cast<uint64_t>(reply.integer)
             : 0;
}

}  // namespace

using redis_internal::ErrorReply;
using redis_internal::Replies;

absl::StatusOr<std::string> RedisStateStore::Secret(absl::string_view name,
                                                    absl::FunctionRef<std::string()> generate) {
  const std::string key = RedisSecretKey(options_.key_prefix, name);
  absl::StatusOr<redis::Reply> got = Command(key, {"GET", key});
  if (!got.ok()) return got.status();
  if (got->type == redis::Reply::Type::kString) return got->str;
  if (got->type != redis::Reply::Type::kNil) return ErrorReply("GET", *got);
  std::string fresh = generate();
  // NX: when another process created it in between, its secret wins and is returned (GET).
  absl::StatusOr<redis::Reply> set = Command(key, {"SET", key, fresh, "NX", "GET"});
  if (!set.ok()) return set.status();
  if (set->type == redis::Reply::Type::kString) return set->str;
  if (set->type != redis::Reply::Type::kNil) return ErrorReply("SET NX", *set);
  return fresh;
}

absl::StatusOr<std::optional<State>> RedisStateStore::Get(const StateKey& key) {
  const std::string redis_key = KeyFor(key);
  absl::StatusOr<redis::Reply> reply = Command(redis_key, {"GET", redis_key});
  if (!reply.ok()) return reply.status();
  if (reply->type == redis::Reply::Type::kNil) return std::optional<State>();
  if (reply->type != redis::Reply::Type::kString) return ErrorReply("GET", *reply);
  std::optional<State> state = DecodeRedisState(reply->str);
  if (!state) return absl::InternalError(absl::StrCat("unreadable state at ", redis_key));
  return state;
}

absl::StatusOr<uint64_t> RedisStateStore::Delete(const StateKey& key) {
  const std::string redis_key = KeyFor(key);
  absl::StatusOr<redis::Reply> reply = Command(redis_key, {"DEL", redis_key});
  if (!reply.ok()) return reply.status();
  if (reply->type == redis::Reply::Type::kError) return ErrorReply("DEL", *reply);
  return DeletedCount(*reply);
}

absl::StatusOr<RedisStateStore::ScannedPage> RedisStateStore::ScanPage(const std::string& primary,
                                                                       const std::string& cursor,
                                                                       const std::string& pattern,
                                                                       int count) {
  absl::StatusOr<redis::Reply> reply = router_->ExecuteOnNode(
      primary, {"SCAN", cursor, "MATCH", pattern, "COUNT", absl::StrCat(count)});
  if (!reply.ok()) return reply.status();
  if (reply->type != redis::Reply::Type::kArray || reply->elements.size() != 2 ||
      reply->elements[0].type != redis::Reply::Type::kString ||
      reply->elements[1].type != redis::Reply::Type::kArray) {
    return ErrorReply(absl::StrCat("SCAN ", primary), *reply);
  }
  ScannedPage page;
  page.next = std::move(reply->elements[0].str);
  page.keys.reserve(reply->elements[1].elements.size());
  for (redis::Reply& k : reply->elements[1].elements) page.keys.push_back(std::move(k.str));
  return page;
}

absl::StatusOr<uint64_t> RedisStateStore::DeleteScanned(
    const std::string& pattern,
    absl::FunctionRef<std::vector<std::string>(const std::string&)> keys_of) {
  return DeleteScannedBy(pattern, keys_of, [](std::vector<std::string> keys) {
    keys.insert(keys.begin(), "DEL");
    return keys;
  });
}

absl::StatusOr<uint64_t> RedisStateStore::DeleteScannedBy(
    const std::string& pattern,
    absl::FunctionRef<std::vector<std::string>(const std::string&)> keys_of,
    absl::FunctionRef<std::vector<std::string>(std::vector<std::string>)> command_of) {
  uint64_t deleted = 0;
  for (const std::string& primary : router_->Primaries()) {
    std::string cursor = "0";
    do {
      absl::StatusOr<ScannedPage> page = ScanPage(primary, cursor, pattern, 1000);
      if (!page.ok()) return page.status();
      cursor = std::move(page->next);
      std::vector<std::vector<std::string>> doomed;
      for (const std::string& found : page->keys) {
        std::vector<std::string> keys = keys_of(found);
        if (!keys.empty()) doomed.push_back(std::move(keys));
      }
      // One command per group (one slot; the keys of one primary may lie in different slots).
      Replies replies(doomed.size());
      std::string command;  // the commands' name, for an error
      for (size_t i = 0; i < doomed.size(); ++i) {
        std::string routed = doomed[i][0];
        std::vector<std::string> argv = command_of(std::move(doomed[i]));
        command = argv[0];
        router_->Send(routed, std::move(argv), replies.For(i));
      }
      for (absl::StatusOr<redis::Reply>& r : replies.Wait()) {
        if (!r.ok()) return r.status();
        if (r->type == redis::Reply::Type::kError) return ErrorReply(command, *r);
        deleted += DeletedCount(*r) > 0 ? 1 : 0;
      }
    } while (cursor != "0");
  }
  return deleted;
}

absl::StatusOr<uint64_t> RedisStateStore::DeleteAll(LimitSource source, absl::string_view name) {
  if (closed_.load()) return absl::UnavailableError("the Redis store is closed");
  uint64_t deleted = 0;
  for (const std::string& pattern : RedisNamePatterns(options_.key_prefix, source, name)) {
    absl::StatusOr<uint64_t> n =
        DeleteScanned(pattern, [&](const std::string& key) -> std::vector<std::string> {
          const std::optional<StateKey> state = ParseRedisKey(options_.key_prefix, key);
          if (state && state->source == source && state->name == name) return {key};
          return {};
        });
    if (!n.ok()) return n.status();
    deleted += *n;
  }
  return deleted;
}

absl::Status RedisStateStore::Health() {
  if (closed_.load()) return absl::UnavailableError("the Redis store is closed");
  std::vector<std::string> errors;
  for (const std::string& primary : router_->Primaries()) {
    absl::StatusOr<redis::Reply> reply = router_->ExecuteOnNode(primary, {"PING"});
    if (reply.ok() && reply->type != redis::Reply::Type::kError) return absl::OkStatus();
    errors.push_back(reply.ok() ? absl::StrCat("redis ", primary, ": ", reply->str)
                                : std::string(reply.status().message()));
  }
  return absl::UnavailableError(
      absl::StrCat("no Redis primary answers: ", absl::StrJoin(errors, "; ")));
}

absl::Status RedisStateStore::Close() {
  closed_.store(true);
  return absl::OkStatus();
}

std::vector<StateStore::MetricFamily> RedisStateStore::MetricFamilies() {
  const redis::RedisClusterClient* client = router_->client();
  if (client == nullptr) return {};
  return RedisClientMetricFamilies([client] { return client->Metrics(); });
}

}  // namespace ratelimit
