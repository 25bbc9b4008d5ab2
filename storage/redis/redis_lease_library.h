#ifndef RATELIMIT_STORAGE_REDIS_REDIS_LEASE_LIBRARY_H_
#define RATELIMIT_STORAGE_REDIS_REDIS_LEASE_LIBRARY_H_

// The Redis side of a concurrency limit (storage/leases/lease.h): where a key's lease set lives,
// the FCALL of a LeaseOperation (ratelimit_lease, storage/redis/leases.lua) and the LeaseOutcome
// its reply gives. Internal to the Redis backend and its tests.

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "storage/apply.h"
#include "storage/leases/lease.h"
#include "storage/redis/cluster/redis_reply.h"

namespace ratelimit {

inline constexpr absl::string_view kRedisLeaseFunction = "ratelimit_lease";

// The two Redis keys of a concurrency key's lease set, both in the slot of the key's state
// (RedisKeyFor with the same hash tag): "<state key's braces>Lz<identity>" (a sorted set of the
// lease ids by expiry) and "<state key's braces>Lh<identity>" (a hash of the leases, their
// request_ids and the slots held). No state, record, secret, override or board key has this
// shape (after the braces a state has its identity, which starts with a source byte; a record
// "rec:"). REQUIRES: ValidateRedisKeyPrefix(prefix) is OK.
struct RedisLeaseKeys {
  std::string expiries;
  std::string leases;
};
RedisLeaseKeys RedisLeaseKeysFor(absl::string_view prefix, const StateKey& key,
                                 absl::string_view hash_tag);

// The lease set whose expiries key is `redis_key`: its concurrency key and its two keys (exactly
// RedisLeaseKeysFor the key and its own tag). nullopt for any other key: of another shape, or of
// this shape under a tag that is not its key's.
struct RedisLeaseSet {
  StateKey key;
  RedisLeaseKeys keys;
};
std::optional<RedisLeaseSet> ParseRedisLeaseSet(absl::string_view prefix,
                                                absl::string_view redis_key);

// A SCAN MATCH pattern covering the expiries key of every key of (`source`, `name`), tagged or
// not. It may match other keys too: check each with ParseRedisLeaseSet.
std::string RedisLeaseNamePattern(absl::string_view prefix, LimitSource source,
                                  absl::string_view name);

// A SCAN MATCH pattern covering the expiries key of every lease set under `prefix`. It may match
// other keys too: check each with ParseRedisLeaseSet.
std::string RedisLeaseKeysPattern(absl::string_view prefix);

// The command counting the leases of the set whose expiries key is `expiries` that expired by
// `now_us` less than kLeaseRecordMarginMicros ago (storage/leases/apply_lease.h): a ZCOUNT, whose
// integer reply is the count. For the leak search (StateStore::FindLeakedLeaseKeys).
std::vector<std::string> RedisExpiredLeasesCommand(const std::string& expiries, int64_t now_us);

// The command deleting the lease set whose keys are `expiries` and `leases` (one slot) and
// answering 1 when it held a lease at its deletion (not released, its expiry after the time),
// else 0: an EVAL, at the primary's TIME, or at `now_us` when not empty (tests). For a reset of
// every key of a concurrency limit (StateStore::DeleteAllLeases), which counts the keys it ended
// a lease of, as the other stores do.
std::vector<std::string> RedisDeleteLeaseSetCommand(const std::string& expiries,
                                                    const std::string& leases,
                                                    const std::string& now_us);

// The FCALL of `op` over its lease set `keys` and, for an acquire, the rate limits' distinct
// states `rate_keys` (DistinctKeys(op.limits)) at `rate_redis_keys`. `now_override_us`: the
// decision's time instead of the primary's TIME (tests). REQUIRES: op is valid (LeaseOp).
std::vector<std::string> RedisLeaseCommand(const LeaseOperation& op, const RedisLeaseKeys& keys,
                                           const OperationKeys& rate_keys,
                                           absl::Span<const std::string> rate_redis_keys,
                                           std::optional<int64_t> now_override_us);

// The outcome of `op` from the function's reply: the lease decision as the library made it
// (LeaseDecision::next is left empty: the set stays in Redis; `write` says whether the call
// wrote), and the rate limits' decisions by storage/algebra on the states the library read, after
// checking that it allowed and wrote exactly what the algebra does (as RedisApplyOutcome).
// INTERNAL for an error reply, a malformed reply or a disagreement.
absl::StatusOr<LeaseOutcome> RedisLeaseOutcome(const LeaseOperation& op,
                                               const OperationKeys& rate_keys,
                                               const redis::Reply& reply);

// One lease as the library stores it in the hash, and back (nullopt when malformed, or when `id`,
// the hash field, is not a lease id's 32 lowercase hex digits).
std::string EncodeRedisLease(const Lease& lease);
std::optional<Lease> DecodeRedisLease(absl::string_view id, absl::string_view text);

// The lease set in an HGETALL reply of a leases key (the lease fields; the request_id index and
// the held counter skipped), ordered by id. INTERNAL when a lease is unreadable.
absl::StatusOr<LeaseSet> RedisLeaseSetFromHash(const redis::Reply& hgetall);

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_REDIS_REDIS_LEASE_LIBRARY_H_
