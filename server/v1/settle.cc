#include "server/v1/settle.h"

#include <openssl/sha.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "server/serving/grpc_convert.h"
#include "storage/status_util.h"

namespace ratelimit {
namespace {

constexpr size_t kFingerprintBytes = SHA256_DIGEST_LENGTH;

std::string Sha256(absl::string_view data) {
  std::string out(SHA256_DIGEST_LENGTH, '\0');
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(),
         reinterpret_cast<unsigned char*>(out.data()));
  return out;
}

std::string DeterministicBytes(const google::protobuf::MessageLite& message) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  message.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

}  // namespace

absl::Status ValidateRequestId(const v1::RateLimitRequest& request) {
  if (request.request_id().size() > kMaxRequestIdBytes) {
    return InvalidField("request_id", absl::StrCat("must be at most ", kMaxRequestIdBytes,
                                                   " bytes, got ", request.request_id().size()));
  }
  return absl::OkStatus();
}

std::string RequestIdRecordKey(absl::string_view request_id) {
  return absl::StrCat("q", request_id);
}

std::string RequestFingerprint(absl::string_view method, const v1::RateLimitRequest& request) {
  v1::RateLimitRequest limits_only;
  *limits_only.mutable_limits() = request.limits();
  return Sha256(absl::StrCat(method, std::string(1, '\0'), DeterministicBytes(limits_only)));
}

std::string RememberedAnswer(absl::string_view fingerprint, const v1::RateLimitResponse& response) {
  return absl::StrCat(fingerprint, DeterministicBytes(response));
}

absl::StatusOr<v1::RateLimitResponse> ReplayAnswer(absl::string_view remembered,
                                                   absl::string_view fingerprint) {
  if (remembered.size() < kFingerprintBytes ||
      remembered.substr(0, kFingerprintBytes) != fingerprint) {
    return InvalidField("request_id",
                        "already used for a different request (method or limits); use a new "
                        "request_id for a new request");
  }
  v1::RateLimitResponse response;
  if (!response.ParseFromString(std::string(remembered.substr(kFingerprintBytes)))) {
    return absl::DataLossError("remembered answer does not parse");
  }
  response.set_replayed(true);
  return response;
}

void AddReceipts(const ReceiptKeys& keys, const Verdict& verdict,
                 absl::Span<const LimitRequest> limits, Mode mode,
                 const std::vector<std::array<uint8_t, 16>>& ids, v1::RateLimitResponse* response) {
  if (!verdict.allowed || mode == Mode::kCheck || keys.empty()) return;
  for (size_t i = 0; i < limits.size() && i < static_cast<size_t>(response->results_size()); ++i) {
    const LimitRequest& l = limits[i];
    // An unlimited override took nothing: nothing to settle (a blocked one never allows).
    if (l.config.adjustment &&
        l.config.adjustment->effect != LimitConfig::Adjustment::Effect::kLimit) {
      continue;
    }
    Receipt r;
    r.source = l.source;
    r.mode = mode;
    r.name = l.name;
    r.key = l.key;
    r.count = l.count;
    r.decided_at_us = verdict.now_us;
    r.value_after = verdict.decisions[i].value;
    r.unique_id = ids[i];
    if (l.source == LimitSource::kInline) r.config = l.config;
    response->mutable_results(static_cast<int>(i))->set_receipt(keys.Sign(r));
  }
}

absl::StatusOr<std::vector<SettleItem>> SettleFromProto(const v1::SettleRequest& request,
                                                        const ReceiptKeys& keys,
                                                        const LimitSet& limits,
                                                        int64_t receipt_ttl_us, int64_t now_us) {
  const int n = request.settlements_size();
  if (n < 1 || n > kMaxSettlementsPerRequest) {
    return InvalidField("settlements", absl::StrCat("must have 1..", kMaxSettlementsPerRequest,
                                                    " entries, got ", n));
  }
  std::vector<SettleItem> items;
  for (int i = 0; i < n; ++i) {
    const v1::Settlement& s = request.settlements(i);
    const std::string field = absl::StrCat("settlements[", i, "]");
    const double used = s.used();
    if (!std::isfinite(used) || used < 0 || used > kMaxAmount) {
      return InvalidField(absl::StrCat(field, ".used"), "must be finite, >= 0 and <= 1e15");
    }
    const std::string receipt_field = absl::StrCat(field, ".receipt");
    absl::StatusOr<Receipt> r = keys.Verify(s.receipt(), receipt_field);
    if (!r.ok()) return r.status();
    if (receipt_ttl_us <= now_us - r->decided_at_us) {
      return absl::FailedPreconditionError(
          absl::StrCat(receipt_field, ": expired (receipts can be settled for ",
                       receipt_ttl_us / 1000000, " s after the decision)"));
    }
    SettleItem item;
    item.name = r->name;
    item.key = r->key;
    item.source = r->source;
    item.taken = r->count;
    item.used = used;
    item.taken_at_us = r->decided_at_us;
    item.value_after_take = r->value_after;
    if (r->config) {
      if (absl::Status v = ValidateLimitConfig(*r->config, receipt_field); !v.ok()) return v;
      item.config = *r->config;
    } else if (const LimitConfig* defined = limits.Find(r->name)) {
      item.config = *defined;
    } else {
      return absl::FailedPreconditionError(
          absl::StrCat(receipt_field, ": limit \"", r->name,
                       "\" is no longer defined in the limits file; nothing to settle against"));
    }
    if (!(r->count > 0) || !std::isfinite(r->count)) {
      return InvalidField(receipt_field, "malformed receipt");
    }
    item.spent.key = absl::StrCat(
        "s",
        absl::string_view(reinterpret_cast<const char*>(r->unique_id.data()), r->unique_id.size()));
    item.spent.expires_at_us = r->decided_at_us + receipt_ttl_us;
    for (size_t j = 0; j < items.size(); ++j) {
      if (items[j].spent.key == item.spent.key) {
        return InvalidField(receipt_field,
                            absl::StrCat("the same receipt as settlements[", j, "]"));
      }
    }
    items.push_back(std::move(item));
  }
  return items;
}

void SettleToProto(const SettleVerdict& verdict, const std::vector<SettleItem>& items,
                   v1::SettleResponse* response) {
  for (size_t i = 0; i < items.size(); ++i) {
    const Settled& s = verdict.results[i];
    v1::SettleResult* r = response->add_results();
    r->set_name(items[i].name);
    r->set_key(items[i].key);
    r->set_returned(s.returned);
    r->set_charged(s.charged);
    r->set_uncharged(s.uncharged);
    r->set_value(s.value);
    if (s.paid_at_us) {
      SetTimestamp(*s.paid_at_us, r->mutable_paid_at());
      SetDuration(std::max<int64_t>(0, *s.paid_at_us - verdict.now_us), r->mutable_paid_after());
    }
  }
}

}  // namespace ratelimit
