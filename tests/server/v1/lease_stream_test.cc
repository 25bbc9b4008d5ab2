// Lease streams through the real gRPC service (server/v1/lease_stream.cc), on RocksDB on a fake
// clock: ops of every kind answered by id, several in one message decided each as its own call,
// an op's error in its result with the stream going on, malformed messages ending the stream,
// request_id replays, leases outliving the stream, the ops' metrics, and the server's shutdown
// ending an open stream with UNAVAILABLE.
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ratelimit/v1/ratelimit.grpc.pb.h"
#include "server/server.h"
#include "tests/support/client_server_test_support.h"
#include "tests/support/server_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::HttpGet;
using ::ratelimit::testing::TempDir;
using ::testing::HasSubstr;

constexpr int64_t kSecond = ::ratelimit::testing::kSecond;
using Stream = grpc::ClientReaderWriter<v1::LeaseStreamRequest, v1::LeaseStreamResponse>;

constexpr char kLimits[] = R"(limits:
  - name: jobs
    kind: concurrency
    capacity: 3
    lease_ttl: 10s
    max_lease_ttl: 1m
)";

v1::LeaseOp AcquireOp(uint64_t id, const std::string& key, const std::string& request_id = "") {
  v1::LeaseOp op;
  op.set_id(id);
  v1::LimitRequest* l = op.mutable_acquire()->add_limits();
  l->set_name("jobs");
  l->set_key(key);
  op.mutable_acquire()->set_request_id(request_id);
  return op;
}

v1::LeaseOp ReleaseOp(uint64_t id, const std::string& key, const std::string& lease_id) {
  v1::LeaseOp op;
  op.set_id(id);
  op.mutable_release()->set_name("jobs");
  op.mutable_release()->set_key(key);
  op.mutable_release()->set_lease_id(lease_id);
  return op;
}

class LeaseStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    clock_.Set(1000 * kSecond);
    ServerOptions options;
    options.store.lease_sweep_interval = absl::ZeroDuration();
    options.listen.shutdown_grace = absl::Hours(1);  // a shutdown that waited for it would hang
    auto started = ::ratelimit::testing::StartServerAndClient(options, dir_, kLimits, clock_);
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(started->server);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::RateLimitService::NewStub(channel_);
  }

  std::unique_ptr<Stream> Open(grpc::ClientContext& context) {
    return stub_->LeaseStream(&context);
  }

  // Sends `ops` in one message and reads results until every op's id is answered.
  static std::map<uint64_t, v1::LeaseOpResult> Send(Stream& stream,
                                                    const std::vector<v1::LeaseOp>& ops) {
    v1::LeaseStreamRequest request;
    for (const v1::LeaseOp& op : ops) *request.add_ops() = op;
    EXPECT_TRUE(stream.Write(request));
    std::map<uint64_t, v1::LeaseOpResult> results;
    v1::LeaseStreamResponse response;
    while (results.size() < ops.size() && stream.Read(&response)) {
      EXPECT_GT(response.results_size(), 0);
      for (const v1::LeaseOpResult& r : response.results()) {
        EXPECT_FALSE(results.contains(r.id())) << "op " << r.id() << " answered twice";
        results[r.id()] = r;
      }
    }
    EXPECT_EQ(results.size(), ops.size());
    return results;
  }

  uint64_t Held(const std::string& key) {
    v1::RateLimitRequest check;
    v1::LimitRequest* l = check.add_limits();
    l->set_name("jobs");
    l->set_key(key);
    grpc::ClientContext context;
    v1::RateLimitResponse answer;
    EXPECT_TRUE(stub_->Check(&context, check, &answer).ok());
    return 3 - static_cast<uint64_t>(answer.results(0).value());
  }

  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<RateLimitServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::RateLimitService::Stub> stub_;
};

TEST_F(LeaseStreamTest, AcquireExtendAndReleaseAreAnsweredByTheirIds) {
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = Open(context);
  auto acquired = Send(*stream, {AcquireOp(7, "k")});
  ASSERT_EQ(acquired[7].code(), 0) << acquired[7].message();
  ASSERT_TRUE(acquired[7].acquire().allowed());
  const std::string id = acquired[7].acquire().lease().id();
  EXPECT_EQ(Held("k"), 1u);

  v1::LeaseOp extend;
  extend.set_id(8);
  extend.mutable_extend()->set_name("jobs");
  extend.mutable_extend()->set_key("k");
  extend.mutable_extend()->set_lease_id(id);
  auto extended = Send(*stream, {extend});
  EXPECT_EQ(extended[8].extend().state(), v1::HELD);

  auto released = Send(*stream, {ReleaseOp(9, "k", id)});
  EXPECT_EQ(released[9].release().state(), v1::RELEASED);
  EXPECT_EQ(released[9].release().held(), 0u);
  auto again = Send(*stream, {ReleaseOp(10, "k", id)});
  EXPECT_EQ(again[10].release().state(), v1::NOT_HELD);
  EXPECT_EQ(Held("k"), 0u);

  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(LeaseStreamTest, OpsOfOneMessageAreDecidedEachAsItsOwnCall) {
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = Open(context);
  std::vector<v1::LeaseOp> ops;
  for (uint64_t i = 1; i <= 5; ++i) ops.push_back(AcquireOp(i, "k"));
  auto results = Send(*stream, ops);
  int allowed = 0;
  for (const auto& [id, r] : results) {
    EXPECT_EQ(r.code(), 0);
    allowed += r.acquire().allowed() ? 1 : 0;
  }
  EXPECT_EQ(allowed, 3);  // the capacity: the other two are refused, not over-granted
  EXPECT_EQ(Held("k"), 3u);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(LeaseStreamTest, AnOpsErrorIsItsResultAndTheStreamGoesOn) {
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = Open(context);
  v1::LeaseOp empty;
  empty.set_id(1);
  v1::LeaseOp unnamed = AcquireOp(2, "k");
  unnamed.mutable_acquire()->mutable_limits(0)->clear_name();
  v1::LeaseOp bad_id = ReleaseOp(3, "k", "not-an-id");
  auto results = Send(*stream, {empty, unnamed, bad_id, AcquireOp(4, "k")});
  EXPECT_EQ(results[1].code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_THAT(results[1].message(), HasSubstr("one of acquire, release or extend"));
  EXPECT_EQ(results[2].code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_THAT(results[2].message(), HasSubstr("name"));
  EXPECT_FALSE(results[2].has_acquire());
  EXPECT_EQ(results[3].code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_THAT(results[3].message(), HasSubstr("lease_id"));
  EXPECT_TRUE(results[4].acquire().allowed());
  EXPECT_EQ(Held("k"), 1u);  // the refused ops took nothing
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(LeaseStreamTest, AMessageWithNoOpOrTooManyEndsTheStream) {
  {
    grpc::ClientContext context;
    std::unique_ptr<Stream> stream = Open(context);
    EXPECT_TRUE(stream->Write(v1::LeaseStreamRequest()));
    v1::LeaseStreamResponse response;
    EXPECT_FALSE(stream->Read(&response));
    const grpc::Status status = stream->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("ops: at least one op"));
  }
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = Open(context);
  v1::LeaseStreamRequest request;
  for (uint64_t i = 0; i < 1001; ++i) *request.add_ops() = ReleaseOp(i, "k", "00");
  EXPECT_TRUE(stream->Write(request));
  v1::LeaseStreamResponse response;
  EXPECT_FALSE(stream->Read(&response));
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("ops: at most 1000 a message, got 1001"));
}

TEST_F(LeaseStreamTest, AMessageThatDoesNotParseEndsTheStreamNamingTheField) {
  grpc::GenericStub generic(channel_);
  grpc::ClientContext context;
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      generic.PrepareCall(&context, "/ratelimit.v1.RateLimitService/LeaseStream", &cq);
  void* tag = nullptr;
  bool ok = false;
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  // Field 1 (ops) as a length-delimited field whose length runs past the message's end.
  const char body[] = {0x0a, 0x7f, 0x08};
  grpc::Slice slice(body, sizeof(body));
  grpc::ByteBuffer buffer(&slice, 1);
  call->Write(buffer, reinterpret_cast<void*>(2));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(3));
  ASSERT_TRUE(cq.Next(&tag, &ok));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("ops"));
}

TEST_F(LeaseStreamTest, ARetriedAcquireWithItsRequestIdTakesNothing) {
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = Open(context);
  auto first = Send(*stream, {AcquireOp(1, "k", "job-42")});
  auto retry = Send(*stream, {AcquireOp(2, "k", "job-42")});
  ASSERT_TRUE(first[1].acquire().allowed());
  EXPECT_TRUE(retry[2].acquire().replayed());
  EXPECT_EQ(retry[2].acquire().lease().id(), first[1].acquire().lease().id());
  EXPECT_EQ(Held("k"), 1u);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(LeaseStreamTest, LeasesOutliveTheirStreamUntilReleasedOrExpired) {
  std::string id;
  {
    grpc::ClientContext context;
    std::unique_ptr<Stream> stream = Open(context);
    auto acquired = Send(*stream, {AcquireOp(1, "k")});
    id = acquired[1].acquire().lease().id();
    context.TryCancel();  // the holder's stream breaks
    stream->Finish();
  }
  EXPECT_EQ(Held("k"), 1u);
  clock_.Advance(10 * kSecond);  // its lease_ttl: the slot returns by itself
  EXPECT_EQ(Held("k"), 0u);
}

TEST_F(LeaseStreamTest, OpsAreCountedUnderTheirCallsMethods) {
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = Open(context);
  auto acquired = Send(*stream, {AcquireOp(1, "k"), AcquireOp(2, "k")});
  Send(*stream, {ReleaseOp(3, "k", acquired[1].acquire().lease().id())});
  stream->WritesDone();
  ASSERT_TRUE(stream->Finish().ok());
  const auto [status, body] = HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_EQ(status, 200);
  EXPECT_THAT(body,
              HasSubstr("ratelimit_lease_acquires_total{limit=\"jobs\",outcome=\"acquired\"} 2"));
  EXPECT_THAT(body,
              HasSubstr("ratelimit_lease_releases_total{limit=\"jobs\",state=\"released\"} 1"));
  EXPECT_THAT(body, HasSubstr("method=\"Acquire\""));
}

// (The gauge's fall when a stream ends is not asserted: the server lets go of a stream once gRPC is
// done with it, which may be after its client has the status.)
TEST_F(LeaseStreamTest, OpenStreamsAreShownOnTheGauge) {
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = Open(context);
  Send(*stream, {AcquireOp(1, "k")});  // the stream is open once an op was answered on it
  const auto [status, body] = HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_EQ(status, 200);
  EXPECT_THAT(body, HasSubstr("ratelimit_lease_streams_open 1"));
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(LeaseStreamTest, ShutdownAnswersWhatWasReadAndEndsTheStreamUnavailable) {
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = Open(context);
  auto acquired = Send(*stream, {AcquireOp(1, "k")});
  ASSERT_TRUE(acquired[1].acquire().allowed());
  // The stream stays open (no WritesDone): the shutdown must end it, not wait an hour for it.
  std::thread shutdown([&] { server_->Shutdown(); });
  v1::LeaseStreamResponse response;
  EXPECT_FALSE(stream->Read(&response));
  const grpc::Status status = stream->Finish();
  shutdown.join();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace ratelimit
