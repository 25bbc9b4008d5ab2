#ifndef RATELIMIT_SERVER_RLQS_RLQS_ADMIN_SERVICE_H_
#define RATELIMIT_SERVER_RLQS_RLQS_ADMIN_SERVICE_H_

// ratelimit.v1.RlqsAdminService/GetRlqsAssignments: an operator's view of the RLQS service's live
// assignments (one bucket of a domain, or every bucket of a domain a page at a time): each
// bucket's rule and, per subscribed stream, its peer, demand estimate and the assignment it holds.
//
// Authorized as Reset is (AdminAuthenticator: the bearer token or an admin certificate
// identity); a refusal is logged with the caller's address. Without --rlqs every authorized call
// is FAILED_PRECONDITION. Served by the ServingLoop (serving_loop.h) like the other unary
// services, registered raw (parsed_unary.h): a body that does not parse is INVALID_ARGUMENT. The
// handler is thin: it checks and converts the request (ParseRlqsAssignmentsRequest), reads the
// view (RlqsService::Assignments) and converts it back (RlqsAssignmentsToProto).

#include <cstddef>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"
#include "ratelimit/v1/ratelimit.grpc.pb.h"
#include "server/admin/admin_auth.h"
#include "server/observability/repeated_log.h"
#include "server/observability/telemetry.h"
#include "server/rlqs/rlqs_service.h"
#include "server/serving/serving_loop.h"

namespace ratelimit {

// The bounds of a request (a domain and a bucket as a stream's, rlqs_convert.h).
inline constexpr size_t kDefaultRlqsPageSize = 100;
inline constexpr size_t kMaxRlqsPageSize = 1000;

// A checked GetRlqsAssignmentsRequest.
struct RlqsAssignmentsQuery {
  std::string domain;
  std::optional<RlqsBucketKey> bucket;  // one bucket; else the domain's, a page at a time
  size_t page_size = kDefaultRlqsPageSize;
  std::optional<RlqsBucketKey> after;  // the page resumes after this bucket (page_token)
};

// Checks and converts a request: INVALID_ARGUMENT naming the field (domain, bucket, page_size,
// page_token) when it breaks the bounds of ratelimit.proto.
absl::StatusOr<RlqsAssignmentsQuery> ParseRlqsAssignmentsRequest(
    const v1::GetRlqsAssignmentsRequest& request);

// The page token that resumes after `bucket`, and back (INVALID_ARGUMENT naming page_token for a
// token this server did not make). Opaque to callers: web-safe base64 of the bucket's pairs.
std::string RlqsPageToken(const RlqsBucketKey& bucket);
absl::StatusOr<RlqsBucketKey> ParseRlqsPageToken(absl::string_view token);

// `view` as the response; `next_page_token` is left to the caller.
void RlqsAssignmentsToProto(const RlqsService::AssignmentsView& view,
                            v1::GetRlqsAssignmentsResponse* out);

// Thread safety: thread-safe. Ownership: none; `rlqs` (null when the server runs without
// --rlqs), `admin` and `telemetry` must outlive the service.
class RlqsAdminServiceImpl final
    : public v1::RlqsAdminService::WithRawMethod_GetRlqsAssignments<v1::RlqsAdminService::Service>,
      public ServingLoop::Handler {
 public:
  static constexpr int kGetRlqsAssignmentsMethod = 0;

  RlqsAdminServiceImpl(const RlqsService* rlqs, const AdminAuthenticator& admin,
                       const Telemetry& telemetry)
      : rlqs_(rlqs), admin_(admin), telemetry_(telemetry) {}

  // ServingLoop::Handler.
  void RequestCall(LoopCall* call, grpc::ServerCompletionQueue* cq) override;
  void OnCall(LoopCall* call, ServingLoop::Burst* burst) override;

 private:
  grpc::Status Handle(const grpc::ServerContext& context,
                      const v1::GetRlqsAssignmentsRequest* request,
                      v1::GetRlqsAssignmentsResponse* response);

  const RlqsService* const rlqs_;
  const AdminAuthenticator& admin_;
  const Telemetry& telemetry_;
  mutable RepeatedLog refused_log_{LogLevel::kWarning, "rlqs assignments refused"};
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_RLQS_RLQS_ADMIN_SERVICE_H_
