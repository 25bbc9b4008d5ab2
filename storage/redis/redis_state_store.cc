#include "storage/redis/redis_state_store.h"

// RedisStateStore: opening, and the operations whose keys share a slot (one FCALL, or an
// optimistic transaction for Update and UpdateWithRecords). Keys spanning slots:
// redis_cross_slot.cc and redis_cross_slot_records.cc; administration:
// redis_state_store_admin.cc.

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "storage/apply.h"
#include "storage/redis/cluster/redis_slot.h"
#include "storage/redis/redis_function_library.h"
#include "storage/redis/redis_record_format.h"
#include "storage/redis/redis_router.h"
#include "storage/status_util.h"

namespace ratelimit {

using redis_internal::DecodeRecord;
using redis_internal::EncodeRecord;
using redis_internal::ErrorReply;
using redis_internal::NodeRunner;
using redis_internal::RecordExpiryMs;
using redis_internal::Replies;
using redis_internal::SlotGroups;

RedisStateStore::RedisStateStore(std::unique_ptr<Router> router, RedisStateStoreOptions options)
    : router_(std::move(router)),
      options_(std::move(options)),
      board_(options_.key_prefix,
             [this](const std::string& key, std::vector<std::string> argv) {
               return Command(key, std::move(argv));
             }),
      overrides_(
          options_.key_prefix,
          [this](const std::string& key, std::vector<std::string> argv) {
            return Command(key, std::move(argv));
          },
          RedisOverrideStoreOptions{options_.max_override_audit_entries}) {}

RedisStateStore::~RedisStateStore() = default;

absl::StatusOr<std::unique_ptr<RedisStateStore>> RedisStateStore::Open(
    std::unique_ptr<RedisCommandRunner> connection, RedisStateStoreOptions options) {
  if (absl::Status s = ValidateRedisKeyPrefix(options.key_prefix); !s.ok()) return s;
  absl::StatusOr<bool> loaded = EnsureRedisLibrary(*connection);
  if (!loaded.ok()) return loaded.status();
  return std::unique_ptr<RedisStateStore>(new RedisStateStore(
      redis_internal::NewRunnerRouter(std::move(connection)), std::move(options)));
}

absl::StatusOr<std::unique_ptr<RedisStateStore>> RedisStateStore::Open(
    std::unique_ptr<redis::RedisClusterClient> client, RedisStateStoreOptions options) {
  if (absl::Status s = ValidateRedisKeyPrefix(options.key_prefix); !s.ok()) return s;
  if (options.hold_ttl < absl::Milliseconds(1)) {
    return absl::InvalidArgumentError("hold_ttl: must be at least 1 ms");
  }
  for (int slot = 0; slot < redis::kSlotCount; ++slot) {
    if (!client->PrimaryForSlot(slot).empty()) continue;
    int last = slot;
    while (last + 1 < redis::kSlotCount && client->PrimaryForSlot(last + 1).empty()) ++last;
    return absl::UnavailableError(
        absl::StrCat("redis cluster: slots ", slot, "-", last, " are not served by any primary"));
  }
  std::unique_ptr<Router> router = redis_internal::NewClusterRouter(std::move(client));
  for (const std::string& primary : router->Primaries()) {
    NodeRunner runner(*router, primary);
    absl::StatusOr<bool> loaded = EnsureRedisLibrary(runner);
    if (!loaded.ok()) {
      return absl::Status(loaded.status().code(),
                          absl::StrCat("redis ", primary, ": ", loaded.status().message()));
    }
  }
  return std::unique_ptr<RedisStateStore>(
      new RedisStateStore(std::move(router), std::move(options)));
}

absl::StatusOr<redis::Reply> RedisStateStore::Command(const std::string& routing_key,
                                                      std::vector<std::string> argv) {
  if (closed_.load()) return absl::UnavailableError("the Redis store is closed");
  Replies replies(1);
  router_->Send(routing_key, std::move(argv), replies.For(0));
  return std::move(replies.Wait()[0]);
}

std::string RedisStateStore::KeyFor(const StateKey& key) const {
  return RedisKeyFor(options_.key_prefix, key, RedisHashTagOfKey(key.key));
}

absl::StatusOr<Outcome> RedisStateStore::Apply(const Operation& op, const Clock&) {
  if (closed_.load()) return absl::UnavailableError("the Redis store is closed");
  const OperationKeys keys = DistinctKeys(op.limits);
  std::vector<std::string> redis_keys;
  redis_keys.reserve(keys.keys.size());
  for (const StateKey& k : keys.keys) redis_keys.push_back(KeyFor(k));
  std::optional<int64_t> now;
  if (options_.clock_override != nullptr) now = options_.clock_override->NowMicros();
  const std::vector<std::vector<size_t>> groups = SlotGroups(redis_keys);
  if (groups.size() > 1) return ApplyAcrossSlots(op, keys, redis_keys, groups, now);
  absl::StatusOr<redis::Reply> reply =
      Command(redis_keys[0], RedisApplyCommand(op, keys, redis_keys, now));
  if (!reply.ok()) return reply.status();
  return RedisApplyOutcome(op, keys, *reply);
}

void RedisStateStore::ApplyAsync(const Operation& op, const Clock& clock, ApplyDone done) {
  if (closed_.load()) {
    std::move(done)(absl::UnavailableError("the Redis store is closed"));
    return;
  }
  if (!op.records.empty()) {  // records are not one FCALL: Apply
    std::move(done)(Apply(op, clock));
    return;
  }
  // What the reply is checked against, owned until it arrives.
  struct Call {
    std::vector<LimitOp> limits;
    Mode mode;
    OperationKeys keys;
    ApplyDone done;
  };
  auto call = std::make_shared<Call>();
  call->keys = DistinctKeys(op.limits);
  std::vector<std::string> redis_keys;
  redis_keys.reserve(call->keys.keys.size());
  for (const StateKey& k : call->keys.keys) redis_keys.push_back(KeyFor(k));
  std::optional<int64_t> now;
  if (options_.clock_override != nullptr) now = options_.clock_override->NowMicros();
  const int slot = redis::KeySlot(redis_keys[0]);
  for (const std::string& key : redis_keys) {
    if (redis::KeySlot(key) != slot) {  // one take per slot, with holds and refunds
      ApplyAcrossSlotsAsync(op, call->keys, redis_keys, SlotGroups(redis_keys), now,
                            std::move(done));
      return;
    }
  }
  call->limits.assign(op.limits.begin(), op.limits.end());
  call->mode = op.mode;
  call->done = std::move(done);
  std::vector<std::string> argv = RedisApplyCommand(op, call->keys, redis_keys, now);
  router_->Send(redis_keys[0], std::move(argv), [call](absl::StatusOr<redis::Reply> reply) {
    if (!reply.ok()) {
      std::move(call->done)(reply.status());
      return;
    }
    std::move(call->done)(
        RedisApplyOutcome(Operation{call->limits, call->mode}, call->keys, *reply));
  });
}

absl::Status RedisStateStore::Update(absl::Span<const StateKey> keys, DecideFn decide) {
  const size_t n = keys.size();
  std::vector<std::string> redis_keys;
  for (const StateKey& k : keys) redis_keys.push_back(KeyFor(k));
  for (const std::string& k : redis_keys) {
    if (!router_->SingleNode() && redis::KeySlot(k) != redis::KeySlot(redis_keys[0])) {
      return NotOneTransactionError(
          "the Redis store: on a Redis Cluster, Update of keys in different slots is not "
          "supported (use Apply)");
    }
  }
  for (int attempt = 0; attempt < kMaxUpdateAttempts; ++attempt) {
    std::vector<std::string> get = {"MGET"};
    get.insert(get.end(), redis_keys.begin(), redis_keys.end());
    absl::StatusOr<redis::Reply> read = Command(redis_keys[0], get);
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
    absl::StatusOr<redis::Reply> done = Command(redis_keys[0], cas);
    if (!done.ok()) return done.status();
    if (done->type != redis::Reply::Type::kInteger) return ErrorReply("compare-and-set", *done);
    if (done->integer == 1) return absl::OkStatus();
  }
  return absl::AbortedError("the Redis store: too many conflicting writes");
}

absl::Status RedisStateStore::UpdateWithRecords(absl::Span<const StateKey> keys,
                                                absl::Span<const RecordSpec> records,
                                                const Clock& clock, RecordDecideFn decide) {
  if (closed_.load()) return absl::UnavailableError("the Redis store is closed");
  const size_t n = keys.size();
  const size_t m = records.size();
  std::vector<std::string> redis_keys;
  redis_keys.reserve(n + m);
  for (const StateKey& k : keys) redis_keys.push_back(KeyFor(k));
  const bool single_node = router_->SingleNode();
  const int slot = redis::KeySlot(redis_keys[0]);
  if (!single_node) {
    for (const std::string& k : redis_keys) {
      if (redis::KeySlot(k) != slot) {
        return NotOneTransactionError(
            "the Redis store: on a Redis Cluster, a request with a request_id or a Settle must "
            "name limits whose keys share a hash slot (give their keys one hash tag, e.g. "
            "\"{org7}user42\" and \"{org7}\")");
      }
    }
  }
  // On a cluster a record lives here in the slot of the states it guards (a request_id's record
  // comes here only when its own slot is that one), under that slot's canonical tag, so every
  // operation on those states finds it; one server holds every key anyway.
  const absl::string_view tag = single_node ? absl::string_view() : redis::SlotTag(slot);
  for (const RecordSpec& r : records) {
    redis_keys.push_back(RedisRecordKey(options_.key_prefix, tag, r.key));
  }
  for (int attempt = 0; attempt < kMaxUpdateAttempts; ++attempt) {
    std::vector<std::string> get = {"MGET"};
    get.insert(get.end(), redis_keys.begin(), redis_keys.end());
    absl::StatusOr<redis::Reply> read = Command(redis_keys[0], get);
    if (!read.ok()) return read.status();
    if (read->type != redis::Reply::Type::kArray || read->elements.size() != n + m) {
      return ErrorReply("MGET", *read);
    }
    const int64_t now_us = clock.NowMicros();
    std::vector<std::optional<State>> current(n);
    std::vector<std::optional<std::string>> present(m);
    std::vector<std::string> expected(n + m);
    for (size_t i = 0; i < n + m; ++i) {
      const redis::Reply& r = read->elements[i];
      if (r.type != redis::Reply::Type::kString) continue;
      expected[i] = r.str;
      if (i < n) {
        current[i] = DecodeRedisState(r.str);
        if (!current[i]) {
          return absl::InternalError(absl::StrCat("unreadable state at ", redis_keys[i]));
        }
        continue;
      }
      absl::StatusOr<std::optional<std::string>> value = DecodeRecord(r.str, now_us, redis_keys[i]);
      if (!value.ok()) return value.status();
      present[i - n] = *std::move(value);
    }
    std::vector<std::optional<State>> writes(n);
    std::vector<std::optional<std::string>> record_writes(m);
    if (absl::Status s =
            decide(current, present, absl::MakeSpan(writes), absl::MakeSpan(record_writes));
        !s.ok()) {
      return s;
    }
    const bool writes_any =
        std::any_of(writes.begin(), writes.end(), [](const auto& w) { return w.has_value(); }) ||
        std::any_of(record_writes.begin(), record_writes.end(),
                    [](const auto& w) { return w.has_value(); });
    // What was read was one snapshot (MGET is atomic): a decision that writes nothing stands.
    if (!writes_any) return absl::OkStatus();
    std::vector<std::string> commit = {"FCALL", std::string(kRedisCommitFunction),
                                       absl::StrCat(n + m)};
    commit.insert(commit.end(), redis_keys.begin(), redis_keys.end());
    commit.push_back(absl::StrCat(n));
    commit.insert(commit.end(), expected.begin(), expected.begin() + n);
    for (size_t i = 0; i < n; ++i) {
      commit.push_back(writes[i] ? EncodeRedisState(*writes[i]) : "");
    }
    commit.insert(commit.end(), expected.begin() + n, expected.end());
    for (size_t r = 0; r < m; ++r) {
      commit.push_back(record_writes[r] ? EncodeRecord(records[r].expires_at_us, *record_writes[r])
                                        : "");
    }
    for (size_t r = 0; r < m; ++r) {
      commit.push_back(absl::StrCat(RecordExpiryMs(records[r].expires_at_us)));
    }
    absl::StatusOr<redis::Reply> done = Command(redis_keys[0], commit);
    if (!done.ok()) return done.status();
    if (done->type != redis::Reply::Type::kInteger)
      return ErrorReply("FCALL ratelimit_commit", *done);
    if (done->integer == 1) return absl::OkStatus();
  }
  return absl::AbortedError("the Redis store: too many conflicting writes");
}

}  // namespace ratelimit
