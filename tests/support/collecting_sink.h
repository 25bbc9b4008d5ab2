#ifndef RATELIMIT_TESTS_SUPPORT_COLLECTING_SINK_H_
#define RATELIMIT_TESTS_SUPPORT_COLLECTING_SINK_H_

// A span sink that keeps what it receives, for tests of the tracer and of what calls report.
// Targets that include this link ratelimit_observability.

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "opentelemetry/proto/trace/v1/trace.pb.h"
#include "server/observability/tracer.h"

namespace ratelimit::testing {

// Keeps the spans it receives, decoded with the generated OTLP code (a span that does not decode
// fails the test).
//
// Thread safety: not thread-safe; for spans ended on the test's thread.
class CollectingSink final : public SpanSink {
 public:
  void Submit(std::string encoded) override {
    ::opentelemetry::proto::trace::v1::Span span;
    EXPECT_TRUE(span.ParseFromString(encoded));
    spans.push_back(std::move(span));
  }
  std::vector<::opentelemetry::proto::trace::v1::Span> spans;
};

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_SUPPORT_COLLECTING_SINK_H_
