#ifndef RATELIMIT_STORAGE_REDIS_REDIS_RECORD_FORMAT_H_
#define RATELIMIT_STORAGE_REDIS_REDIS_RECORD_FORMAT_H_

// The bytes the Redis store keeps in the key of an idempotency record (RecordSpec): a record
// "<expires_at_us> <value>", or, while a request_id is being answered across slots, a claim
// "P<generation> <lease_until_us> <owner> <incarnation>". The keys themselves are named by
// redis_function_library.h (RedisRecordKey, RedisRequestRecordKey). Internal to the Redis backend.

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ratelimit::redis_internal {

// A record as stored: "<expires_at_us> <value>".
std::string EncodeRecord(int64_t expires_at_us, absl::string_view value);

// The value of a stored record, nullopt when it has expired at `now_us`; an error when `raw` is
// not a record (ABORTED for a claim: the request is in progress elsewhere; INTERNAL naming
// `redis_key` otherwise).
absl::StatusOr<std::optional<std::string>> DecodeRecord(absl::string_view raw, int64_t now_us,
                                                        absl::string_view redis_key);

// The millisecond at which Redis may drop a record that expires at `expires_at_us`: never before.
int64_t RecordExpiryMs(int64_t expires_at_us);

// A claim on the record of a request_id (ApplyRecorded across slots), stored in the record's
// place until the answer replaces it: "P<generation> <lease_until_us> <owner> <incarnation>".
// The incarnation is the owner of generation 1, kept by takeovers: it names the holds of this
// use of the id, so that a new use after the record expired never re-uses an old use's takes.
// (A claim of three fields has an empty incarnation.)
struct Claim {
  int64_t generation = 0;
  int64_t lease_until_us = 0;
  std::string incarnation;
};

std::string EncodeClaim(int64_t generation, int64_t lease_until_us, absl::string_view owner,
                        absl::string_view incarnation);

// The claim `raw` holds; nullopt when it holds none (a record, or something unreadable).
std::optional<Claim> ParseClaim(absl::string_view raw);

}  // namespace ratelimit::redis_internal

#endif  // RATELIMIT_STORAGE_REDIS_REDIS_RECORD_FORMAT_H_
