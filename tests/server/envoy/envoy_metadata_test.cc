// The response's dynamic_metadata, as the reference's RESPONSE_DYNAMIC_METADATA builds it.
#include "server/envoy/envoy_metadata.h"

#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "server/envoy/envoy_config_loader.h"
#include "server/envoy/envoy_convert.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

constexpr char kConfig[] = R"(
domain: web
descriptors:
  - key: user
    metadata: {team: growth, tags: {tier: free, region: eu}, weight: 2}
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: path
    metadata: {team: search, tags: {tier: paid, owner: ana}, enabled: true}
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: ip
    metadata: {blocked: true}
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: ldap
    metadata: {unlimited: yes}
    rate_limit: {unlimited: true}
)";

class EnvoyMetadataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<EnvoyConfig> c = BuildEnvoyConfig({{"web.yaml", kConfig}});
    ASSERT_OK(c);
    config_ = *std::move(c);
  }

  static void Add(rlsv3::RateLimitRequest& r, const std::string& key, const std::string& value) {
    auto* e = r.add_descriptors()->add_entries();
    e->set_key(key);
    e->set_value(value);
  }

  // The metadata of `request` answered with `over` (one flag per descriptor).
  google::protobuf::Struct Metadata(const rlsv3::RateLimitRequest& request,
                                    const std::vector<bool>& over) {
    absl::StatusOr<std::vector<EnvoyDescriptorPlan>> plan = PlanEnvoyRequest(request, config_);
    EXPECT_OK(plan);
    if (!plan.ok()) return {};
    std::vector<EnvoyOutcome> outcomes;
    for (bool o : over) outcomes.push_back(EnvoyOutcome{o, o ? 0.0 : 5.0, 0});
    rlsv3::RateLimitResponse response;
    BuildEnvoyResponse(*plan, outcomes, EnvoyResponseOptions{}, &response);
    return EnvoyDynamicMetadata(request, *plan, response.statuses());
  }

  // Whether `actual` equals the struct written as `json` (key order does not matter).
  static ::testing::AssertionResult IsJson(const google::protobuf::Struct& actual,
                                           const std::string& json) {
    google::protobuf::Struct expected;
    if (!google::protobuf::util::JsonStringToMessage(json, &expected).ok()) {
      return ::testing::AssertionFailure() << "bad expected JSON " << json;
    }
    if (google::protobuf::util::MessageDifferencer::Equals(actual, expected)) {
      return ::testing::AssertionSuccess();
    }
    std::string got;
    (void)google::protobuf::util::MessageToJsonString(actual, &got);
    return ::testing::AssertionFailure() << "got " << got << "\nwant " << json;
  }

  EnvoyConfig config_;
};

TEST_F(EnvoyMetadataTest, DynamicMetadataCarriesPassedRulesMetadata) {
  rlsv3::RateLimitRequest r;
  r.set_domain("web");
  Add(r, "user", "u1");
  Add(r, "path", "/a");
  // Both passed: merged in request order, the first value of a key kept, structs merged.
  EXPECT_TRUE(
      IsJson(Metadata(r, {false, false}),
             R"({"domain":"web","descriptors":[{"entries":["user=u1"]},{"entries":["path=/a"]}],)"
             R"("metadata":{"enabled":true,"tags":{"owner":"ana","region":"eu","tier":"free"},)"
             R"("team":"growth","weight":2}})"));
  // The second is over: only the first one's metadata.
  EXPECT_TRUE(
      IsJson(Metadata(r, {false, true}),
             R"({"domain":"web","descriptors":[{"entries":["user=u1"]},{"entries":["path=/a"]}],)"
             R"("metadata":{"tags":{"region":"eu","tier":"free"},"team":"growth","weight":2}})"));
  // Nothing passed: no metadata key.
  EXPECT_TRUE(IsJson(
      Metadata(r, {true, true}),
      R"({"domain":"web","descriptors":[{"entries":["user=u1"]},{"entries":["path=/a"]}]})"));
}

TEST_F(EnvoyMetadataTest, BlockedUnlimitedAndUnmatchedDescriptorsAddNoMetadata) {
  rlsv3::RateLimitRequest r;
  r.set_domain("web");
  Add(r, "ip", "10.0.0.1");
  Add(r, "ldap", "x");
  Add(r, "other", "x");
  EXPECT_TRUE(IsJson(Metadata(r, {true, false, false}),
                     R"({"domain":"web","descriptors":[{"entries":["ip=10.0.0.1"]},)"
                     R"({"entries":["ldap=x"]},{"entries":["other=x"]}]})"));
}

TEST_F(EnvoyMetadataTest, DescriptorsCarryEntriesLimitAndHitsAddend) {
  rlsv3::RateLimitRequest r;
  r.set_domain("web");
  r.set_hits_addend(3);
  auto* d = r.add_descriptors();
  for (const auto& [k, v] : {std::pair{"a", "1"}, {"b", "2"}}) {
    auto* e = d->add_entries();
    e->set_key(k);
    e->set_value(v);
  }
  d->mutable_hits_addend()->set_value(0);  // set, even to 0: reported
  d->mutable_limit()->set_requests_per_unit(7);
  d->mutable_limit()->set_unit(::envoy::type::v3::MINUTE);
  EXPECT_TRUE(IsJson(Metadata(r, {false}),
                     R"({"domain":"web","descriptors":[{"entries":["a=1","b=2"],"hitsAddend":0,)"
                     R"("limit":"requests_per_unit: 7 unit: MINUTE"}],"hitsAddend":3})"));
}

}  // namespace
}  // namespace ratelimit
