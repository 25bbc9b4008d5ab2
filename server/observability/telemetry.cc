#include "server/observability/telemetry.h"

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "server/observability/trace_context.h"

namespace ratelimit {
namespace {

std::optional<std::string> Metadata(const grpc::ServerContextBase& context, const char* key) {
  const auto& md = context.client_metadata();
  auto it = md.find(key);
  if (it == md.end()) return std::nullopt;
  return std::string(it->second.data(), it->second.size());
}

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

const char* ModeName(Mode mode) {
  switch (mode) {
    case Mode::kCheck:
      return "check";
    case Mode::kConsume:
      return "consume";
    case Mode::kReserve:
      return "reserve";
  }
  return "consume";
}

// A store round trip as a CLIENT span.
class StoreClientSpan final : public StoreSpan {
 public:
  explicit StoreClientSpan(Span span) : span_(std::move(span)) {}
  void SetAttribute(const char* key, absl::string_view value) override {
    span_.SetAttribute(key, value);
  }
  void SetAttribute(const char* key, int64_t value) override { span_.SetAttribute(key, value); }
  void SetError(absl::string_view message) override { span_.SetError(message); }
  void End() override { span_.End(); }

 private:
  Span span_;
};

// Starts the round-trip spans of one store call as children of its span.
class StoreSpanTracer final : public StoreTracer {
 public:
  explicit StoreSpanTracer(const Span& parent) : parent_(parent) {}
  std::unique_ptr<StoreSpan> StartClientSpan(const char* name) override {
    return std::make_unique<StoreClientSpan>(parent_.StartChild(name, SpanKind::kClient));
  }

 private:
  const Span& parent_;
};

}  // namespace

ServerMetrics::ServerMetrics(MetricsRegistry& r)
    : decisions(r.AddCounter("ratelimit_decisions_total",
                             "Limit decisions of Consume, Reserve and ShouldRateLimit, by limit "
                             "name and outcome (allowed, denied, reserved, failed_open).",
                             {"limit", "outcome"}, 2000, "limit")),
      override_decisions(r.AddCounter(
          "ratelimit_override_decisions_total",
          "Limit decisions of Consume and Reserve whose limit a runtime override set, by limit "
          "name.",
          {"limit"}, 2000, "limit")),
      rpcs(r.AddCounter("ratelimit_rpcs_total", "Finished RPCs by method and gRPC status code.",
                        {"method", "code"})),
      rpc_seconds(r.AddHistogram("ratelimit_rpc_duration_seconds",
                                 "Time from the start of a handler to its reply, by method.",
                                 {"method"}, LatencyBuckets())),
      store_seconds(r.AddHistogram("ratelimit_store_transaction_duration_seconds",
                                   "Time of one state-store transaction (lock, read, decide, "
                                   "write).",
                                   {}, LatencyBuckets())),
      config_reloads(r.AddCounter("ratelimit_config_reloads_total",
                                  "Reloads of a configuration after its file changed, by "
                                  "configuration (limits, envoy) and result (ok, failed).",
                                  {"config", "result"})),
      settlements(r.AddCounter("ratelimit_settlements_total",
                               "Settled receipts by outcome: returned (tokens given back), "
                               "charged (tokens charged), unchanged, rejected (refused: invalid, "
                               "expired or already settled).",
                               {"outcome"})),
      replays(r.AddCounter("ratelimit_idempotent_replays_total",
                           "Requests answered with the remembered answer of an earlier request "
                           "with the same request_id, by method.",
                           {"method"})),
      lease_acquires(r.AddCounter("ratelimit_lease_acquires_total",
                                  "Acquire calls of concurrency limits by limit name and outcome "
                                  "(acquired, refused: no free slot or a rate limit denied, "
                                  "replayed: a retried request_id).",
                                  {"limit", "outcome"}, 2000, "limit")),
      lease_releases(r.AddCounter("ratelimit_lease_releases_total",
                                  "Release calls by limit name and state (released, not_held: "
                                  "the lease had expired, was released or reset).",
                                  {"limit", "state"}, 2000, "limit")),
      lease_extends(r.AddCounter("ratelimit_lease_extends_total",
                                 "Extend calls (heartbeats) by limit name and state (held, "
                                 "not_held: the holder had lost the lease).",
                                 {"limit", "state"}, 2000, "limit")),
      leases_expired(r.AddCounter("ratelimit_leases_expired_total",
                                  "Leases that expired while held, never released (their holder "
                                  "died or stopped extending): the leak detector. Counted when a "
                                  "decision on the key drops them.",
                                  {"limit"}, 2000, "limit")) {}

void Telemetry::CountSettlement(const char* outcome, int n) const {
  if (metrics_ && n > 0) metrics_->settlements.With({outcome}).Increment(static_cast<uint64_t>(n));
}

void Telemetry::CountSettled(double returned, double charged) const {
  CountSettlement(returned > 0 ? "returned" : charged > 0 ? "charged" : "unchanged", 1);
}

void Telemetry::CountReplay(const char* method) const {
  if (metrics_) metrics_->replays.With({method}).Increment();
}

void Telemetry::CountLeaseAcquire(const std::string& limit, const char* outcome) const {
  if (metrics_) metrics_->lease_acquires.With({limit, outcome}).Increment();
}

void Telemetry::CountLeaseRelease(const std::string& limit, const char* state) const {
  if (metrics_) metrics_->lease_releases.With({limit, state}).Increment();
}

void Telemetry::CountLeaseExtend(const std::string& limit, const char* state) const {
  if (metrics_) metrics_->lease_extends.With({limit, state}).Increment();
}

void Telemetry::CountLeasesExpired(const std::string& limit, int64_t n) const {
  if (metrics_ && n > 0) metrics_->leases_expired.With({limit}).Increment(static_cast<uint64_t>(n));
}

Telemetry::Rpc Telemetry::StartRpc(const char* service, const char* method, const char* span_name,
                                   const grpc::ServerContextBase& context) const {
  Rpc rpc(this, method);
  if (metrics_) rpc.start_nanos_ = clock_.SteadyNanos();
  if (tracer_) {
    const std::optional<std::string> traceparent = Metadata(context, "traceparent");
    const std::optional<std::string> tracestate = Metadata(context, "tracestate");
    const std::optional<TraceContext> parent = ParseTraceContext(traceparent, tracestate);
    rpc.span_ = spans_use_metric_readings_
                    ? tracer_->StartServerSpan(span_name, parent, rpc.start_nanos_)
                    : tracer_->StartServerSpan(span_name, parent);
    if (rpc.span_.recording()) {
      rpc.span_.SetAttribute("rpc.system", "grpc");
      rpc.span_.SetAttribute("rpc.service", service);
      rpc.span_.SetAttribute("rpc.method", method);
    }
  }
  return rpc;
}

void Telemetry::Rpc::SetLimits(absl::Span<const LimitRequest> limits) {
  limits_ = limits;
  if (!span_.recording()) return;
  absl::InlinedVector<absl::string_view, 4> names, keys;
  absl::InlinedVector<double, 4> counts;
  for (const LimitRequest& l : limits) {
    names.push_back(l.name);
    counts.push_back(l.count);
    if (t_->record_keys_) keys.push_back(l.key);
  }
  span_.SetAttribute("ratelimit.limits", absl::MakeConstSpan(names));
  span_.SetAttribute("ratelimit.counts", absl::MakeConstSpan(counts));
  if (t_->record_keys_) span_.SetAttribute("ratelimit.keys", absl::MakeConstSpan(keys));
}

void Telemetry::Rpc::StoreStarted() {
  if (t_->metrics_) store_start_nanos_ = t_->clock_.SteadyNanos();
  store_span_ =
      t_->spans_use_metric_readings_
          ? span_.StartChild("ratelimit.store/transaction", SpanKind::kInternal, store_start_nanos_)
          : span_.StartChild("ratelimit.store/transaction");
  if (store_span_.recording()) {
    store_span_.SetAttribute("db.system", t_->store_system_);
    store_tracer_ = std::make_unique<StoreSpanTracer>(store_span_);
    store_tracer_scope_ = std::make_unique<ScopedStoreTracer>(store_tracer_.get());
  }
}

Telemetry::Rpc::~Rpc() { store_tracer_scope_.reset(); }

void Telemetry::Rpc::StoreFinished(const absl::Status& status) {
  int64_t now = 0;
  if (t_->metrics_) {
    now = t_->clock_.SteadyNanos();
    t_->metrics_->store_seconds.With({}).Observe(static_cast<double>(now - store_start_nanos_) /
                                                 1e9);
  }
  store_tracer_scope_.reset();
  store_tracer_.reset();
  if (!status.ok()) store_span_.SetError(status.message());
  if (t_->spans_use_metric_readings_) {
    store_span_.End(now);
  } else {
    store_span_.End();
  }
}

void Telemetry::Rpc::SetVerdict(const Verdict& v, Mode mode) {
  if (t_->metrics_ && mode != Mode::kCheck) {
    const char* outcome = DecisionOutcome(v, mode);
    for (size_t i = 0; i < v.decisions.size() && i < limits_.size(); ++i) {
      t_->metrics_->decisions.With({limits_[i].name, outcome}).Increment();
    }
    RecordOverrideDecisions(limits_);
  }
  if (!span_.recording()) return;
  span_.SetAttribute("ratelimit.mode", ModeName(mode));
  span_.SetAttribute("ratelimit.decision", v.allowed ? "allowed" : "denied");
  absl::InlinedVector<double, 4> values;
  for (const Decision& d : v.decisions) values.push_back(d.value);
  span_.SetAttribute("ratelimit.values", absl::MakeConstSpan(values));
  if (v.denied_by >= 0) span_.SetAttribute("ratelimit.denied_by", int64_t{v.denied_by});
  if (v.retry_at_us) {
    span_.SetAttribute("ratelimit.retry_after_ms",
                       static_cast<double>(std::max<int64_t>(0, *v.retry_at_us - v.now_us)) / 1e3);
  }
}

void Telemetry::Rpc::SetFailedOpen() {
  if (t_->metrics_) {
    for (const LimitRequest& l : limits_) {
      t_->metrics_->decisions.With({l.name, "failed_open"}).Increment();
    }
  }
  span_.SetAttribute("ratelimit.failed_open", true);
}

void Telemetry::Rpc::SetLimitNames(absl::Span<const absl::string_view> names) {
  span_.SetAttribute("ratelimit.limits", names);
}

const char* Telemetry::Rpc::DecisionOutcome(const Verdict& verdict, Mode mode) {
  return !verdict.allowed ? "denied" : mode == Mode::kReserve ? "reserved" : "allowed";
}

void Telemetry::Rpc::RecordDecision(const std::string& limit, const char* outcome, uint64_t n) {
  if (t_->metrics_ && n > 0) t_->metrics_->decisions.With({limit, outcome}).Increment(n);
}

void Telemetry::Rpc::RecordOverrideDecisions(absl::Span<const LimitRequest> limits) {
  if (t_->metrics_ == nullptr) return;
  for (const LimitRequest& l : limits) {
    if (!l.override_target.empty()) t_->metrics_->override_decisions.With({l.name}).Increment();
  }
}

void Telemetry::Rpc::RecordOverrideDecision(const std::string& limit) {
  if (t_->metrics_) t_->metrics_->override_decisions.With({limit}).Increment();
}

void Telemetry::Rpc::SetDecision(bool allowed) {
  span_.SetAttribute("ratelimit.decision", allowed ? "allowed" : "denied");
}

void Telemetry::Rpc::Finish(const grpc::Status& status) {
  int64_t now = 0;
  if (t_->metrics_) {
    now = t_->clock_.SteadyNanos();
    t_->metrics_->rpcs.With({method_, CodeName(status.error_code())}).Increment();
    t_->metrics_->rpc_seconds.With({method_}).Observe(static_cast<double>(now - start_nanos_) /
                                                      1e9);
  }
  if (span_.recording()) {
    span_.SetAttribute("rpc.grpc.status_code", int64_t{status.error_code()});
    if (!status.ok()) span_.SetError(status.error_message());
    if (t_->spans_use_metric_readings_) {
      span_.End(now);
    } else {
      span_.End();
    }
  }
}

grpc::Status FinishRpc(Telemetry::Rpc& rpc, const grpc::Status& status) {
  rpc.Finish(status);
  return status;
}

}  // namespace ratelimit
