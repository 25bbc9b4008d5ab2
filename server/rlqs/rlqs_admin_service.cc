#include "server/rlqs/rlqs_admin_service.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/serving/grpc_convert.h"
#include "server/serving/parsed_unary.h"

namespace ratelimit {
namespace {

constexpr char kService[] = "ratelimit.v1.RlqsAdminService";

absl::Status BadPageToken() {
  return absl::InvalidArgumentError(
      "page_token: not a page token of this server (pass next_page_token as it was returned)");
}

v1::RlqsAction ToProto(RlqsAssignment::Kind kind) {
  switch (kind) {
    case RlqsAssignment::Kind::kTokenBucket:
      return v1::RLQS_TOKEN_BUCKET;
    case RlqsAssignment::Kind::kDenyAll:
      return v1::RLQS_DENY_ALL;
    default:
      return v1::RLQS_ALLOW_ALL;
  }
}

v1::RlqsAction ToProto(RlqsRuleAction action) {
  switch (action) {
    case RlqsRuleAction::kLimit:
      return v1::RLQS_TOKEN_BUCKET;
    case RlqsRuleAction::kDenyAll:
      return v1::RLQS_DENY_ALL;
    default:
      return v1::RLQS_ALLOW_ALL;
  }
}

}  // namespace

absl::StatusOr<RlqsAssignmentsQuery> ParseRlqsAssignmentsRequest(
    const v1::GetRlqsAssignmentsRequest& request) {
  RlqsAssignmentsQuery q;
  if (request.domain().empty()) return absl::InvalidArgumentError("domain: required");
  if (absl::Status s = CheckRlqsDomain(request.domain(), "domain"); !s.ok()) return s;
  q.domain = request.domain();
  absl::StatusOr<RlqsBucketKey> bucket = ToRlqsBucketKey(request.bucket(), "bucket");
  if (!bucket.ok()) return bucket.status();
  if (!bucket->empty()) {
    q.bucket = *std::move(bucket);
    if (!request.page_token().empty()) {
      return absl::InvalidArgumentError("page_token: pages are of a domain's buckets (no bucket)");
    }
  }
  if (request.page_size() > kMaxRlqsPageSize) {
    return absl::InvalidArgumentError(absl::StrCat("page_size: at most ", kMaxRlqsPageSize));
  }
  if (request.page_size() > 0) q.page_size = request.page_size();
  if (!request.page_token().empty()) {
    absl::StatusOr<RlqsBucketKey> after = ParseRlqsPageToken(request.page_token());
    if (!after.ok()) return after.status();
    q.after = *std::move(after);
  }
  return q;
}

// Each pair as "<bytes of the key>:<key><bytes of the value>:<value>".
std::string RlqsPageToken(const RlqsBucketKey& bucket) {
  std::string raw;
  for (const auto& [k, v] : bucket) absl::StrAppend(&raw, k.size(), ":", k, v.size(), ":", v);
  return absl::WebSafeBase64Escape(raw);
}

absl::StatusOr<RlqsBucketKey> ParseRlqsPageToken(absl::string_view token) {
  std::string raw;
  if (!absl::WebSafeBase64Unescape(token, &raw)) return BadPageToken();
  absl::string_view rest = raw;
  std::vector<std::string> parts;
  while (!rest.empty()) {
    const size_t colon = rest.find(':');
    size_t n = 0;
    if (colon == absl::string_view::npos || colon == 0 || colon > 9 ||
        !absl::SimpleAtoi(rest.substr(0, colon), &n) ||
        !absl::ascii_isdigit(static_cast<unsigned char>(rest[0])) || n > rest.size() - colon - 1) {
      return BadPageToken();
    }
    parts.emplace_back(rest.substr(colon + 1, n));
    rest.remove_prefix(colon + 1 + n);
  }
  if (parts.empty() || parts.size() % 2 != 0) return BadPageToken();
  RlqsBucketKey key;
  for (size_t i = 0; i < parts.size(); i += 2) key.emplace_back(parts[i], parts[i + 1]);
  return key;
}

void RlqsAssignmentsToProto(const RlqsService::AssignmentsView& view,
                            v1::GetRlqsAssignmentsResponse* out) {
  for (const RlqsBucketView& b : view.buckets) {
    v1::RlqsBucketAssignments* bucket = out->add_buckets();
    for (const auto& [k, v] : b.key) (*bucket->mutable_bucket())[k] = v;
    v1::RlqsRule* rule = bucket->mutable_rule();
    rule->set_name(b.rule.name);
    rule->set_action(ToProto(b.rule.action));
    rule->set_rate_per_second(b.rule.rate_per_second);
    rule->set_burst(b.rule.burst);
    rule->set_shadow(b.rule.shadow);
    if (b.part) {
      bucket->mutable_replica_part()->set_rate_per_second(b.part->rate);
      bucket->mutable_replica_part()->set_burst(b.part->burst);
    }
    for (const RlqsSubscriberView& s : b.subscribers) {
      v1::RlqsSubscriber* sub = bucket->add_subscribers();
      sub->set_stream_id(s.stream);
      if (auto peer = view.peers.find(s.stream); peer != view.peers.end()) {
        sub->set_peer(peer->second);
      }
      sub->set_demand_known(s.demand.has_value());
      sub->set_demand(s.demand.value_or(0));
      SetTimestamp(s.last_report_us, sub->mutable_last_report_at());
      if (!s.has_sent) continue;
      sub->set_action(ToProto(s.sent.kind));
      if (s.sent.kind == RlqsAssignment::Kind::kTokenBucket) {
        sub->set_max_tokens(s.sent.token_bucket.max_tokens);
        sub->set_tokens_per_fill(s.sent.token_bucket.tokens_per_fill);
        sub->mutable_fill_interval()->set_seconds(s.sent.token_bucket.fill_interval_seconds);
        sub->set_assigned_rate(s.held.rate);
        sub->set_assigned_burst(s.held.burst);
      }
      sub->mutable_time_to_live()->set_seconds(s.sent.ttl_seconds);
      SetTimestamp(s.sent_at_us, sub->mutable_sent_at());
    }
  }
}

void RlqsAdminServiceImpl::RequestCall(LoopCall* call, grpc::ServerCompletionQueue* cq) {
  RequestGetRlqsAssignments(&call->context(), &call->request(), &call->writer(), cq, cq,
                            call->tag());
}

void RlqsAdminServiceImpl::OnCall(LoopCall* call, ServingLoop::Burst* /*burst*/) {
  // No store call: the view is read under the RLQS service's lock, on the loop thread.
  ServeLoopParsed<v1::GetRlqsAssignmentsRequest, v1::GetRlqsAssignmentsResponse>(
      call, [this, call](auto* req, auto* resp) { return Handle(call->context(), req, resp); });
}

grpc::Status RlqsAdminServiceImpl::Handle(const grpc::ServerContext& context,
                                          const v1::GetRlqsAssignmentsRequest* request,
                                          v1::GetRlqsAssignmentsResponse* response) {
  Telemetry::Rpc rpc = telemetry_.StartRpc(
      kService, "GetRlqsAssignments", "ratelimit.v1.RlqsAdminService/GetRlqsAssignments", context);
  absl::StatusOr<std::string> admin =
      admin_.AuthorizeRpc(context, rpc, {"domain", request->domain()}, refused_log_);
  if (!admin.ok()) return FinishRpc(rpc, ToGrpcStatus(admin.status()));
  if (rlqs_ == nullptr) {
    return FinishRpc(rpc, grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                       "the Rate Limit Quota Service is off: this server was "
                                       "started without --rlqs, so it holds no assignments"));
  }
  absl::StatusOr<RlqsAssignmentsQuery> q = ParseRlqsAssignmentsRequest(*request);
  if (!q.ok()) return FinishRpc(rpc, ToGrpcStatus(q.status()));
  // One more than the page: whether there is a next page.
  RlqsService::AssignmentsView view =
      rlqs_->Assignments(q->domain, q->bucket ? &*q->bucket : nullptr,
                         q->after ? &*q->after : nullptr, q->page_size + 1);
  std::string next;
  if (!q->bucket && view.buckets.size() > q->page_size) {
    view.buckets.resize(q->page_size);
    next = RlqsPageToken(view.buckets.back().key);
  }
  RlqsAssignmentsToProto(view, response);
  response->set_next_page_token(next);
  return FinishRpc(rpc, grpc::Status::OK);
}

}  // namespace ratelimit
