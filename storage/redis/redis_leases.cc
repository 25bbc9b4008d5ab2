#include "storage/redis/redis_state_store.h"

// RedisStateStore: concurrency limits. One FCALL ratelimit_lease per LeaseOperation, in the slot
// of the concurrency key's state (storage/redis/leases.lua, redis_lease_library.h).

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "storage/leases/lease.h"
#include "storage/redis/cluster/redis_slot.h"
#include "storage/redis/redis_lease_library.h"
#include "storage/redis/redis_router.h"
#include "storage/status_util.h"

namespace ratelimit {
namespace {

// What LeaseOp and LeaseOperation require, as INVALID_ARGUMENT naming the field (the fields as
// the other stores name them, storage/leases/apply_lease.h).
absl::Status ValidateLeaseOperation(const LeaseOperation& op) {
  const LeaseOp& l = op.lease;
  // The library keeps a lease under its id's digits as a field of the set's hash, beside the
  // fields '#' (the slots held) and 'r:<request_id>', and returns a lease as "<id> <lease>": hex
  // digits never name another field or split a reply.
  if (absl::Status s = ValidateLeaseOp(l); !s.ok()) return s;
  if (!op.limits.empty() && l.action != LeaseAction::kAcquire) {
    return InvalidField("limits", "rate limits are taken only with an acquire");
  }
  if (op.limits.size() > static_cast<size_t>(kMaxLimitsPerRequest)) {
    return InvalidField("limits", absl::StrCat("at most ", kMaxLimitsPerRequest));
  }
  for (size_t i = 0; i < op.limits.size(); ++i) {
    const LimitOp& limit = op.limits[i];
    const std::string field = absl::StrCat("limits[", i, "].");
    if (limit.config.kind == LimitKind::kConcurrency) {
      return InvalidField(field, "config.kind", "one concurrency limit per lease operation");
    }
    if (absl::Status s = ValidateLimitConfig(limit.config, field + "config."); !s.ok()) return s;
    if (!(limit.count > 0) || !(limit.count <= kMaxAmount) || limit.settle) {
      return InvalidField(field, "count", "must be finite and > 0, and not a settlement");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> RedisStateStore::LeaseCommand(const LeaseOperation& op,
                                                                       OperationKeys* rate_keys,
                                                                       std::string* routing_key) {
  if (closed_.load()) return absl::UnavailableError("the Redis store is closed");
  if (absl::Status s = ValidateLeaseOperation(op); !s.ok()) return s;
  RedisLeaseKeys lease_keys =
      RedisLeaseKeysFor(options_.key_prefix, op.lease.key, RedisHashTagOfKey(op.lease.key.key));
  *rate_keys = DistinctKeys(op.limits);
  std::vector<std::string> rate_redis_keys;
  rate_redis_keys.reserve(rate_keys->keys.size());
  for (const StateKey& k : rate_keys->keys) rate_redis_keys.push_back(KeyFor(k));
  if (!router_->SingleNode()) {
    const int slot = redis::KeySlot(lease_keys.expiries);
    for (size_t i = 0; i < op.limits.size(); ++i) {
      if (redis::KeySlot(rate_redis_keys[rate_keys->slot_of[i]]) == slot) continue;
      return NotOneTransactionError(absl::StrCat(
          "the Redis store: on a Redis Cluster, the rate limits of an acquire must share the hash "
          "slot of its concurrency key; limits[",
          op.RequestIndexOf(i), "] (", op.limits[i].key.name, " / ", op.limits[i].key.key,
          ") does not (give ", op.lease.key.name,
          "'s key and its key one hash tag, e.g. \"{org7}user42\" and \"{org7}\")"));
    }
  }
  std::optional<int64_t> now;
  if (options_.clock_override != nullptr) now = options_.clock_override->NowMicros();
  std::vector<std::string> argv =
      RedisLeaseCommand(op, lease_keys, *rate_keys, rate_redis_keys, now);
  *routing_key = std::move(lease_keys.expiries);
  return argv;
}

absl::StatusOr<LeaseOutcome> RedisStateStore::ApplyLease(const LeaseOperation& op, const Clock&) {
  OperationKeys rate_keys;
  std::string routing_key;
  absl::StatusOr<std::vector<std::string>> argv = LeaseCommand(op, &rate_keys, &routing_key);
  if (!argv.ok()) return argv.status();
  absl::StatusOr<redis::Reply> reply = Command(routing_key, *std::move(argv));
  if (!reply.ok()) return reply.status();
  absl::StatusOr<LeaseOutcome> outcome = RedisLeaseOutcome(op, rate_keys, *reply);
  // Numbered once answered, on the caller's thread: in Redis's order unless another thread's
  // answer on the key is numbered between its reply and this line.
  if (outcome.ok()) outcome->lease.seq = NextLeaseDecisionSeq();
  return outcome;
}

void RedisStateStore::ApplyLeaseAsync(const LeaseOperation& op, const Clock&, LeaseDone done) {
  // What the reply is checked against, owned until it arrives (`op` lives only for this call).
  struct Call {
    LeaseOp lease;
    std::vector<LimitOp> limits;
    OperationKeys rate_keys;
    LeaseDone done;
  };
  auto call = std::make_shared<Call>();  // the client's callbacks are copyable
  std::string routing_key;
  absl::StatusOr<std::vector<std::string>> argv = LeaseCommand(op, &call->rate_keys, &routing_key);
  if (!argv.ok()) {
    std::move(done)(argv.status());
    return;
  }
  call->lease = op.lease;
  call->limits.assign(op.limits.begin(), op.limits.end());
  call->done = std::move(done);
  router_->Send(routing_key, *std::move(argv), [call](absl::StatusOr<redis::Reply> reply) {
    if (!reply.ok()) {
      std::move(call->done)(reply.status());
      return;
    }
    absl::StatusOr<LeaseOutcome> outcome =
        RedisLeaseOutcome(LeaseOperation{call->lease, call->limits}, call->rate_keys, *reply);
    // Numbered as its reply is read: the client reads a node's replies on its one I/O thread in
    // the order the node ran the commands, so this server's decisions on a key are numbered in
    // the order Redis made them, whichever serving thread each answer goes back to.
    if (outcome.ok()) outcome->lease.seq = NextLeaseDecisionSeq();
    std::move(call->done)(std::move(outcome));
  });
}

absl::StatusOr<uint64_t> RedisStateStore::DeleteAllLeases(LimitSource source,
                                                          absl::string_view name,
                                                          int64_t /*now_us*/) {
  if (closed_.load()) return absl::UnavailableError("the Redis store is closed");
  // A set's two keys share a slot: one script deletes both, ordered with every ratelimit_lease
  // on it, and answers whether the set held a lease at the primary's time (as the decisions
  // judge expiry), or at the test clock's.
  const std::string now = options_.clock_override != nullptr
                              ? absl::StrCat(options_.clock_override->NowMicros())
                              : std::string();
  return DeleteScannedBy(
      RedisLeaseNamePattern(options_.key_prefix, source, name),
      [&](const std::string& found) -> std::vector<std::string> {
        std::optional<RedisLeaseSet> set = ParseRedisLeaseSet(options_.key_prefix, found);
        if (!set || set->key.source != source || set->key.name != name) return {};
        return {std::move(set->keys.expiries), std::move(set->keys.leases)};
      },
      [&](std::vector<std::string> keys) {
        return RedisDeleteLeaseSetCommand(keys[0], keys[1], now);
      });
}

absl::StatusOr<StateStore::LeakedLeaseKeys> RedisStateStore::FindLeakedLeaseKeys(
    absl::string_view cursor, int64_t now_us) {
  if (closed_.load()) return absl::UnavailableError("the Redis store is closed");
  const std::vector<std::string> primaries = router_->Primaries();
  size_t node = 0;
  std::string scan = "0";
  if (!cursor.empty()) {
    const std::vector<std::string> parts = absl::StrSplit(cursor, ' ');
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &node) || parts[1].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("malformed leak cursor \"", cursor, "\""));
    }
    scan = parts[1];
  }
  LeakedLeaseKeys page;
  if (node >= primaries.size()) return page;  // the cluster shrank: the search is over
  absl::StatusOr<ScannedPage> scanned =
      ScanPage(primaries[node], scan, RedisLeaseKeysPattern(options_.key_prefix), kLeakScanCount);
  if (!scanned.ok()) return scanned.status();
  if (scanned->next != "0") {
    page.next = absl::StrCat(node, " ", scanned->next);
  } else if (node + 1 < primaries.size()) {
    page.next = absl::StrCat(node + 1, " 0");
  }
  std::vector<StateKey> sets;
  std::vector<std::string> expiries;
  for (const std::string& found : scanned->keys) {
    std::optional<RedisLeaseSet> set = ParseRedisLeaseSet(options_.key_prefix, found);
    if (!set) continue;
    sets.push_back(std::move(set->key));
    expiries.push_back(std::move(set->keys.expiries));
  }
  redis_internal::Replies counts(sets.size());
  for (size_t i = 0; i < sets.size(); ++i) {
    router_->Send(expiries[i], RedisExpiredLeasesCommand(expiries[i], now_us), counts.For(i));
  }
  std::vector<absl::StatusOr<redis::Reply>>& due = counts.Wait();
  for (size_t i = 0; i < sets.size(); ++i) {
    if (!due[i].ok()) return due[i].status();
    if (due[i]->type != redis::Reply::Type::kInteger)
      return redis_internal::ErrorReply("ZCOUNT", *due[i]);
    if (due[i]->integer > 0) page.keys.push_back(std::move(sets[i]));
  }
  return page;
}

}  // namespace ratelimit
