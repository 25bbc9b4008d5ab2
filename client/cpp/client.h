#ifndef RATELIMIT_CLIENT_CLIENT_H_
#define RATELIMIT_CLIENT_CLIENT_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "ratelimit/v1/ratelimit.grpc.pb.h"

namespace ratelimit {

struct ClientOptions {
  // Deadline of each call. Default 1 s.
  absl::Duration timeout = absl::Seconds(1);
  // Admin bearer token, sent with Reset and the override calls only. Default empty (they will be
  // refused).
  std::string admin_token;
};

// TLS towards the server. Files are read once, when the client is created.
struct ClientTlsOptions {
  // PEM CA bundle that verifies the server. Empty: gRPC's default roots
  // ($GRPC_DEFAULT_SSL_ROOTS_FILE_PATH, else its bundled roots).
  std::string ca_file;
  // PEM client certificate chain and its private key, for servers that require mTLS; both or
  // neither.
  std::string cert_file;
  std::string key_file;
  // The name the server certificate must carry, when it differs from the target's host (e.g. a
  // target given by IP address). Empty: the target's host.
  std::string server_name;
};

// A typed client of ratelimit.v1.RateLimitService. A gRPC error (including a deadline) comes
// back as the absl::Status with the same code and message.
//
// Thread safety: thread-safe; share one client across threads (it multiplexes one channel).
class RateLimitClient {
 public:
  // Connects (lazily) to `target` ("host:port") without TLS.
  static std::unique_ptr<RateLimitClient> Connect(const std::string& target,
                                                  ClientOptions options = {});
  // Connects (lazily) to `target` over TLS; the server's certificate must verify and name the
  // host (or tls.server_name). INVALID_ARGUMENT naming the file when a TLS file does not load.
  static absl::StatusOr<std::unique_ptr<RateLimitClient>> ConnectTls(const std::string& target,
                                                                     const ClientTlsOptions& tls,
                                                                     ClientOptions options = {});
  RateLimitClient(std::shared_ptr<grpc::Channel> channel, ClientOptions options);

  absl::StatusOr<v1::RateLimitResponse> Consume(const v1::RateLimitRequest& request);
  absl::StatusOr<v1::RateLimitResponse> Check(const v1::RateLimitRequest& request);
  absl::StatusOr<v1::RateLimitResponse> Reserve(const v1::RateLimitRequest& request);
  // Many independent Consume/Check/Reserve requests in one call (see BatchRequest): one result
  // per entry, in order, each the entry's response or its own error (BatchResult.error). The
  // returned status is the call's: an error only when the whole call failed (no entries, batch
  // bounds, transport, deadline).
  absl::StatusOr<v1::BatchResponse> Batch(const v1::BatchRequest& request);
  // Resets one key of `name` / every key of `name` (administrative; needs admin_token). Returns
  // how many states the server deleted (ResetResponse.deleted). NOT_FOUND when `name` is not in
  // the server's limits file; PERMISSION_DENIED "Reset is disabled" from a server without an
  // admin token.
  absl::StatusOr<uint64_t> Reset(const std::string& name, const std::string& key);
  absl::StatusOr<uint64_t> ResetAll(const std::string& name);
  // Any Reset: of another source (inline limits, Envoy rules; see ResetRequest.source).
  absl::StatusOr<uint64_t> Reset(const v1::ResetRequest& request);
  // The same call, answering the whole ResetResponse: `deleted` and, of those, `leases`.
  absl::StatusOr<v1::ResetResponse> ResetDetailed(const v1::ResetRequest& request);

  // ratelimit.v1.OverrideService (administrative, like Reset: each sends admin_token):
  // runtime overrides of the limits file's limits and their audit history
  // (docs/overrides.md).
  absl::StatusOr<v1::SetOverrideResponse> SetOverride(const v1::SetOverrideRequest& request);
  absl::StatusOr<v1::DeleteOverrideResponse> DeleteOverride(
      const v1::DeleteOverrideRequest& request);
  absl::StatusOr<v1::GetOverrideResponse> GetOverride(const v1::GetOverrideRequest& request);
  absl::StatusOr<v1::ListOverridesResponse> ListOverrides(const v1::ListOverridesRequest& request);
  absl::StatusOr<v1::ListOverrideAuditResponse> ListOverrideAudit(
      const v1::ListOverrideAuditRequest& request);

  // Concurrency limits (docs/leases.md): Acquire takes slots for a lease (a denial is a response
  // with allowed = false, not an error); Release gives them back and Extend pushes the expiry
  // (each answers NOT_HELD for a lease that is not held); ListLeases is administrative (sends
  // admin_token).
  absl::StatusOr<v1::AcquireResponse> Acquire(const v1::AcquireRequest& request);
  absl::StatusOr<v1::ReleaseResponse> Release(const v1::ReleaseRequest& request);
  absl::StatusOr<v1::ExtendResponse> Extend(const v1::ExtendRequest& request);
  absl::StatusOr<v1::ListLeasesResponse> ListLeases(const v1::ListLeasesRequest& request);

  // The server's grpc.health.v1 status (`service` empty: the server as a whole): OK when it is
  // SERVING, UNAVAILABLE naming the status otherwise (NOT_SERVING while its store fails or it is
  // shutting down), the call's error when it does not answer.
  absl::Status Health(const std::string& service = "");
  // Settles receipts of earlier allowed calls with what was really used (see SettleRequest).
  absl::StatusOr<v1::SettleResponse> Settle(const v1::SettleRequest& request);
  // Settles every receipt of `response` with `used` (0: cancels what it took).
  absl::StatusOr<v1::SettleResponse> SettleAll(const v1::RateLimitResponse& response, double used);

  // Reserves, then waits until the reservation's retry_at before returning, so that the caller
  // can run its pre-paid work as soon as it returns. A denied reservation returns at once with
  // the response (allowed = false). `sleep_until` waits for an absolute time; the default
  // sleeps on the real clock (tests pass a fake). When the reservation's retry_at is after
  // `give_up_at` (the caller would give up before its work may run), the reservation is
  // cancelled at once (Settle with used = 0) and DEADLINE_EXCEEDED is returned; if the
  // cancellation itself fails, its error is returned instead.
  using SleepUntil = std::function<void(absl::Time)>;
  // The live RLQS assignments of a bucket or a domain (administrative, like Reset: sends
  // admin_token; see GetRlqsAssignmentsRequest). FAILED_PRECONDITION from a server without
  // --rlqs.
  absl::StatusOr<v1::GetRlqsAssignmentsResponse> GetRlqsAssignments(
      const v1::GetRlqsAssignmentsRequest& request);

  absl::StatusOr<v1::RateLimitResponse> ReserveAndWait(
      const v1::RateLimitRequest& request, const SleepUntil& sleep_until = nullptr,
      absl::Time give_up_at = absl::InfiniteFuture());

 private:
  void Prepare(grpc::ClientContext* context) const;
  // Prepare, plus the admin token when there is one.
  void PrepareAdmin(grpc::ClientContext* context) const;
  absl::StatusOr<uint64_t> SendReset(const v1::ResetRequest& request);

  std::unique_ptr<v1::RateLimitService::Stub> stub_;
  std::unique_ptr<v1::OverrideService::Stub> override_stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_stub_;
  std::unique_ptr<v1::RlqsAdminService::Stub> rlqs_admin_stub_;
  const ClientOptions options_;
};

// One-limit request, for the common case.
v1::RateLimitRequest MakeRequest(const std::string& name, const std::string& key, double count = 1);

// Appends an entry of `method` for `request` to `batch`.
void AddBatchEntry(v1::BatchRequest* batch, v1::BatchEntry::Method method,
                   const v1::RateLimitRequest& request);

// The retry_at of a response as an absl::Time (InfinitePast when unset).
absl::Time RetryAt(const v1::RateLimitResponse& response);

}  // namespace ratelimit

#endif  // RATELIMIT_CLIENT_CLIENT_H_
