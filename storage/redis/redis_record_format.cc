#include "storage/redis/redis_record_format.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ratelimit::redis_internal {

std::string EncodeRecord(int64_t expires_at_us, absl::string_view value) {
  return absl::StrCat(expires_at_us, " ", value);
}

absl::StatusOr<std::optional<std::string>> DecodeRecord(absl::string_view raw, int64_t now_us,
                                                        absl::string_view redis_key) {
  if (absl::StartsWith(raw, "P")) {  // a claim of ApplyRecorded across slots
    return absl::AbortedError(
        "request_id: a request with this request_id is in progress elsewhere; retry");
  }
  const size_t space = raw.find(' ');
  int64_t expires_at_us = 0;
  if (space == absl::string_view::npos || !absl::SimpleAtoi(raw.substr(0, space), &expires_at_us)) {
    return absl::InternalError(absl::StrCat("unreadable record at ", redis_key));
  }
  if (expires_at_us <= now_us) return std::optional<std::string>();
  return std::optional<std::string>(std::string(raw.substr(space + 1)));
}

int64_t RecordExpiryMs(int64_t expires_at_us) {
  if (expires_at_us <= 0) return 1;
  return expires_at_us / 1000 + (expires_at_us % 1000 != 0 ? 1 : 0);
}

std::string EncodeClaim(int64_t generation, int64_t lease_until_us, absl::string_view owner,
                        absl::string_view incarnation) {
  return absl::StrCat("P", generation, " ", lease_until_us, " ", owner, " ", incarnation);
}

std::optional<Claim> ParseClaim(absl::string_view raw) {
  if (!absl::StartsWith(raw, "P")) return std::nullopt;
  std::vector<absl::string_view> parts = absl::StrSplit(raw.substr(1), ' ');
  Claim claim;
  if ((parts.size() != 3 && parts.size() != 4) || !absl::SimpleAtoi(parts[0], &claim.generation) ||
      !absl::SimpleAtoi(parts[1], &claim.lease_until_us)) {
    return std::nullopt;
  }
  if (parts.size() == 4) claim.incarnation = std::string(parts[3]);
  return claim;
}

}  // namespace ratelimit::redis_internal
