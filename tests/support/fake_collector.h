#ifndef RATELIMIT_TESTS_SUPPORT_FAKE_COLLECTOR_H_
#define RATELIMIT_TESTS_SUPPORT_FAKE_COLLECTOR_H_

#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.grpc.pb.h"

namespace ratelimit::testing {

// An OTLP/gRPC trace collector for tests: a real gRPC server on port 0 implementing
// TraceService/Export, keeping every span it receives. It can be told to fail the next N calls
// with UNAVAILABLE.
class FakeCollector final
    : public opentelemetry::proto::collector::trace::v1::TraceService::CallbackService {
 public:
  FakeCollector();
  ~FakeCollector() override;

  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  void FailNext(int calls);

  grpc::ServerUnaryReactor* Export(
      grpc::CallbackServerContext* context,
      const opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest* request,
      opentelemetry::proto::collector::trace::v1::ExportTraceServiceResponse* response) override;

  // Requests received so far, and the spans in them (flattened).
  std::vector<opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest> Requests();
  std::vector<opentelemetry::proto::trace::v1::Span> Spans();
  int calls() const;

  // Waits (polling the collected spans, up to `timeout`) until at least `n` spans arrived.
  bool WaitForSpans(size_t n, absl::Duration timeout = absl::Seconds(20));

 private:
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  mutable absl::Mutex mu_;
  std::vector<opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest> requests_
      ABSL_GUARDED_BY(mu_);
  int fail_next_ ABSL_GUARDED_BY(mu_) = 0;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_SUPPORT_FAKE_COLLECTOR_H_
