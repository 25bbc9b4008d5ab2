#include "server/envoy/envoy_metadata.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace ratelimit {
namespace {

namespace rlsv3 = ::envoy::service::ratelimit::v3;
using ::google::protobuf::Struct;
using ::google::protobuf::Value;

// Adds `from`'s fields that `into` lacks; where both hold a struct under one key, merges them.
void MergeMetadata(const Struct& from, Struct* into) {
  auto& fields = *into->mutable_fields();
  for (const auto& [key, value] : from.fields()) {
    auto it = fields.find(key);
    if (it == fields.end()) {
      fields[key] = value;
    } else if (it->second.has_struct_value() && value.has_struct_value()) {
      MergeMetadata(value.struct_value(), it->second.mutable_struct_value());
    }
  }
}

Value DescriptorValue(const envoy::extensions::common::ratelimit::v3::RateLimitDescriptor& d) {
  Value out;
  auto& fields = *out.mutable_struct_value()->mutable_fields();
  auto* entries = fields["entries"].mutable_list_value();
  for (const auto& e : d.entries()) {
    entries->add_values()->set_string_value(absl::StrCat(e.key(), "=", e.value()));
  }
  if (d.has_limit()) fields["limit"].set_string_value(d.limit().ShortDebugString());
  if (d.has_hits_addend()) {
    fields["hitsAddend"].set_number_value(static_cast<double>(d.hits_addend().value()));
  }
  return out;
}

}  // namespace

Struct EnvoyDynamicMetadata(
    const rlsv3::RateLimitRequest& request, absl::Span<const EnvoyDescriptorPlan> plan,
    const google::protobuf::RepeatedPtrField<rlsv3::RateLimitResponse::DescriptorStatus>&
        statuses) {
  Struct out;
  auto& fields = *out.mutable_fields();
  fields["domain"].set_string_value(request.domain());
  auto* descriptors = fields["descriptors"].mutable_list_value();
  for (const auto& d : request.descriptors()) *descriptors->add_values() = DescriptorValue(d);
  if (request.hits_addend() != 0) {
    fields["hitsAddend"].set_number_value(static_cast<double>(request.hits_addend()));
  }
  Struct passed;
  for (size_t i = 0; i < plan.size() && i < static_cast<size_t>(statuses.size()); ++i) {
    const EnvoyDescriptorPlan& p = plan[i];
    if (p.kind == EnvoyDescriptorPlan::Kind::kNoLimit ||
        p.kind == EnvoyDescriptorPlan::Kind::kUnlimited ||
        statuses[static_cast<int>(i)].code() == rlsv3::RateLimitResponse::OVER_LIMIT) {
      continue;
    }
    if (p.rule()->metadata != nullptr) MergeMetadata(*p.rule()->metadata, &passed);
  }
  if (!passed.fields().empty()) *fields["metadata"].mutable_struct_value() = std::move(passed);
  return out;
}

bool AddEnvoyLeaseToken(absl::Span<const EnvoyOutcome> outcomes,
                        rlsv3::RateLimitResponse* response) {
  for (const EnvoyOutcome& o : outcomes) {
    if (o.lease_token.empty()) continue;
    (*response->mutable_dynamic_metadata()->mutable_fields())[std::string(kEnvoyLeaseKey)]
        .set_string_value(o.lease_token);
    return true;  // a request takes one lease at most (PlanEnvoyRequest)
  }
  return false;
}

}  // namespace ratelimit
