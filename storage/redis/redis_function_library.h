#ifndef RATELIMIT_STORAGE_REDIS_REDIS_FUNCTION_LIBRARY_H_
#define RATELIMIT_STORAGE_REDIS_REDIS_FUNCTION_LIBRARY_H_

// The Redis side of a decision: the key layout, the function library (storage/redis/
// ratelimit.lua, compiled into the binary) and its loading, the FCALL arguments of an Operation,
// and the check that turns the function's reply into an Outcome computed by storage/algebra.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "storage/apply.h"
#include "storage/redis/redis_command_runner.h"
#include "storage/state_store.h"

namespace ratelimit {

inline constexpr absl::string_view kRedisLibraryName = "ratelimit";
// Must equal LIBRARY_VERSION in ratelimit.lua; bump both whenever the library (either file)
// changes.
inline constexpr absl::string_view kRedisLibraryVersion = "13";
inline constexpr absl::string_view kRedisApplyFunction = "ratelimit_apply";
inline constexpr absl::string_view kRedisVersionFunction = "ratelimit_version";
inline constexpr absl::string_view kRedisCompareAndSetFunction = "ratelimit_compare_and_set";
inline constexpr absl::string_view kRedisCommitFunction = "ratelimit_commit";
inline constexpr absl::string_view kRedisTakeHeldFunction = "ratelimit_take_held";
inline constexpr absl::string_view kRedisRefundFunction = "ratelimit_refund";
inline constexpr absl::string_view kRedisTakeRecordedFunction = "ratelimit_take_recorded";

// Every time at or past this (microseconds) is "never" in the library: doubles represent every
// integer below it exactly. A full_at this far away is stored as never (the state gets no expiry)
// and read back as INT64_MAX.
inline constexpr int64_t kRedisTimeHorizonUs = int64_t{1} << 53;

// The text of the library: storage/redis/ratelimit.lua, then storage/redis/leases.lua.
absl::string_view RedisLibraryCode();

// Whether `prefix` may start Redis keys: no '{' or '}' (they would choose the hash slot).
absl::Status ValidateRedisKeyPrefix(absl::string_view prefix);

// The Redis key of a state: `prefix` "{" tag "}" [identity]. The identity is the source byte, the
// name's length in decimal, ':', the name, then the key. With an empty `hash_tag` the tag is the
// identity itself (each state in its own slot) and nothing follows the braces; otherwise the tag is
// `hash_tag` (states of one tag share a slot) and the identity follows. Inside the braces '%', '{'
// and '}' are written %25, %7B, %7D, so the first '}' always closes the tag and the encoding is
// one-to-one. REQUIRES: ValidateRedisKeyPrefix(prefix) is OK.
std::string RedisKeyFor(absl::string_view prefix, const StateKey& key, absl::string_view hash_tag);

// The hash tag the Redis store places a state of `key` (a limit's key, e.g. "{org7}user42") under:
// the text between its first '{' and the first '}' after it, as Redis Cluster's own rule reads a
// key; "" (the state's own slot) when there is no such pair or the text is empty. States whose keys
// carry the same tag share a slot, whatever their limit names: a request on them all is one
// atomic call.
absl::string_view RedisHashTagOfKey(absl::string_view key);

// The Redis key of an idempotency record (RecordSpec::key): `prefix` "{" hash_tag "}rec:" key. The
// tag places it: a spent receipt lives in the slot of its state, a request_id's record in a slot of
// its own (RedisRequestRecordKey). REQUIRES: ValidateRedisKeyPrefix(prefix) is OK; `hash_tag` has
// no '}'.
std::string RedisRecordKey(absl::string_view prefix, absl::string_view hash_tag,
                           absl::string_view record_key);

// The Redis key of a request_id's record on a Redis Cluster: in the slot of the record key itself
// (the slot of its standalone key, RedisRecordKey(prefix, "", record_key)), under that slot's
// canonical tag (redis::SlotTag). Every request with the id meets that record, whatever the slots
// of its limits. REQUIRES: ValidateRedisKeyPrefix(prefix) is OK.
std::string RedisRequestRecordKey(absl::string_view prefix, absl::string_view record_key);

// The Redis key of the store's secret `name` (StateStore::Secret): `prefix` "{secret:" name "}",
// the name escaped as in RedisKeyFor. REQUIRES: ValidateRedisKeyPrefix(prefix) is OK.
std::string RedisSecretKey(absl::string_view prefix, absl::string_view name);

// The state a key of RedisKeyFor(prefix, ...) belongs to, whatever its tag; nullopt for any other
// key.
std::optional<StateKey> ParseRedisKey(absl::string_view prefix, absl::string_view redis_key);

// `text` as a SCAN MATCH pattern matches it: each of the glob's special characters escaped.
std::string RedisGlobEscape(absl::string_view text);

// SCAN MATCH patterns that together cover every key of (`source`, `name`): untagged keys, then
// tagged ones. They may match other keys too: check each with ParseRedisKey.
std::vector<std::string> RedisNamePatterns(absl::string_view prefix, LimitSource source,
                                           absl::string_view name);

// A state as the library stores it: "<value> <ts_us> <full_at_us>", then " <counted_against>" when
// it is set (a fixed window), each '%.17g' (exact).
std::string EncodeRedisState(const State& state);
// nullopt when `text` is not such an encoding. A full_at at or past the horizon reads as INT64_MAX.
std::optional<State> DecodeRedisState(absl::string_view text);

// Makes the server run this build's library: asks FUNCTION LIST LIBRARYNAME for it and, when it
// is missing or reports another version, loads it with FUNCTION LOAD REPLACE. Returns whether it
// loaded. Errors: UNAVAILABLE from the connection, INTERNAL naming the server's error reply.
absl::StatusOr<bool> EnsureRedisLibrary(RedisCommandRunner& connection);

// The FCALL of `op` over the keys `redis_keys` (one per key of DistinctKeys(op.limits), all of
// one slot). `now_override_us`: the decision's time instead of the server's TIME (tests).
std::vector<std::string> RedisApplyCommand(const Operation& op, const OperationKeys& keys,
                                           absl::Span<const std::string> redis_keys,
                                           std::optional<int64_t> now_override_us);

// The Outcome of `op` from the function's reply: storage/algebra run on the states the function
// read and the time it used, after checking that the function allowed exactly what the algebra
// allows and wrote exactly the states the algebra gives (value and ts bit for bit; full_at equal,
// or never when the algebra's is at or past the horizon). INTERNAL when they disagree (what the
// function wrote stays written: the error reports a defect, it does not undo it) or the reply is
// malformed; the server's error reply as INTERNAL when the call failed (nothing written then).
absl::StatusOr<Outcome> RedisApplyOutcome(const Operation& op, const OperationKeys& keys,
                                          const redis::Reply& reply);

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_REDIS_REDIS_FUNCTION_LIBRARY_H_
