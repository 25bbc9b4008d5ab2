#include "server/observability/otlp_exporter.h"

#include <chrono>

#include "absl/strings/match.h"
#include "grpcpp/grpcpp.h"
#include "server/log.h"

namespace ratelimit {
namespace {

namespace collector = opentelemetry::proto::collector::trace::v1;
namespace otlp = opentelemetry::proto::trace::v1;
namespace common = opentelemetry::proto::common::v1;

constexpr char kScopeName[] = "ratelimit";

std::string StripScheme(absl::string_view endpoint) {
  for (absl::string_view scheme : {"http://", "https://"}) {
    if (absl::StartsWith(endpoint, scheme)) endpoint.remove_prefix(scheme.size());
  }
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.remove_suffix(1);
  return std::string(endpoint);
}

void SetValue(const AttributeValue& v, common::AnyValue* out) {
  struct Visitor {
    common::AnyValue* out;
    void operator()(const std::string& s) { out->set_string_value(s); }
    void operator()(int64_t i) { out->set_int_value(i); }
    void operator()(double d) { out->set_double_value(d); }
    void operator()(bool b) { out->set_bool_value(b); }
    void operator()(const std::vector<std::string>& a) {
      for (const std::string& s : a) out->mutable_array_value()->add_values()->set_string_value(s);
    }
    void operator()(const std::vector<double>& a) {
      for (double d : a) out->mutable_array_value()->add_values()->set_double_value(d);
    }
  };
  std::visit(Visitor{out}, v);
}

}  // namespace

collector::ExportTraceServiceRequest BuildExportRequest(
    const std::vector<std::pair<std::string, std::string>>& resource,
    std::vector<SpanData>& spans) {
  collector::ExportTraceServiceRequest request;
  otlp::ResourceSpans* rs = request.add_resource_spans();
  for (const auto& [key, value] : resource) {
    common::KeyValue* kv = rs->mutable_resource()->add_attributes();
    kv->set_key(key);
    kv->mutable_value()->set_string_value(value);
  }
  otlp::ScopeSpans* ss = rs->add_scope_spans();
  ss->mutable_scope()->set_name(kScopeName);
  for (SpanData& s : spans) {
    otlp::Span* span = ss->add_spans();
    span->set_trace_id(std::string(s.trace_id.begin(), s.trace_id.end()));
    span->set_span_id(std::string(s.span_id.begin(), s.span_id.end()));
    if (s.parent_span_id) {
      span->set_parent_span_id(std::string(s.parent_span_id->begin(), s.parent_span_id->end()));
    }
    span->set_trace_state(std::move(s.trace_state));
    span->set_flags(s.flags);
    span->set_name(std::move(s.name));
    span->set_kind(s.kind == SpanKind::kServer ? otlp::Span::SPAN_KIND_SERVER
                                               : otlp::Span::SPAN_KIND_INTERNAL);
    span->set_start_time_unix_nano(static_cast<uint64_t>(s.start_unix_nanos));
    span->set_end_time_unix_nano(static_cast<uint64_t>(s.end_unix_nanos));
    for (const SpanAttribute& a : s.attributes) {
      common::KeyValue* kv = span->add_attributes();
      kv->set_key(a.key);
      SetValue(a.value, kv->mutable_value());
    }
    if (s.error) {
      span->mutable_status()->set_code(otlp::Status::STATUS_CODE_ERROR);
      span->mutable_status()->set_message(std::move(s.status_message));
    }
  }
  return request;
}

OtlpExporter::OtlpExporter(OtlpExporterOptions options)
    : options_(std::move(options)),
      stub_(collector::TraceService::NewStub(grpc::CreateChannel(
          StripScheme(options_.endpoint), grpc::InsecureChannelCredentials()))) {
  thread_ = std::thread([this] { Run(); });
}

OtlpExporter::~OtlpExporter() { Shutdown(absl::Seconds(1)); }

void OtlpExporter::Submit(SpanData span) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || queue_.size() >= options_.max_queue) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  queue_.push_back(std::move(span));
}

OtlpExporter::Stats OtlpExporter::stats() const {
  Stats s;
  {
    absl::MutexLock lock(&mu_);
    s.queued = queue_.size();
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
    }
  }
  if (thread_.joinable()) thread_.join();
}

bool OtlpExporter::Send(const collector::ExportTraceServiceRequest& request, absl::Time give_up) {
  absl::Duration backoff = options_.initial_backoff;
  for (int attempt = 1;; ++attempt) {
    grpc::ClientContext context;
    const absl::Time deadline = std::min(absl::Now() + options_.export_timeout, give_up);
    context.set_deadline(absl::ToChronoTime(deadline));
    collector::ExportTraceServiceResponse response;
    const grpc::Status status = stub_->Export(&context, request, &response);
    if (status.ok()) return true;
    failed_exports_.fetch_add(1, std::memory_order_relaxed);
    if (attempt == 1) {
      Log(LogLevel::kWarning, "trace export failed; retrying",
          {{"endpoint", options_.endpoint}, {"error", status.error_message()}});
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
      if (!stopping_) mu_.AwaitWithTimeout(absl::Condition(&stopping_), backoff);
      stopping = stopping_;
      if (stopping) give_up = std::min(give_up, shutdown_deadline_);
    }
    if (stopping) absl::SleepFor(std::min(backoff, give_up - absl::Now()));
    if (absl::Now() >= give_up) return false;
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

void OtlpExporter::Run() {
  for (;;) {
    std::vector<SpanData> batch;
    absl::Time give_up;
    bool stopping;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || queue_.size() >= options_.max_batch;
      };
      mu_.AwaitWithTimeout(absl::Condition(&ready), options_.batch_delay);
      stopping = stopping_;
      if (queue_.empty()) {
        if (stopping) return;
        continue;
      }
      const size_t n = std::min(queue_.size(), options_.max_batch);
      batch.reserve(n);
      for (size_t i = 0; i < n; ++i) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      give_up = stopping ? shutdown_deadline_ : absl::InfiniteFuture();
    }
    const size_t n = batch.size();
    const collector::ExportTraceServiceRequest request =
        BuildExportRequest(options_.resource, batch);
    if (Send(request, give_up)) {
      exported_.fetch_add(n, std::memory_order_relaxed);
    } else {
      dropped_.fetch_add(n, std::memory_order_relaxed);
    }
    if (stopping) {
      absl::MutexLock lock(&mu_);
      if (absl::Now() >= shutdown_deadline_) {
        dropped_.fetch_add(queue_.size(), std::memory_order_relaxed);
        queue_.clear();
        return;
      }
    }
  }
}

}  // namespace ratelimit
