#ifndef RATELIMIT_SERVER_OBSERVABILITY_TELEMETRY_H_
#define RATELIMIT_SERVER_OBSERVABILITY_TELEMETRY_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "grpcpp/grpcpp.h"
#include "server/observability/metrics.h"
#include "server/observability/telemetry_clock.h"
#include "server/observability/tracer.h"
#include "storage/limiter.h"
#include "storage/store_trace.h"

namespace ratelimit {

// The service's metric families, registered in a MetricsRegistry.
//
// Ownership: the families belong to the registry, which must outlive this object. Thread
// safety: thread-safe (recording into families is).
struct ServerMetrics {
  explicit ServerMetrics(MetricsRegistry& registry);

  Family<Counter>& decisions;  // {limit, outcome}: allowed | denied | reserved | failed_open
  Family<Counter>& override_decisions;  // {limit}: decisions a runtime override adjusted
  Family<Counter>& rpcs;                // {method, code}
  Family<Histogram>& rpc_seconds;       // {method}
  Family<Histogram>& store_seconds;     // {}
  Family<Counter>& config_reloads;      // {config, result}: result ok | failed
  // {outcome}: returned (gave tokens back) | charged | unchanged | rejected
  Family<Counter>& settlements;
  Family<Counter>& replays;  // {method}: answers replayed for a retried request_id
  // Concurrency limits (docs/leases.md), by limit name.
  Family<Counter>& lease_acquires;  // {limit, outcome}: acquired | refused | replayed
  Family<Counter>& lease_releases;  // {limit, state}: released | not_held
  Family<Counter>& lease_extends;   // {limit, state}: held | not_held
  Family<Counter>& leases_expired;  // {limit}: leases that expired still held (never released)
};

// What the handlers report about each call: one SERVER span (with a child span for the store
// transaction) and the RPC, decision and latency metrics. Either part may be off (null).
//
// Thread safety: thread-safe; Rpc objects belong to one call.
class Telemetry {
 public:
  // `metrics` and `tracer` may be null; neither is owned. `store_system` is the store's
  // backend_name(), the store spans' `db.system`. Latencies are differences of
  // `clock.SteadyNanos()`; `clock` is not owned and must outlive the Telemetry.
  Telemetry(ServerMetrics* metrics, Tracer* tracer, bool record_keys,
            absl::string_view store_system, const TelemetryClock& clock = TelemetryClock::Real())
      : metrics_(metrics),
        tracer_(tracer),
        record_keys_(record_keys),
        store_system_(store_system),
        clock_(clock),
        spans_use_metric_readings_(metrics != nullptr && tracer != nullptr &&
                                   &tracer->clock() == &clock) {}

  class Rpc {
   public:
    Rpc(Rpc&&) = default;
    ~Rpc();
    // Limits of the request (names, and keys when enabled, as span attributes). `limits` must
    // stay alive until the verdict is recorded.
    void SetLimits(absl::Span<const LimitRequest> limits);
    // Brackets the store transaction: a child span and the store latency histogram. While the
    // call is traced, a StoreTracer is installed on the calling thread (store_trace.h) until
    // StoreFinished, so the store's round trips become CLIENT children of the store span.
    // REQUIRES: both on the same thread; the Rpc is not moved in between (unless the tracer's
    // installation was taken: TakeStoreTracerScope).
    void StoreStarted();
    // Hands the installation of the store tracer on this thread (null when untraced) to the
    // caller, who ends it on this thread once the store's work on this thread is over; the store
    // span stays open, and StoreFinished may then run on any thread. After StoreStarted.
    std::unique_ptr<ScopedStoreTracer> TakeStoreTracerScope() {
      return std::move(store_tracer_scope_);
    }
    void StoreFinished(const absl::Status& status);
    // The outcome: decision metrics by limit name and span attributes.
    void SetVerdict(const Verdict& verdict, Mode mode);
    void SetFailedOpen();
    // For APIs that do not use Verdict (Envoy): the limit names as a span attribute, one
    // decision metric per limit, and the overall decision as a span attribute.
    void SetLimitNames(absl::Span<const absl::string_view> names);
    // Counts `n` decisions of `limit` with `outcome` in the decision metric.
    void RecordDecision(const std::string& limit, const char* outcome, uint64_t n = 1);
    // Counts the decisions of `limits` a runtime override adjusted (override_target set).
    void RecordOverrideDecisions(absl::Span<const LimitRequest> limits);
    // Counts one decision of `limit` that a runtime override adjusted.
    void RecordOverrideDecision(const std::string& limit);
    // The decision metric's outcome label of a verdict taken in `mode` (not kCheck):
    // "denied", "reserved" or "allowed".
    static const char* DecisionOutcome(const Verdict& verdict, Mode mode);
    void SetDecision(bool allowed);
    // Ends the span and records the RPC count and latency. Call once.
    void Finish(const grpc::Status& status);
    // The method observed (StartRpc's `method`).
    const char* method() const { return method_; }
    // Hex trace id for log lines; empty when the call is not traced.
    std::string TraceId() const { return span_.TraceIdHex(); }
    Span& span() { return span_; }

   private:
    friend class Telemetry;
    Rpc(const Telemetry* t, const char* method) : t_(t), method_(method) {}

    const Telemetry* t_;
    const char* method_;
    int64_t start_nanos_ = 0;        // steady clock
    int64_t store_start_nanos_ = 0;  // steady clock
    Span span_;
    Span store_span_;
    // While the store span records: the tracer of its round trips and its installation.
    std::unique_ptr<StoreTracer> store_tracer_;
    std::unique_ptr<ScopedStoreTracer> store_tracer_scope_;
    absl::Span<const LimitRequest> limits_;
  };

  // Starts observing a call of `method` (e.g. "Consume") of `service`, joining the caller's trace
  // when its metadata carries a valid `traceparent` (and `tracestate`). The span is named
  // `span_name` ("<service>/<method>"). REQUIRES: all three are literals.
  Rpc StartRpc(const char* service, const char* method, const char* span_name,
               const grpc::ServerContextBase& context) const;

  bool record_keys() const { return record_keys_; }

  // Settle: `n` settlements with `outcome` ("rejected"), or one settlement by what it did.
  void CountSettlement(const char* outcome, int n) const;
  void CountSettled(double returned, double charged) const;
  // An answer replayed for a retried request_id of `method` (a literal).
  void CountReplay(const char* method) const;
  // Concurrency limits: one Acquire's outcome, one Release's or Extend's state (literals, see
  // ServerMetrics), and `n` leases found expired while held.
  void CountLeaseAcquire(const std::string& limit, const char* outcome) const;
  void CountLeaseRelease(const std::string& limit, const char* state) const;
  void CountLeaseExtend(const std::string& limit, const char* state) const;
  void CountLeasesExpired(const std::string& limit, int64_t n) const;

 private:
  ServerMetrics* const metrics_;
  Tracer* const tracer_;
  const bool record_keys_;
  const std::string store_system_;
  const TelemetryClock& clock_;
  // The latency metrics read the steady clock and the tracer's spans are timed by the same
  // clock: those readings time the spans as well, instead of the spans reading it again.
  const bool spans_use_metric_readings_;
};

// Finishes a unary call's telemetry with `status`; returns `status`, for the handler to return
// (ServeParsed then sends the reply with it).
grpc::Status FinishRpc(Telemetry::Rpc& rpc, const grpc::Status& status);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_OBSERVABILITY_TELEMETRY_H_
