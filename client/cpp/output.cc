#include "client/cpp/output.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cpp/client.h"
#include "client/cpp/proto_time.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace ratelimit {
namespace {

std::string When(const google::protobuf::Duration& after, absl::Time at) {
  const absl::Duration d = absl::Seconds(after.seconds()) + absl::Nanoseconds(after.nanos());
  return absl::StrCat(absl::FormatDuration(d), " (at ",
                      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", at, absl::UTCTimeZone()), ")");
}

}  // namespace

std::string FormatResponse(const v1::RateLimitResponse& r, absl::Time /*now*/) {
  std::string out;
  if (r.failed_open()) {
    out = "ALLOWED (store failed; the server is configured to fail open)\n";
  } else if (r.allowed()) {
    out = "ALLOWED";
    if (r.replayed()) absl::StrAppend(&out, " (replayed: the answer to an earlier request_id)");
    if (r.has_retry_at()) absl::StrAppend(&out, ", run in ", When(r.retry_after(), RetryAt(r)));
    out.push_back('\n');
  } else {
    const v1::LimitResult* by = r.denied_by() >= 0 && r.denied_by() < r.results_size()
                                    ? &r.results(r.denied_by())
                                    : nullptr;
    absl::StrAppend(&out, "DENIED");
    if (r.replayed()) absl::StrAppend(&out, " (replayed)");
    if (by) absl::StrAppend(&out, " by ", by->name(), "/", by->key());
    absl::StrAppend(&out, ": ", v1::DenyReason_Name(r.reason()));
    if (r.has_retry_at()) {
      absl::StrAppend(&out, ", retry in ", When(r.retry_after(), RetryAt(r)));
    } else if (r.reason() == v1::COUNT_EXCEEDS_CAPACITY) {
      absl::StrAppend(&out, ", no retry can succeed");
    }
    out.push_back('\n');
  }
  for (const v1::LimitResult& l : r.results()) {
    absl::StrAppend(&out, "  ", l.name(), "/", l.key(), "  ", l.allowed() ? "allowed" : "denied ");
    if (!r.failed_open()) {
      absl::StrAppend(&out, "  value=", absl::StrFormat("%g", l.value()), " of ",
                      absl::StrFormat("%g", l.capacity()));
    }
    if (!l.receipt().empty()) absl::StrAppend(&out, "  receipt=", absl::Base64Escape(l.receipt()));
    out.push_back('\n');
  }
  return out;
}

std::string FormatSettleResponse(const v1::SettleResponse& response) {
  std::string out = "SETTLED\n";
  for (const v1::SettleResult& r : response.results()) {
    absl::StrAppend(&out, "  ", r.name(), "/", r.key(),
                    "  returned=", absl::StrFormat("%g", r.returned()),
                    " charged=", absl::StrFormat("%g", r.charged()),
                    " uncharged=", absl::StrFormat("%g", r.uncharged()),
                    " value=", absl::StrFormat("%g", r.value()));
    if (r.has_paid_at()) {
      const absl::Time at = TimeOf(r.paid_at());
      absl::StrAppend(&out, ", debt paid in ", When(r.paid_after(), at));
    }
    out.push_back('\n');
  }
  return out;
}

std::string FormatResetResponse(const std::string& target, bool all_keys,
                                const v1::ResetResponse& response) {
  const uint64_t leases = std::min(response.leases(), response.deleted());
  const uint64_t states = response.deleted() - leases;
  auto plural = [](uint64_t n, const char* one, const char* many) {
    return absl::StrCat(n, " ", n == 1 ? one : many);
  };
  std::vector<std::string> parts;
  if (states > 0) parts.push_back(plural(states, "state", "states") + " deleted");
  if (leases > 0) {
    parts.push_back(all_keys ? "leases ended on " + plural(leases, "key", "keys")
                             : plural(leases, "lease", "leases") + " ended");
  }
  if (parts.empty()) parts.push_back("nothing to reset (no state or lease held)");
  return absl::StrCat("reset ", target, ": ", absl::StrJoin(parts, ", "), "\n");
}

std::string FormatBucketId(const std::map<std::string, std::string>& pairs) {
  std::string out;
  auto append = [&out](absl::string_view text) {
    for (char c : text) {
      if (c == ',' || c == '=' || c == '\\') out.push_back('\\');
      out.push_back(c);
    }
  };
  for (const auto& [k, v] : pairs) {
    if (!out.empty()) out.push_back(',');
    append(k);
    out.push_back('=');
    append(v);
  }
  return out;
}

std::string FormatRlqsAssignments(const v1::GetRlqsAssignmentsResponse& response) {
  auto time = [](const google::protobuf::Timestamp& t) {
    return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", TimeOf(t), absl::UTCTimeZone());
  };
  auto action = [](v1::RlqsAction a) {
    return a == v1::RLQS_DENY_ALL ? "deny all" : a == v1::RLQS_ALLOW_ALL ? "allow all" : "";
  };
  std::string out;
  if (response.buckets().empty()) out = "no stream reports this bucket\n";
  for (const v1::RlqsBucketAssignments& b : response.buckets()) {
    const std::map<std::string, std::string> pairs(b.bucket().begin(), b.bucket().end());
    const std::string id = FormatBucketId(pairs);
    const v1::RlqsRule& rule = b.rule();
    absl::StrAppend(&out, id, "  rule ", rule.name(), ": ");
    if (rule.action() == v1::RLQS_TOKEN_BUCKET) {
      absl::StrAppend(&out, "token bucket ", absl::StrFormat("%g", rule.rate_per_second()),
                      "/s burst ", absl::StrFormat("%g", rule.burst()));
    } else {
      absl::StrAppend(&out, action(rule.action()));
    }
    if (rule.shadow()) absl::StrAppend(&out, " (shadow: allow all)");
    if (b.has_replica_part()) {
      absl::StrAppend(&out, "; this replica's part ",
                      absl::StrFormat("%g", b.replica_part().rate_per_second()), "/s burst ",
                      absl::StrFormat("%g", b.replica_part().burst()));
    }
    out.push_back('\n');
    for (const v1::RlqsSubscriber& s : b.subscribers()) {
      absl::StrAppend(&out, "  stream ", s.stream_id(), "  ", s.peer(), "  demand ",
                      s.demand_known() ? absl::StrFormat("%g/s", s.demand()) : "unknown", "  ");
      if (s.action() == v1::RLQS_TOKEN_BUCKET) {
        absl::StrAppend(&out, "assigned ", absl::StrFormat("%g", s.assigned_rate()), "/s burst ",
                        absl::StrFormat("%g", s.assigned_burst()), " (", s.tokens_per_fill(),
                        " per ", s.fill_interval().seconds(), "s, max ", s.max_tokens(), ")");
      } else {
        absl::StrAppend(&out, action(s.action()));
      }
      absl::StrAppend(&out, "  ttl ", s.time_to_live().seconds(), "s");
      if (s.has_sent_at()) absl::StrAppend(&out, "  sent ", time(s.sent_at()));
      out.push_back('\n');
    }
  }
  if (!response.next_page_token().empty()) {
    absl::StrAppend(&out, "more: --page_token=", response.next_page_token(), "\n");
  }
  return out;
}

absl::StatusOr<std::string> FormatJson(const google::protobuf::Message& response) {
  google::protobuf::util::JsonPrintOptions print;
  print.always_print_primitive_fields = true;
  print.preserve_proto_field_names = true;
  std::string out;
  const auto status = google::protobuf::util::MessageToJsonString(response, &out, print);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write the reply as JSON: ", status.ToString()));
  }
  return out;
}

std::string FormatJsonError(const absl::Status& error) {
  // Each string through protobuf's JSON writer (a google.protobuf.Value), so that it is escaped
  // as JSON requires; the object is laid out here so that "code" comes first.
  auto json_string = [](absl::string_view text) {
    google::protobuf::Value value;
    value.set_string_value(std::string(text));
    std::string out;
    if (!google::protobuf::util::MessageToJsonString(value, &out).ok()) {
      out = absl::StrCat("\"", absl::CHexEscape(text), "\"");  // not UTF-8: escaped byte by byte
    }
    return out;
  };
  return absl::StrCat("{\"error\":{\"code\":", json_string(absl::StatusCodeToString(error.code())),
                      ",\"message\":", json_string(error.message()), "}}");
}

}  // namespace ratelimit
