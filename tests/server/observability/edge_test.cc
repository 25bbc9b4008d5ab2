// The server's edge, piece by piece: the HTTP endpoint's start/stop, Timestamp/Duration range
// clamping and JSON output, W3C tracestate validation, the metrics series cap, typed OTLP
// resource attributes and the limits file's warnings.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <future>
#include <limits>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "client/cpp/output.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb.h"
#include "server/observability/health.h"
#include "server/observability/http_server.h"
#include "server/observability/metrics.h"
#include "server/observability/otlp_encoder.h"
#include "server/observability/telemetry.h"
#include "server/observability/trace_context.h"
#include "server/v1/convert.h"
#include "server/v1/limit_registry.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::google::protobuf::util::TimeUtil;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WriteFileAtomically;

bool ValidTimestamp(const google::protobuf::Timestamp& t) {
  return t.seconds() >= TimeUtil::kTimestampMinSeconds &&
         t.seconds() <= TimeUtil::kTimestampMaxSeconds && t.nanos() >= 0 && t.nanos() <= 999999999;
}

bool ValidDuration(const google::protobuf::Duration& d) {
  return d.seconds() >= TimeUtil::kDurationMinSeconds &&
         d.seconds() <= TimeUtil::kDurationMaxSeconds && d.nanos() > -1000000000 &&
         d.nanos() < 1000000000 && !(d.seconds() > 0 && d.nanos() < 0);
}

// ---- HTTP endpoint: start/stop handshake, exclusive port, the reason of a bind failure ----

TEST(HttpServerTest, StopRightAfterStartNeverHangs) {
  MetricsRegistry metrics;
  HealthReporter health;
  // A Stop() that overtakes the accept loop's start was lost and the join waited forever; run
  // the cycles on a thread so that a hang is reported as a failure instead of blocking the suite.
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  std::thread([done, &metrics, &health] {
    for (int i = 0; i < 300; ++i) {
      auto http = HttpServer::Start("127.0.0.1", 0, metrics, health);
      if (!http.ok()) {
        ADD_FAILURE() << http.status();
        break;
      }
      (*http)->Stop();
    }
    done->set_value();
  }).detach();
  if (finished.wait_for(std::chrono::seconds(120)) != std::future_status::ready) {
    std::fprintf(stderr, "HttpServer Start+Stop hung\n");
    std::_Exit(1);  // the hung thread cannot be joined
  }
}

// A TCP socket listening on a free loopback port, without SO_REUSEPORT.
struct Listener {
  Listener() {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    listen(fd, 1);
    socklen_t len = sizeof addr;
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
  }
  ~Listener() { close(fd); }
  int fd = -1;
  int port = 0;
};

TEST(HttpServerTest, BusyPortSaysWhy) {
  Listener busy;
  ASSERT_GT(busy.port, 0);
  MetricsRegistry metrics;
  HealthReporter health;
  auto http = HttpServer::Start("127.0.0.1", busy.port, metrics, health);
  ASSERT_FALSE(http.ok());
  EXPECT_TRUE(absl::StrContains(http.status().message(), "Address already in use"))
      << http.status();
}

TEST(HttpServerTest, SecondServerOnTheSamePortFails) {
  MetricsRegistry metrics;
  HealthReporter health;
  auto first = HttpServer::Start("127.0.0.1", 0, metrics, health);
  ASSERT_OK(first);
  auto second = HttpServer::Start("127.0.0.1", (*first)->port(), metrics, health);
  EXPECT_FALSE(second.ok()) << "a second HTTP endpoint shares port " << (*first)->port();
}

// ---- Timestamp/Duration range ----

TEST(ConvertRangeTest, HugeTimesAreClampedToValidValues) {
  for (int64_t us : {std::numeric_limits<int64_t>::max(), int64_t{3600} * 1000000 * 1000000000,
                     TimeUtil::kTimestampMaxSeconds * 1000000 + 1000000}) {
    google::protobuf::Timestamp t;
    SetTimestamp(us, &t);
    EXPECT_TRUE(ValidTimestamp(t)) << us << ": " << t.DebugString();
    EXPECT_EQ(t.seconds(), TimeUtil::kTimestampMaxSeconds);
    EXPECT_EQ(t.nanos(), 999999999);
    google::protobuf::Duration d;
    SetDuration(us, &d);
    EXPECT_TRUE(ValidDuration(d)) << us << ": " << d.DebugString();
    if (us / 1000000 >= TimeUtil::kDurationMaxSeconds) {
      EXPECT_EQ(d.seconds(), TimeUtil::kDurationMaxSeconds);
    }
    std::string json;
    EXPECT_TRUE(google::protobuf::util::MessageToJsonString(t, &json).ok()) << us;
    EXPECT_TRUE(google::protobuf::util::MessageToJsonString(d, &json).ok()) << us;
  }
  // Ordinary values are exact.
  google::protobuf::Timestamp t;
  SetTimestamp(1700000000123456, &t);
  EXPECT_EQ(t.seconds(), 1700000000);
  EXPECT_EQ(t.nanos(), 123456000);
  google::protobuf::Duration d;
  SetDuration(1500000, &d);
  EXPECT_EQ(d.seconds(), 1);
  EXPECT_EQ(d.nanos(), 500000000);
}

TEST(ConvertRangeTest, VerdictWithRetryBeyondYear9999IsValid) {
  LimitRequest limit;
  limit.name = "n";
  limit.key = "k";
  Verdict v;
  v.allowed = false;
  v.denied_by = 0;
  v.now_us = 1700000000LL * 1000000;
  Decision d;
  d.allowed = false;
  d.retry_at_us = std::numeric_limits<int64_t>::max();
  v.decisions.push_back(d);
  v.retry_at_us = d.retry_at_us;
  v1::RateLimitResponse r;
  VerdictToProto(v, {limit}, &r);
  EXPECT_TRUE(ValidTimestamp(r.retry_at()));
  EXPECT_TRUE(ValidDuration(r.retry_after()));
  EXPECT_TRUE(ValidTimestamp(r.results(0).retry_at()));
  EXPECT_TRUE(ValidDuration(r.results(0).retry_after()));
  ASSERT_OK(FormatJson(r));
}

TEST(CliOutputTest, JsonConversionErrorIsReportedNotDropped) {
  v1::RateLimitResponse r;
  r.mutable_retry_at()->set_seconds(TimeUtil::kTimestampMaxSeconds + 1);
  absl::StatusOr<std::string> json = FormatJson(r);
  ASSERT_FALSE(json.ok());
  EXPECT_EQ(json.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(json.status().message(), "JSON")) << json.status();

  r.mutable_retry_at()->set_seconds(1700000000);
  absl::StatusOr<std::string> ok = FormatJson(r);
  ASSERT_OK(ok);
  EXPECT_TRUE(absl::StrContains(*ok, "\"retry_at\":\"2023-11-14T22:13:20Z\"")) << *ok;
}

// ---- W3C tracestate ----

TEST(TracestateTest, AcceptsValidLists) {
  EXPECT_TRUE(IsValidTracestate(""));
  EXPECT_TRUE(IsValidTracestate("congo=t61rcWkgMzE"));
  EXPECT_TRUE(IsValidTracestate("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"));
  EXPECT_TRUE(IsValidTracestate("rojo=1 ,  congo=2,,"));
  EXPECT_FALSE(IsValidTracestate("rojo=1 , \tcongo=2"));  // a tab is not printable ASCII
  EXPECT_TRUE(IsValidTracestate("tenant1@vendor=x,a_b-c*d/e=value with spaces"));
  EXPECT_TRUE(IsValidTracestate("1tenant@sys=v"));
}

TEST(TracestateTest, RejectsNonAsciiOverlongAndMalformed) {
  EXPECT_FALSE(IsValidTracestate("congo=\xff\xfe"));          // not UTF-8
  EXPECT_FALSE(IsValidTracestate("congo=caf\xc3\xa9"));       // UTF-8 but not ASCII
  EXPECT_FALSE(IsValidTracestate(std::string("a=b\0c", 5)));  // control character
  EXPECT_FALSE(IsValidTracestate("a=b\nc=d"));
  EXPECT_FALSE(IsValidTracestate("a=" + std::string(511, 'x')));  // over 512 characters
  EXPECT_FALSE(IsValidTracestate("novalue"));
  EXPECT_FALSE(IsValidTracestate("Upper=1"));
  EXPECT_FALSE(IsValidTracestate("=1"));
  EXPECT_FALSE(IsValidTracestate("a="));
  EXPECT_FALSE(IsValidTracestate("a=1=2"));
  EXPECT_FALSE(IsValidTracestate("a=in\x7fvalid"));
  EXPECT_FALSE(IsValidTracestate("a=1,a=2"));  // duplicate key
  EXPECT_FALSE(IsValidTracestate("@sys=1"));
  EXPECT_FALSE(IsValidTracestate("t@1sys=1"));
  EXPECT_FALSE(IsValidTracestate("t@systemtoolong15=1"));
  EXPECT_FALSE(IsValidTracestate("a" + std::string(256, 'b') + "=1"));  // key over 256
  std::string members;
  for (int i = 0; i < 33; ++i) members += (i ? ",k" : "k") + std::to_string(i) + "=v";
  EXPECT_FALSE(IsValidTracestate(members));  // 33 members
  members = members.substr(0, members.rfind(','));
  EXPECT_TRUE(IsValidTracestate(members));  // 32 members
}

// ---- Metrics: the series cap keeps the outcome ----

TEST(MetricsCapTest, FailedOpenSurvivesPastTheSeriesCap) {
  MetricsRegistry registry;
  ServerMetrics metrics(registry);
  for (int i = 0; i < 5000; ++i) {
    metrics.decisions.With({"limit-" + std::to_string(i), "allowed"}).Increment();
  }
  metrics.decisions.With({"late-limit", "failed_open"}).Increment();
  metrics.decisions.With({"limit-1", "failed_open"}).Increment();
  const std::string text = registry.Render();
  EXPECT_TRUE(absl::StrContains(
      text, "ratelimit_decisions_total{limit=\"_other\",outcome=\"failed_open\"} 2"))
      << "failed_open folded away";
  EXPECT_TRUE(
      absl::StrContains(text, "ratelimit_decisions_total{limit=\"_other\",outcome=\"allowed\"}"));
  EXPECT_FALSE(absl::StrContains(text, "outcome=\"_other\""));
  // The existing series keep their names.
  EXPECT_TRUE(absl::StrContains(
      text, "ratelimit_decisions_total{limit=\"limit-0\",outcome=\"allowed\"} 1"));
}

TEST(MetricsCapTest, CollectorFoldsOnlyTheCappedLabel) {
  MetricsRegistry registry;
  registry.AddCollector(
      "hits", "h", "counter", {"rule", "result"},
      [] {
        MetricsRegistry::Samples out;
        for (int i = 0; i < 5; ++i) out.push_back({{"r" + std::to_string(i), "over_limit"}, 1});
        return out;
      },
      3, "rule");
  const std::string text = registry.Render();
  EXPECT_TRUE(absl::StrContains(text, "hits{rule=\"_other\",result=\"over_limit\"} 2")) << text;
}

// ---- OTLP: integer resource attributes ----

TEST(OtlpResourceTest, IntegerAttributesAreEncodedAsIntValue) {
  const std::string bytes =
      EncodeExportRequest({{"service.name", "svc"}, {"process.pid", int64_t{4242}}}, "scope", {});
  opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest req;
  ASSERT_TRUE(req.ParseFromString(bytes));
  const auto& attrs = req.resource_spans(0).resource().attributes();
  ASSERT_EQ(attrs.size(), 2);
  EXPECT_EQ(attrs[0].value().string_value(), "svc");
  EXPECT_EQ(attrs[1].key(), "process.pid");
  EXPECT_EQ(attrs[1].value().value_case(), opentelemetry::proto::common::v1::AnyValue::kIntValue);
  EXPECT_EQ(attrs[1].value().int_value(), 4242);
}

// ---- Limits file: warnings for an empty and for a deleted file ----

int CountLines(const std::string& text, absl::string_view needle) {
  int n = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) n += absl::StrContains(line, needle);
  return n;
}

TEST(LimitsFileWarningTest, EmptyFileWarnsNoLimitsDefined) {
  TempDir dir;
  WriteFileAtomically(dir.File("limits.yaml"), "");
  LimitRegistry registry;
  LimitsFileWatcher watcher(dir.File("limits.yaml"), registry, absl::Hours(1));
  ::testing::internal::CaptureStderr();
  ASSERT_OK(watcher.Load());
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(CountLines(err, "WARNING no limits defined"), 1) << err;
}

TEST(LimitsFileWarningTest, DeletedFileWarnsOnceAndKeepsTheDefinitions) {
  TempDir dir;
  WriteFileAtomically(
      dir.File("limits.yaml"),
      "limits:\n  - name: api\n    kind: token_bucket\n    rate: 1\n    period: 1s\n");
  LimitRegistry registry;
  LimitsFileWatcher watcher(dir.File("limits.yaml"), registry, absl::Hours(1));
  ASSERT_OK(watcher.Load());
  ASSERT_EQ(std::remove(dir.File("limits.yaml").c_str()), 0);
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) ASSERT_OK(watcher.ReloadIfChanged());
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(CountLines(err, "WARNING limits file missing"), 1) << err;
  EXPECT_NE(registry.Current()->Find("api"), nullptr);
}

}  // namespace
}  // namespace ratelimit
