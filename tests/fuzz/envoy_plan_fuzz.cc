// Fuzz target: planning an Envoy ShouldRateLimit request (server/envoy/envoy_convert.h) against a
// fixed configuration. Properties:
//  - bad input is INVALID_ARGUMENT naming the field; a plan has one entry per descriptor;
//  - every limit to evaluate is valid (name, key, config, count);
//  - different rules never share a counter: planned against every configured domain, two
//    descriptors that reach different rules (or overrides of different domains or keys) never
//    get the same state (name, key);
//  - the response built from any outcomes has one status per descriptor.
//
// The input is decoded as a serialized RateLimitRequest and by a structured decoder.

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "google/protobuf/stubs/logging.h"
#include "server/envoy/envoy_config.h"
#include "server/envoy/envoy_config_loader.h"
#include "server/envoy/envoy_convert.h"
#include "storage/limit_config.h"
#include "tests/fuzz/fuzz_util.h"

namespace ratelimit {
namespace {

using fuzz::PickString;

// Domains "a" (rule "b.c") and "a.b" (rule "c") would share the state name "a.b.c" if names were
// joined with dots without escaping.
const std::vector<EnvoyConfigFile>& ConfigFiles() {
  static const auto* files = new std::vector<EnvoyConfigFile>{
      {"messaging.yaml", R"(
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100, name: per_number}
  - key: to_number
    value: "+1*"
    rate_limit: {unit: hour, requests_per_unit: 10, replaces: [{name: per_number}]}
  - key: vip
    rate_limit: {unlimited: true}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: two
    quota_mode: true
    rate_limits:
      - {unit: second, requests_per_unit: 2, name: two_per_second}
      - {unit: day, requests_per_unit: 20}
  - key: bucket
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 60, algorithm: token_bucket, burst: 90,
                 max_reserved: 30}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
)"},
      {"a.yaml", R"(
domain: a
descriptors:
  - key: b.c
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: "b#override"
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: "x|y"
    rate_limit: {unit: minute, requests_per_unit: 4}
)"},
      {"a.b.yaml", R"(
domain: a.b
descriptors:
  - key: c
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: c_v
    rate_limit: {unit: minute, requests_per_unit: 6}
)"},
  };
  return *files;
}

const EnvoyConfig& Config() {
  static const EnvoyConfig* config = [] {
    absl::StatusOr<EnvoyConfig> built = BuildEnvoyConfig(ConfigFiles());
    FUZZ_CHECK(built.ok(), "%s", built.status().ToString().c_str());
    return new EnvoyConfig(*std::move(built));
  }();
  return *config;
}

// Who owns a counter: a configured rule, or an override of one domain and list of keys.
std::string Owner(const rlsv3::RateLimitRequest& request, int i, const EnvoyDescriptorPlan& p) {
  if (p.config_rule != nullptr) {
    return absl::StrCat("rule ", p.config_rule->where, " (", p.config_rule->limit_name, ")");
  }
  std::vector<std::string> keys;
  for (const auto& e : request.descriptors(i).entries()) keys.push_back(e.key());
  return absl::StrCat("override of domain \"", request.domain(), "\" keys [",
                      absl::StrJoin(keys, "], ["), "]");
}

// Response options with the rate-limit headers on or off.
EnvoyResponseOptions Headers(bool on) {
  EnvoyResponseOptions o;
  o.ratelimit_headers = on;
  return o;
}

using Counters = std::map<std::pair<std::string, std::string>, std::string>;

// Plans `request`; checks the plan; records which owner each counter has in `counters`.
void PlanAndCheck(const rlsv3::RateLimitRequest& request, Counters& counters) {
  absl::StatusOr<std::vector<EnvoyDescriptorPlan>> plan = PlanEnvoyRequest(request, Config());
  if (!plan.ok()) {
    const absl::Status& s = plan.status();
    FUZZ_CHECK(s.code() == absl::StatusCode::kInvalidArgument, "%s", s.ToString().c_str());
    FUZZ_CHECK(absl::StartsWith(s.message(), "domain") ||
                   absl::StartsWith(s.message(), "descriptors") ||
                   absl::StartsWith(s.message(), "hits_addend"),
               "refusal names no field: %s", s.ToString().c_str());
    return;
  }
  FUZZ_CHECK(plan->size() == static_cast<size_t>(request.descriptors_size()),
             "%zu plans for %d descriptors", plan->size(), request.descriptors_size());
  std::vector<EnvoyOutcome> outcomes(plan->size());
  for (size_t i = 0; i < plan->size(); ++i) {
    const EnvoyDescriptorPlan& p = (*plan)[i];
    outcomes[i].over = (i % 2) == 1;
    outcomes[i].value = static_cast<double>(i) - 1;
    outcomes[i].now_us = 1795392896789012;
    if (p.kind != EnvoyDescriptorPlan::Kind::kLimited &&
        p.kind != EnvoyDescriptorPlan::Kind::kRefund) {
      continue;
    }
    FUZZ_CHECK(p.rule() != nullptr, "a limited descriptor without a rule");
    FUZZ_CHECK(p.requests.size() == p.rule()->limits.size(), "%zu requests for %zu limits",
               p.requests.size(), p.rule()->limits.size());
    const std::string owner = Owner(request, static_cast<int>(i), p);
    for (const LimitRequest& l : p.requests) {
      absl::Status s = ValidateName(l.name, "name");
      FUZZ_CHECK(s.ok(), "descriptors[%zu]: %s", i, s.ToString().c_str());
      s = ValidateKey(l.key, "key");
      FUZZ_CHECK(s.ok(), "descriptors[%zu]: %s", i, s.ToString().c_str());
      s = ValidateCount(l.count, "count");
      FUZZ_CHECK(s.ok(), "descriptors[%zu]: %s", i, s.ToString().c_str());
      s = ValidateLimitConfig(l.config, "config.");
      FUZZ_CHECK(s.ok(), "descriptors[%zu]: %s", i, s.ToString().c_str());
      auto [it, inserted] = counters.try_emplace({l.name, l.key}, owner);
      FUZZ_CHECK(inserted || it->second == owner, "counter (\"%s\", \"%s\") is shared by %s and %s",
                 l.name.c_str(), l.key.c_str(), it->second.c_str(), owner.c_str());
    }
  }
  rlsv3::RateLimitResponse response;
  BuildEnvoyResponse(*plan, outcomes, Headers(true), &response);
  FUZZ_CHECK(response.statuses_size() == request.descriptors_size(), "%d statuses for %d",
             response.statuses_size(), request.descriptors_size());
}

// Plans `request` as sent, then its descriptors in every configured domain.
void Run(const rlsv3::RateLimitRequest& request) {
  Counters counters;
  PlanAndCheck(request, counters);
  rlsv3::RateLimitRequest moved = request;
  for (const auto& [name, domain] : Config().domains) {
    if (name == request.domain()) continue;
    moved.set_domain(name);
    PlanAndCheck(moved, counters);
  }
}

void RunStructured(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  static const std::vector<std::string> kDomains = {"messaging", "a", "a.b", "unknown", ""};
  static const std::vector<std::string> kKeys = {
      "message_type", "to_number",  "vip", "blocked", "bucket", "shadow", "b.c", "b", "c",
      "c_v",          "b#override", "x|y", "x",       ""};
  static const std::vector<std::string> kValues = {
      "", "marketing", "+15551234", "v", "x|y", "\\", "|", std::string(1024, 'v')};
  rlsv3::RateLimitRequest request;
  request.set_domain(PickString(in, kDomains, 300));
  if (in.ConsumeBool()) request.set_hits_addend(in.ConsumeIntegral<uint32_t>());
  const int n = in.ConsumeIntegralInRange(0, 8) == 8 ? kMaxEnvoyDescriptors + 1
                                                     : in.ConsumeIntegralInRange(0, 4);
  for (int i = 0; i < n; ++i) {
    auto* d = request.add_descriptors();
    const int entries = in.ConsumeIntegralInRange(0, 8) == 8 ? kMaxEnvoyEntries + 1
                                                             : in.ConsumeIntegralInRange(0, 3);
    for (int j = 0; j < entries; ++j) {
      auto* e = d->add_entries();
      e->set_key(PickString(in, kKeys, 64));
      e->set_value(PickString(in, kValues, 64));
    }
    if (in.ConsumeBool()) {
      d->mutable_limit()->set_requests_per_unit(in.ConsumeIntegral<uint32_t>());
      d->mutable_limit()->set_unit(
          static_cast<envoy::type::v3::RateLimitUnit>(in.ConsumeIntegralInRange(-1, 8)));
    }
    if (in.ConsumeBool()) d->mutable_hits_addend()->set_value(in.ConsumeIntegral<uint64_t>());
    d->set_is_negative_hits(in.ConsumeBool());
  }
  // Only what the wire can carry: strings must be UTF-8, else the server cannot parse the call.
  rlsv3::RateLimitRequest sent;
  if (!sent.ParseFromString(request.SerializeAsString())) return;
  Run(sent);
}

}  // namespace
}  // namespace ratelimit

// Protobuf logs every string that is not UTF-8; such inputs are expected here.
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ratelimit::rlsv3::RateLimitRequest request;
  if (size <= ratelimit::kMaxRequestBytes && request.ParseFromArray(data, static_cast<int>(size))) {
    ratelimit::Run(request);
  }
  ratelimit::RunStructured(data, size);
  return 0;
}
