#ifndef RATELIMIT_SERVER_OBSERVABILITY_OTLP_EXPORTER_H_
#define RATELIMIT_SERVER_OBSERVABILITY_OTLP_EXPORTER_H_

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/generic/generic_stub.h"
#include "server/observability/otlp_encoder.h"
#include "server/observability/repeated_log.h"
#include "server/observability/tracer.h"

namespace ratelimit {

// The exporter's settings: a plain value, copied into the exporter.
struct OtlpExporterOptions {
  // Collector address: "https://host:port" is a TLS channel that verifies the collector's
  // certificate (against tls_ca_pem, else the system roots) and its name; "http://host:port" or
  // "host:port" is plaintext. Required.
  std::string endpoint;
  // PEM CA bundle for an https:// endpoint. Empty: the system roots.
  std::string tls_ca_pem;
  // Resource attributes; service.name should be among them.
  Resource resource;
  // Spans waiting to be sent; beyond this, new spans are dropped (and counted). Default 8192.
  size_t max_queue = 8192;
  // Most spans per Export call. Default 2048.
  size_t max_batch = 2048;
  // A partial batch is sent after waiting this long. Default 500ms.
  absl::Duration batch_delay = absl::Milliseconds(500);
  // Deadline of one Export call. Default 5s.
  absl::Duration export_timeout = absl::Seconds(5);
  // Backoff between attempts when the collector fails: starts here, doubles up to max_backoff;
  // a batch is dropped (counted) after max_attempts.
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
  int max_attempts = 5;
};

// Sends spans to an OpenTelemetry collector over OTLP/gRPC
// (opentelemetry.proto.collector.trace.v1.TraceService/Export) from a background thread, in
// batches by size and delay. Submit never blocks on the network: a full queue drops the span.
//
// Ownership: owns the queued spans, its gRPC channel and its background thread; the destructor
// shuts it down.
// Thread safety: Submit and stats() are thread-safe; Shutdown is called once, by the owner.
class OtlpExporter final : public SpanSink {
 public:
  explicit OtlpExporter(OtlpExporterOptions options);
  ~OtlpExporter() override;  // Shutdown(1s) if not yet shut down

  void Submit(std::string encoded_span) override;

  // Stops accepting spans, sends what is queued (retrying until `deadline` passes), and joins the
  // background thread.
  void Shutdown(absl::Duration deadline = absl::Seconds(5));

  struct Stats {
    uint64_t queued = 0;          // spans waiting now
    uint64_t exported = 0;        // spans the collector accepted
    uint64_t dropped = 0;         // spans lost: queue full, or a batch that exhausted retries
    uint64_t failed_exports = 0;  // Export calls that failed
  };
  Stats stats() const;

 private:
  void Run();
  // Sends one batch with retries; returns whether it was delivered.
  bool Send(const grpc::ByteBuffer& request, absl::Time give_up);

  const OtlpExporterOptions options_;
  // Export is called with bytes from otlp_encoder.h, not with generated messages.
  std::unique_ptr<grpc::GenericStub> stub_;

  // Spans waiting, in batches of at most max_batch, each already framed for the request
  // (AppendFramedSpan): Submit copies a span into the last batch, so the span's own buffer is
  // freed on the thread that made it and the export thread frees one buffer per batch.
  struct Batch {
    std::string framed;
    size_t spans = 0;
  };
  mutable absl::Mutex mu_;
  std::deque<Batch> batches_ ABSL_GUARDED_BY(mu_);
  size_t queued_ ABSL_GUARDED_BY(mu_) = 0;  // spans in batches_
  size_t batch_bytes_hint_ ABSL_GUARDED_BY(mu_) = 64 << 10;
  // Wakes the export thread when a batch fills or a shutdown starts. A condition variable, not a
  // Mutex::Await condition: with the thread waiting on a condition every Submit's unlock would
  // evaluate it.
  absl::CondVar wake_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time shutdown_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();

  std::atomic<uint64_t> exported_{0};
  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> failed_exports_{0};
  // A collector that is down fails every export: logged once, then summarised.
  RepeatedLog export_failed_log_{LogLevel::kWarning, "trace export failed; retrying"};
  std::thread thread_;
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_OBSERVABILITY_OTLP_EXPORTER_H_
