// Both configuration parsers answer every malformed document with an error status: a bad edit
// of a hot-reloaded file must never throw out of the parser and take the server down.
#include <random>

#include "gtest/gtest.h"
#include "server/envoy/envoy_config_loader.h"
#include "server/v1/limits_file.h"

namespace ratelimit {
namespace {

const char* const kDocuments[] = {
    "limits: 5",
    "limits: {a: 1}",
    "limits: [[1, 2], [3]]",
    "limits:\n  - [name, api]",
    "limits:\n  - name: [a, b]\n    kind: token_bucket\n    rate: 1\n    period: 1s",
    "limits:\n  - {name: a, kind: {x: 1}, rate: 1, period: 1s}",
    "limits:\n  - {name: a, kind: token_bucket, rate: [1], period: 1s}",
    "limits:\n  - {name: a, kind: token_bucket, rate: 1, period: {s: 1}}",
    "limits:\n  - {name: a, kind: token_bucket, rate: 1e400, period: 1s}",
    "limits:\n  - {name: a, kind: token_bucket, rate: .nan, period: 1s}",
    "limits:\n  - {name: a, kind: token_bucket, rate: -.inf, period: 1s}",
    "limits:\n  - {name: a, kind: token_bucket, rate: 1, period: 99999999999999h}",
    "limits:\n  - {? [x, y] : 1}",
    "limits:\n  - {name: a, name: b}",
    "limits:\n  - &a {name: a}\n  - *a",
    "limits:\n  - {<<: {name: a}}",
    "limits:\n  - !!binary aGVsbG8=",
    "? [1, 2]\n: x",
    "- 1\n- 2",
    "just a string",
    "\"\\xff\\xfe\"",
    "limits: !!map {}",
    "{{{{{{{{{{",
    "limits:\n\t- name: tab",
    "domain: [a]",
    "domain: d\ndescriptors: 5",
    "domain: d\ndescriptors:\n  - [key, value]",
    "domain: d\ndescriptors:\n  - key: {a: b}",
    "domain: d\ndescriptors:\n  - key: k\n    rate_limit: 7",
    "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: [s], requests_per_unit: 1}",
    "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}",
    "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1e99}",
    "domain: d\ndescriptors:\n  - key: k\n    descriptors: {x: y}",
    "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: maybe",
    "domain: d\ndescriptors:\n  - key: k\n    replaces: 5",
    "domain: d\ndescriptors:\n  - key: k\n    replaces: [{name: [x]}]",
    "domain: d\ndescriptors:\n  - &x {key: k}\n  - *x",
    "domain: d\ndescriptors:\n  - key: k\n    value: [1]",
    ("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, "
     "algorithm: token_bucket, burst: [2]}"),
};

TEST(ConfigRobustnessTest, MalformedDocumentsAreErrorsNotExceptions) {
  for (const char* doc : kDocuments) {
    EXPECT_NO_THROW({
      absl::StatusOr<LimitSet> limits = ParseLimitsYaml(doc, "limits.yaml");
      if (!limits.ok()) {
        EXPECT_EQ(limits.status().code(), absl::StatusCode::kInvalidArgument) << doc;
      }
    }) << doc;
    EXPECT_NO_THROW({
      absl::StatusOr<EnvoyDomain> domain = ParseEnvoyDomainYaml(doc, "envoy.yaml");
      if (!domain.ok()) {
        EXPECT_EQ(domain.status().code(), absl::StatusCode::kInvalidArgument) << doc;
      }
    }) << doc;
  }
}

TEST(ConfigRobustnessTest, RandomMutationsOfValidDocumentsNeverThrow) {
  const std::string limits =
      "limits:\n  - name: api\n    kind: token_bucket\n    rate: 10\n    period: 1s\n"
      "    capacity: 20\n    max_reserved: 5\n    jitter: 0.1\n"
      "  - name: day\n    kind: fixed_window\n    rate: 100\n    period: 24h\n    start: 0s\n";
  const std::string envoy =
      "domain: edge\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n"
      "      requests_per_unit: 20\n  - key: path\n    value: \"/api/*\"\n    descriptors:\n"
      "      - key: user\n        shadow_mode: true\n        rate_limit: {unit: second, "
      "requests_per_unit: 5, name: p, replaces: [{name: q}]}\n";
  const char alphabet[] = " \n:-[]{},&*!?#'\"|>%@`\t0a.";
  std::mt19937 rng(20261121);
  for (const std::string& base : {limits, envoy}) {
    for (int i = 0; i < 3000; ++i) {
      std::string doc = base;
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits; ++e) {
        const size_t pos = rng() % doc.size();
        switch (rng() % 3) {
          case 0:
            doc[pos] = alphabet[rng() % (sizeof alphabet - 1)];
            break;
          case 1:
            doc.erase(pos, 1 + rng() % 8);
            break;
          default:
            doc.insert(pos, 1, alphabet[rng() % (sizeof alphabet - 1)]);
        }
        if (doc.empty()) doc = "x";
      }
      EXPECT_NO_THROW(ParseLimitsYaml(doc, "limits.yaml").status().IgnoreError()) << doc;
      EXPECT_NO_THROW(ParseEnvoyDomainYaml(doc, "envoy.yaml").status().IgnoreError()) << doc;
    }
  }
}

}  // namespace
}  // namespace ratelimit
