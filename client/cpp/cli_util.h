#ifndef RATELIMIT_CLIENT_CPP_CLI_UTIL_H_
#define RATELIMIT_CLIENT_CPP_CLI_UTIL_H_

// What the `ratelimit` command-line tool does with its input and its errors, apart from main.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cmdline/flags_check.h"

namespace ratelimit {

// --timeout: a duration with its unit ("500ms", "2s", "1m") or a bare number of seconds ("5",
// "0.5"). INVALID_ARGUMENT naming the flag when it is neither, or not positive and finite.
absl::StatusOr<absl::Duration> ParseTimeout(absl::string_view text);

// A duration flag (--ttl, --lease_ttl, --period, --expires_in, ...), written as the limits file
// writes one: "500ms", "30s", "1h30m", "7d" (server/config/duration_text.h). INVALID_ARGUMENT
// "<flag>: not a duration: ..." otherwise.
absl::StatusOr<absl::Duration> ParseDurationFlag(absl::string_view flag, absl::string_view text);

// `error` of a call, with a hint appended to its message when it looks like a plaintext call to
// a TLS port (gRPC says only "Socket closed") or a TLS call to a plaintext port (the handshake
// fails). `tls`: whether the call was made with TLS. Other errors are returned unchanged.
absl::Status WithTransportHint(const absl::Status& error, bool tls);

// `error` of an administrative call, with a hint appended when the server asked for the admin
// credential (UNAUTHENTICATED) and none was sent (`token_sent` false): where the CLI reads it.
// Other errors are returned unchanged.
absl::Status WithAdminHint(const absl::Status& error, bool token_sent);

// --bucket of `rlqs assignments`: an RLQS BucketId as comma-separated key=value items, a ',',
// '=' or '\' inside a key or value escaped by a '\' (a value may also hold a bare '='), as
// FormatBucketId (output.h) prints them. INVALID_ARGUMENT naming the flag for an item without '=',
// an empty key, a key given twice or a '\' that escapes nothing.
absl::StatusOr<std::map<std::string, std::string>> ParseBucketPairs(absl::string_view text);

// The first of `given` that `command` ("consume", "rlqs assignments", "override set", ...) does
// not take, or "" when it takes them all. Every command takes the connection's flags (--target,
// --tls*, --timeout, --json); the others are listed per command, so that a flag a command would
// drop unseen is refused instead. "" for a command that is not one (its usage is the error).
std::string FlagNotTaken(absl::string_view command, const std::vector<std::string>& given);

}  // namespace ratelimit

#endif  // RATELIMIT_CLIENT_CPP_CLI_UTIL_H_
