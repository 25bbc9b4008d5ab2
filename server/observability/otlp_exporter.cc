#include "server/observability/otlp_exporter.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/match.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "server/observability/log.h"
#include "server/observability/otlp_encoder.h"
#include "storage/worker_thread.h"

namespace ratelimit {
namespace {

constexpr char kScopeName[] = "ratelimit";
constexpr char kExportMethod[] = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

std::string StripScheme(absl::string_view endpoint) {
  for (absl::string_view scheme : {"http://", "https://"}) {
    if (absl::StartsWith(endpoint, scheme)) endpoint.remove_prefix(scheme.size());
  }
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.remove_suffix(1);
  return std::string(endpoint);
}

// TLS for an https:// endpoint (never downgraded: a collector whose certificate does not verify
// gets no spans), plaintext otherwise.
std::shared_ptr<grpc::ChannelCredentials> Credentials(const OtlpExporterOptions& options) {
  if (!absl::StartsWith(options.endpoint, "https://")) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = options.tls_ca_pem;
  return grpc::SslCredentials(ssl);
}

}  // namespace

OtlpExporter::OtlpExporter(OtlpExporterOptions options)
    : options_(std::move(options)),
      stub_(std::make_unique<grpc::GenericStub>(
          grpc::CreateChannel(StripScheme(options_.endpoint), Credentials(options_)))) {
  thread_ = std::thread([this] { Run(); });
}

OtlpExporter::~OtlpExporter() { Shutdown(absl::Seconds(1)); }

void OtlpExporter::Submit(std::string span) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || queued_ >= options_.max_queue) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (batches_.empty() || batches_.back().spans >= options_.max_batch) {
    batches_.emplace_back();
    // The size of the last full batch, so that filling this one rarely reallocates.
    batches_.back().framed.reserve(batch_bytes_hint_);
  }
  Batch& batch = batches_.back();
  AppendFramedSpan(batch.framed, span);
  if (++batch.spans == options_.max_batch) {
    batch_bytes_hint_ = batch.framed.size() + batch.framed.size() / 16;
  }
  if (++queued_ == options_.max_batch) wake_.Signal();
}

OtlpExporter::Stats OtlpExporter::stats() const {
  Stats s;
  {
    absl::MutexLock lock(&mu_);
    s.queued = queued_;
  }
  s.exported = exported_.load();
  s.dropped = dropped_.load();
  s.failed_exports = failed_exports_.load();
  return s;
}

void OtlpExporter::Shutdown(absl::Duration deadline) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      // Already shut down (or shutting down): just make sure the thread is gone.
    } else {
      stopping_ = true;
      shutdown_deadline_ = absl::Now() + deadline;
      wake_.SignalAll();
    }
  }
  if (thread_.joinable()) thread_.join();
}

namespace {

// An Export request as two slices: the header, copied, and the framed spans, handed to gRPC
// without a copy (the slice frees them).
grpc::ByteBuffer RequestBuffer(const std::string& header, std::string framed_spans) {
  auto* owned = new std::string(std::move(framed_spans));
  grpc::Slice slices[] = {grpc::Slice(header),
                          grpc::Slice(
                              owned->data(), owned->size(),
                              [](void* p) { delete static_cast<std::string*>(p); }, owned)};
  return grpc::ByteBuffer(slices, 2);
}

}  // namespace

bool OtlpExporter::Send(const grpc::ByteBuffer& request, absl::Time give_up) {
  absl::Duration backoff = options_.initial_backoff;
  for (int attempt = 1;; ++attempt) {
    grpc::ClientContext context;
    const absl::Time deadline = std::min(absl::Now() + options_.export_timeout, give_up);
    context.set_deadline(absl::ToChronoTime(deadline));
    grpc::ByteBuffer response;
    grpc::Status status;
    // On a completion queue of this call's own, not gRPC's callback API: a process using the
    // callback API gets gRPC threads that poll every socket, the serving loops' too, and hand
    // what they read to the loops with a wake-up (server/serving_loop.h).
    grpc::CompletionQueue cq;
    std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
        stub_->PrepareUnaryCall(&context, kExportMethod, request, &cq);
    call->StartCall();
    call->Finish(&response, &status, &cq);
    void* tag = nullptr;
    bool ok = false;
    (void)cq.Next(&tag, &ok);  // the call's one event: Finish always completes
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
    if (status.ok()) return true;
    failed_exports_.fetch_add(1, std::memory_order_relaxed);
    if (attempt == 1) {
      export_failed_log_.Log({{"endpoint", options_.endpoint}, {"error", status.error_message()}});
    }
    const bool retryable = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                           status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
                           status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED ||
                           status.error_code() == grpc::StatusCode::ABORTED;
    if (!retryable || attempt >= options_.max_attempts || absl::Now() + backoff >= give_up) {
      return false;
    }
    // Wait out the backoff; a shutdown that starts meanwhile bounds the remaining retries by
    // its deadline.
    bool stopping;
    {
      absl::MutexLock lock(&mu_);
      const absl::Time until = absl::Now() + backoff;
      while (!stopping_ && absl::Now() < until) wake_.WaitWithDeadline(&mu_, until);
      stopping = stopping_;
      if (stopping) give_up = std::min(give_up, shutdown_deadline_);
    }
    if (stopping) absl::SleepFor(std::min(backoff, give_up - absl::Now()));
    if (absl::Now() >= give_up) return false;
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

void OtlpExporter::Run() {
  NameWorkerThread("rl-otlp-export");
  for (;;) {
    Batch batch;
    absl::Time give_up;
    bool stopping;
    {
      absl::MutexLock lock(&mu_);
      const absl::Time until = absl::Now() + options_.batch_delay;
      while (!stopping_ && queued_ < options_.max_batch && absl::Now() < until) {
        wake_.WaitWithDeadline(&mu_, until);
      }
      stopping = stopping_;
      if (batches_.empty()) {
        if (stopping) return;
        continue;
      }
      batch = std::move(batches_.front());
      batches_.pop_front();
      queued_ -= batch.spans;
      give_up = stopping ? shutdown_deadline_ : absl::InfiniteFuture();
    }
    const size_t n = batch.spans;
    // The header first: it needs the spans' size, and the spans are moved into the request.
    const std::string header =
        EncodeExportRequestHeader(options_.resource, kScopeName, batch.framed.size());
    const grpc::ByteBuffer request = RequestBuffer(header, std::move(batch.framed));
    if (Send(request, give_up)) {
      exported_.fetch_add(n, std::memory_order_relaxed);
    } else {
      dropped_.fetch_add(n, std::memory_order_relaxed);
    }
    if (stopping) {
      absl::MutexLock lock(&mu_);
      if (absl::Now() >= shutdown_deadline_) {
        dropped_.fetch_add(queued_, std::memory_order_relaxed);
        batches_.clear();
        queued_ = 0;
        return;
      }
    }
  }
}

}  // namespace ratelimit
