#ifndef RATELIMIT_SERVER_V1_SETTLE_H_
#define RATELIMIT_SERVER_V1_SETTLE_H_

// Receipts, Settle and request_id for the ratelimit.v1 API: validation of Settle requests, the
// receipts added to allowed answers, and the remembered answers of retried requests. Pure
// conversions (no I/O), so each is tested without a server.

#include <array>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ratelimit/v1/ratelimit.pb.h"
#include "server/config/watched_config.h"
#include "server/v1/limits_file.h"
#include "server/v1/receipt.h"
#include "storage/limiter.h"

namespace ratelimit {

inline constexpr size_t kMaxRequestIdBytes = 128;
inline constexpr int kMaxSettlementsPerRequest = 16;

// Receipts and request_id settings of the v1 service. A plain value; `keys` and `clock` are not
// owned and must outlive the service.
struct SettleOptions {
  // The receipt keys in force (reloaded by the server). Null: no receipts are issued and Settle
  // answers FAILED_PRECONDITION.
  const ConfigSnapshot<ReceiptKeys>* keys = nullptr;
  // A receipt older than this is refused by Settle; spent receipts are remembered this long.
  int64_t receipt_ttl_us = int64_t{3600} * 1000000;
  // How long the answer to a request carrying a request_id is remembered.
  int64_t request_id_ttl_us = int64_t{600} * 1000000;
  // Time for receipt expiry and record expiry (the limiter's clock).
  const Clock* clock = &SystemClock::Default();
};

// The record key of a request_id, and the fingerprint of the request it names: the method and
// the limits exactly as the caller sent them. INVALID_ARGUMENT naming request_id when too long.
absl::Status ValidateRequestId(const v1::RateLimitRequest& request);
std::string RequestIdRecordKey(absl::string_view request_id);
std::string RequestFingerprint(absl::string_view method, const v1::RateLimitRequest& request);

// The bytes remembered for a request_id: fingerprint then the serialized response.
std::string RememberedAnswer(absl::string_view fingerprint, const v1::RateLimitResponse& response);
// The remembered response, marked replayed; INVALID_ARGUMENT naming request_id when the
// remembered request had another fingerprint.
absl::StatusOr<v1::RateLimitResponse> ReplayAnswer(absl::string_view remembered,
                                                   absl::string_view fingerprint);

// Adds a receipt to every result of an allowed Consume or Reserve. `ids`: one per limit.
void AddReceipts(const ReceiptKeys& keys, const Verdict& verdict,
                 absl::Span<const LimitRequest> limits, Mode mode,
                 const std::vector<std::array<uint8_t, 16>>& ids, v1::RateLimitResponse* response);

// Validates a Settle request and resolves each receipt to what it settles. Errors name the
// field: INVALID_ARGUMENT (sizes, used, a receipt malformed, forged, altered, signed by an
// unknown key or named twice), FAILED_PRECONDITION (a receipt older than receipt_ttl, or of a
// limits-file limit that is no longer defined).
absl::StatusOr<std::vector<SettleItem>> SettleFromProto(const v1::SettleRequest& request,
                                                        const ReceiptKeys& keys,
                                                        const LimitSet& limits,
                                                        int64_t receipt_ttl_us, int64_t now_us);

// Fills `response` from a settle verdict on `items`.
void SettleToProto(const SettleVerdict& verdict, const std::vector<SettleItem>& items,
                   v1::SettleResponse* response);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_V1_SETTLE_H_
