#include "tests/support/fake_collector.h"

namespace ratelimit::testing {

namespace collector = opentelemetry::proto::collector::trace::v1;

FakeCollector::FakeCollector() {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(this);
  server_ = builder.BuildAndStart();
}

FakeCollector::~FakeCollector() { server_->Shutdown(); }

void FakeCollector::FailNext(int calls) {
  absl::MutexLock lock(&mu_);
  fail_next_ = calls;
}

grpc::ServerUnaryReactor* FakeCollector::Export(
    grpc::CallbackServerContext* context, const collector::ExportTraceServiceRequest* request,
    collector::ExportTraceServiceResponse* /*response*/) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::MutexLock lock(&mu_);
  ++calls_;
  if (fail_next_ > 0) {
    --fail_next_;
    reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "collector told to fail"));
    return reactor;
  }
  requests_.push_back(*request);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

std::vector<collector::ExportTraceServiceRequest> FakeCollector::Requests() {
  absl::MutexLock lock(&mu_);
  return requests_;
}

std::vector<opentelemetry::proto::trace::v1::Span> FakeCollector::Spans() {
  absl::MutexLock lock(&mu_);
  std::vector<opentelemetry::proto::trace::v1::Span> out;
  for (const auto& r : requests_) {
    for (const auto& rs : r.resource_spans()) {
      for (const auto& ss : rs.scope_spans()) {
        for (const auto& s : ss.spans()) out.push_back(s);
      }
    }
  }
  return out;
}

int FakeCollector::calls() const {
  absl::MutexLock lock(&mu_);
  return calls_;
}

bool FakeCollector::WaitForSpans(size_t n, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    size_t count = 0;
    for (const auto& r : requests_) {
      for (const auto& rs : r.resource_spans()) {
        for (const auto& ss : rs.scope_spans()) count += ss.spans_size();
      }
    }
    return count >= n;
  };
  return mu_.AwaitWithDeadline(absl::Condition(&enough), deadline);
}

}  // namespace ratelimit::testing
