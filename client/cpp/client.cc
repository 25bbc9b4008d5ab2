#include "client/cpp/client.h"

#include <chrono>

#include "client/cpp/proto_time.h"
#include "server/tls/tls_files.h"

namespace ratelimit {
namespace {

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

// One unary call of a service's stub.
template <typename Stub, typename Request, typename Response>
absl::StatusOr<Response> Invoke(Stub& stub,
                                grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                                             Response*),
                                grpc::ClientContext& context, const Request& request) {
  Response response;
  if (absl::Status s = FromGrpc((stub.*method)(&context, request, &response)); !s.ok()) return s;
  return response;
}

}  // namespace

std::unique_ptr<RateLimitClient> RateLimitClient::Connect(const std::string& target,
                                                          ClientOptions options) {
  return std::make_unique<RateLimitClient>(
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials()), std::move(options));
}

absl::StatusOr<std::unique_ptr<RateLimitClient>> RateLimitClient::ConnectTls(
    const std::string& target, const ClientTlsOptions& tls, ClientOptions options) {
  grpc::SslCredentialsOptions ssl;
  if (!tls.ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadPemCertificates("--tls_ca_file", tls.ca_file);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *std::move(ca);
  }
  if (!tls.cert_file.empty() || !tls.key_file.empty()) {
    absl::StatusOr<PemKeyPair> pair =
        ReadPemKeyPair("--tls_cert_file", tls.cert_file, "--tls_key_file", tls.key_file);
    if (!pair.ok()) return pair.status();
    ssl.pem_cert_chain = std::move(pair->certificate_chain);
    ssl.pem_private_key = std::move(pair->private_key);
  }
  grpc::ChannelArguments args;
  if (!tls.server_name.empty()) args.SetSslTargetNameOverride(tls.server_name);
  return std::make_unique<RateLimitClient>(
      grpc::CreateCustomChannel(target, grpc::SslCredentials(ssl), args), std::move(options));
}

RateLimitClient::RateLimitClient(std::shared_ptr<grpc::Channel> channel, ClientOptions options)
    : stub_(v1::RateLimitService::NewStub(channel)),
      override_stub_(v1::OverrideService::NewStub(channel)),
      health_stub_(grpc::health::v1::Health::NewStub(channel)),
      rlqs_admin_stub_(v1::RlqsAdminService::NewStub(channel)),
      options_(std::move(options)) {}

void RateLimitClient::Prepare(grpc::ClientContext* context) const {
  context->set_deadline(std::chrono::system_clock::now() +
                        absl::ToChronoMicroseconds(options_.timeout));
}

absl::StatusOr<v1::RateLimitResponse> RateLimitClient::Consume(
    const v1::RateLimitRequest& request) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::RateLimitResponse response;
  if (absl::Status s = FromGrpc(stub_->Consume(&context, request, &response)); !s.ok()) return s;
  return response;
}

absl::StatusOr<v1::RateLimitResponse> RateLimitClient::Check(const v1::RateLimitRequest& request) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::RateLimitResponse response;
  if (absl::Status s = FromGrpc(stub_->Check(&context, request, &response)); !s.ok()) return s;
  return response;
}

absl::StatusOr<v1::RateLimitResponse> RateLimitClient::Reserve(
    const v1::RateLimitRequest& request) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::RateLimitResponse response;
  if (absl::Status s = FromGrpc(stub_->Reserve(&context, request, &response)); !s.ok()) return s;
  return response;
}

absl::StatusOr<v1::BatchResponse> RateLimitClient::Batch(const v1::BatchRequest& request) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::BatchResponse response;
  if (absl::Status s = FromGrpc(stub_->Batch(&context, request, &response)); !s.ok()) return s;
  return response;
}

void AddBatchEntry(v1::BatchRequest* batch, v1::BatchEntry::Method method,
                   const v1::RateLimitRequest& request) {
  v1::BatchEntry* entry = batch->add_entries();
  entry->set_method(method);
  *entry->mutable_request() = request;
}

absl::StatusOr<uint64_t> RateLimitClient::Reset(const std::string& name, const std::string& key) {
  v1::ResetRequest request;
  request.set_name(name);
  request.set_key(key);
  return SendReset(request);
}

absl::StatusOr<uint64_t> RateLimitClient::ResetAll(const std::string& name) {
  v1::ResetRequest request;
  request.set_name(name);
  request.set_all_keys(true);
  return SendReset(request);
}

absl::StatusOr<uint64_t> RateLimitClient::Reset(const v1::ResetRequest& request) {
  return SendReset(request);
}

absl::StatusOr<v1::ResetResponse> RateLimitClient::ResetDetailed(const v1::ResetRequest& request) {
  grpc::ClientContext context;
  PrepareAdmin(&context);
  return Invoke(*stub_, &v1::RateLimitService::Stub::Reset, context, request);
}

absl::Status RateLimitClient::Health(const std::string& service) {
  grpc::ClientContext context;
  Prepare(&context);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  if (absl::Status s = FromGrpc(health_stub_->Check(&context, request, &response)); !s.ok()) {
    return s;
  }
  if (response.status() == grpc::health::v1::HealthCheckResponse::SERVING) {
    return absl::OkStatus();
  }
  return absl::UnavailableError(
      grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status()));
}

void RateLimitClient::PrepareAdmin(grpc::ClientContext* context) const {
  Prepare(context);
  if (!options_.admin_token.empty()) {
    context->AddMetadata("authorization", "Bearer " + options_.admin_token);
  }
}

absl::StatusOr<uint64_t> RateLimitClient::SendReset(const v1::ResetRequest& request) {
  absl::StatusOr<v1::ResetResponse> response = ResetDetailed(request);
  if (!response.ok()) return response.status();
  return response->deleted();
}

absl::StatusOr<v1::GetRlqsAssignmentsResponse> RateLimitClient::GetRlqsAssignments(
    const v1::GetRlqsAssignmentsRequest& request) {
  grpc::ClientContext context;
  PrepareAdmin(&context);
  return Invoke(*rlqs_admin_stub_, &v1::RlqsAdminService::Stub::GetRlqsAssignments, context,
                request);
}

absl::StatusOr<v1::SetOverrideResponse> RateLimitClient::SetOverride(
    const v1::SetOverrideRequest& request) {
  grpc::ClientContext context;
  PrepareAdmin(&context);
  return Invoke(*override_stub_, &v1::OverrideService::Stub::SetOverride, context, request);
}

absl::StatusOr<v1::DeleteOverrideResponse> RateLimitClient::DeleteOverride(
    const v1::DeleteOverrideRequest& request) {
  grpc::ClientContext context;
  PrepareAdmin(&context);
  return Invoke(*override_stub_, &v1::OverrideService::Stub::DeleteOverride, context, request);
}

absl::StatusOr<v1::GetOverrideResponse> RateLimitClient::GetOverride(
    const v1::GetOverrideRequest& request) {
  grpc::ClientContext context;
  PrepareAdmin(&context);
  return Invoke(*override_stub_, &v1::OverrideService::Stub::GetOverride, context, request);
}

absl::StatusOr<v1::ListOverridesResponse> RateLimitClient::ListOverrides(
    const v1::ListOverridesRequest& request) {
  grpc::ClientContext context;
  PrepareAdmin(&context);
  return Invoke(*override_stub_, &v1::OverrideService::Stub::ListOverrides, context, request);
}

absl::StatusOr<v1::AcquireResponse> RateLimitClient::Acquire(const v1::AcquireRequest& request) {
  grpc::ClientContext context;
  Prepare(&context);
  return Invoke(*stub_, &v1::RateLimitService::Stub::Acquire, context, request);
}

absl::StatusOr<v1::ReleaseResponse> RateLimitClient::Release(const v1::ReleaseRequest& request) {
  grpc::ClientContext context;
  Prepare(&context);
  return Invoke(*stub_, &v1::RateLimitService::Stub::Release, context, request);
}

absl::StatusOr<v1::ExtendResponse> RateLimitClient::Extend(const v1::ExtendRequest& request) {
  grpc::ClientContext context;
  Prepare(&context);
  return Invoke(*stub_, &v1::RateLimitService::Stub::Extend, context, request);
}

absl::StatusOr<v1::ListLeasesResponse> RateLimitClient::ListLeases(
    const v1::ListLeasesRequest& request) {
  grpc::ClientContext context;
  PrepareAdmin(&context);
  return Invoke(*stub_, &v1::RateLimitService::Stub::ListLeases, context, request);
}

absl::StatusOr<v1::ListOverrideAuditResponse> RateLimitClient::ListOverrideAudit(
    const v1::ListOverrideAuditRequest& request) {
  grpc::ClientContext context;
  PrepareAdmin(&context);
  return Invoke(*override_stub_, &v1::OverrideService::Stub::ListOverrideAudit, context, request);
}

absl::StatusOr<v1::SettleResponse> RateLimitClient::Settle(const v1::SettleRequest& request) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::SettleResponse response;
  if (absl::Status s = FromGrpc(stub_->Settle(&context, request, &response)); !s.ok()) return s;
  return response;
}

absl::StatusOr<v1::SettleResponse> RateLimitClient::SettleAll(const v1::RateLimitResponse& response,
                                                              double used) {
  v1::SettleRequest request;
  for (const v1::LimitResult& r : response.results()) {
    if (r.receipt().empty()) continue;
    v1::Settlement* s = request.add_settlements();
    s->set_receipt(r.receipt());
    s->set_used(used);
  }
  return Settle(request);
}

absl::StatusOr<v1::RateLimitResponse> RateLimitClient::ReserveAndWait(
    const v1::RateLimitRequest& request, const SleepUntil& sleep_until, absl::Time give_up_at) {
  absl::StatusOr<v1::RateLimitResponse> response = Reserve(request);
  if (!response.ok() || !response->allowed() || !response->has_retry_at()) return response;
  const absl::Time when = RetryAt(*response);
  if (when > give_up_at) {
    absl::StatusOr<v1::SettleResponse> cancelled = SettleAll(*response, 0);
    if (!cancelled.ok()) return cancelled.status();
    return absl::DeadlineExceededError(
        "the reservation's work may only run after the caller's deadline; it was cancelled");
  }
  if (sleep_until) {
    sleep_until(when);
  } else {
    absl::SleepFor(when - absl::Now());
  }
  return response;
}

v1::RateLimitRequest MakeRequest(const std::string& name, const std::string& key, double count) {
  v1::RateLimitRequest request;
  v1::LimitRequest* limit = request.add_limits();
  limit->set_name(name);
  limit->set_key(key);
  limit->set_count(count);
  return request;
}

absl::Time RetryAt(const v1::RateLimitResponse& response) {
  if (!response.has_retry_at()) return absl::InfinitePast();
  return TimeOf(response.retry_at());
}

}  // namespace ratelimit
