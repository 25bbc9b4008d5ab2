#include "server/rlqs/rlqs_service.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/observability/log.h"
#include "server/observability/trace_context.h"

namespace ratelimit {

namespace rlqs = envoy::service::rate_limit_quota::v3;

namespace {

constexpr char kServiceName[] = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService";
constexpr char kStreamSpan[] =
    "envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas";

std::optional<std::string> Metadata(const grpc::CallbackServerContext& context, const char* key) {
  const auto& md = context.client_metadata();
  auto it = md.find(key);
  if (it == md.end()) return std::nullopt;
  return std::string(it->second.data(), it->second.size());
}

// The stream's SERVER span (a no-op one without a tracer), joining the caller's trace.
Span StartStreamSpan(Tracer* tracer, const grpc::CallbackServerContext& context) {
  if (tracer == nullptr) return Span();
  Span span = tracer->StartServerSpan(
      kStreamSpan,
      ParseTraceContext(Metadata(context, "traceparent"), Metadata(context, "tracestate")));
  if (span.recording()) {
    span.SetAttribute("rpc.system", "grpc");
    span.SetAttribute("rpc.service", kServiceName);
    span.SetAttribute("rpc.method", "StreamRateLimitQuotas");
    span.SetAttribute("net.peer.name", context.peer());
  }
  return span;
}

RlqsBucketsOptions WithFleet(RlqsBucketsOptions options, bool fleet) {
  options.fleet = fleet;
  return options;
}

}  // namespace

// One stream. Every field but the messages and spans is guarded by the service's mutex. gRPC
// operations are started outside it: a write only by the thread that set writing_, Finish only
// by the one that set finished_, so the reactor (deleted in OnDone, after Finish) is alive for
// both. The stream's span is changed only at its start and in OnDone; its children are started
// (a read of it) by the reading thread and the writer.
class RlqsService::Stream final : public grpc::ServerBidiReactor<Reports, Response> {
 public:
  // A stream whose first read is yet to start (Start): read_starts_ is 1 until it has.
  Stream(RlqsService* service, uint64_t id, std::string peer, Span span)
      : service_(service),
        id_(id),
        peer_(std::move(peer)),
        span_(std::move(span)),
        read_starts_(1) {}

  const std::string& peer() const { return peer_; }

  // Ends a stream that is refused before its first read.
  void Refuse(grpc::Status status) {
    {
      absl::MutexLock lock(&service_->mu_);
      RequestFinishLocked(std::move(status), /*drain=*/false);
      finished_ = true;
    }
    Finish(status_);
  }

  // Starts the first read. Outside the service's lock.
  void Start() {
    StartRead(&in_);
    Next next;
    {
      absl::MutexLock lock(&service_->mu_);
      --read_starts_;
      next = NextLocked();
    }
    if (next != Next::kNone) Run(next);
  }

  // Tells the analysis that the service's mutex, which the caller holds, is this stream's.
  void AssertServiceLockHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK(service_->mu_) {
    service_->mu_.AssertHeld();
  }

  // Queues `assignment` for `bucket` (replacing one queued for it).
  void QueueLocked(const RlqsBucketKey& bucket, const RlqsAssignment& assignment)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(service_->mu_) {
    if (finish_requested_ && !drain_) return;
    pending_[bucket] = assignment;
  }

  // Ends the stream with `status`, after the queued writes when `drain`.
  void RequestFinishLocked(grpc::Status status, bool drain)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(service_->mu_) {
    if (finish_requested_) return;
    finish_requested_ = true;
    drain_ = drain;
    status_ = std::move(status);
    if (!drain) pending_.clear();
  }

  // What to start next, outside the lock (Run).
  Next NextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(service_->mu_) {
    if (finished_ || writing_) return Next::kNone;
    if (!pending_.empty() && (!finish_requested_ || drain_)) {
      out_.Clear();
      while (!pending_.empty() && static_cast<size_t>(out_.bucket_action_size()) <
                                      service_->options_.max_actions_per_response) {
        auto it = pending_.begin();
        *out_.add_bucket_action() = ToBucketAction(it->first, it->second);
        pending_.erase(it);
      }
      writing_ = true;
      write_span_ = span_.StartChild("ratelimit.rlqs/push");
      write_span_.SetAttribute("ratelimit.rlqs.actions", int64_t{out_.bucket_action_size()});
      return Next::kWrite;
    }
    if (finish_requested_ && read_starts_ == 0) {
      finished_ = true;
      return Next::kFinish;
    }
    return Next::kNone;
  }

  void Run(Next next) {
    if (next == Next::kWrite) StartWrite(&out_);
    if (next == Next::kFinish) Finish(status_);
  }

  size_t WaitingLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(service_->mu_) {
    return pending_.size() + (writing_ ? static_cast<size_t>(out_.bucket_action_size()) : 0);
  }
  bool WritingLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(service_->mu_) { return writing_; }

  void OnReadDone(bool ok) override {
    std::vector<std::pair<Stream*, Next>> run;
    bool read_again = false;
    bool wake_joiner = false;
    if (!ok) {
      absl::MutexLock lock(&service_->mu_);
      RequestFinishLocked(grpc::Status::OK, /*drain=*/false);
      service_->AddRun(run, this, NextLocked());
    } else {
      Span report = span_.StartChild("ratelimit.rlqs/report");
      report.SetAttribute("ratelimit.rlqs.buckets", int64_t{in_.bucket_quota_usages_size()});
      absl::StatusOr<RlqsReports> reports = ParseRlqsReports(in_, domain_);
      if (reports.ok() && domain_.empty()) {
        Span open = span_.StartChild("ratelimit.rlqs/open");
        open.SetAttribute("ratelimit.rlqs.domain", reports->domain);
        open.SetAttribute("ratelimit.rlqs.stream_id", static_cast<int64_t>(id_));
        open.End();
      }
      absl::MutexLock lock(&service_->mu_);
      if (finish_requested_) {
        // Ending (shutdown, cancellation): a report read meanwhile changes nothing.
      } else if (!reports.ok()) {
        report.SetError(reports.status().message());
        RequestFinishLocked(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                         std::string(reports.status().message())),
                            /*drain=*/false);
      } else {
        domain_ = reports->domain;
        ++service_->stats_.messages;
        const int64_t now = service_->clock_.NowMicros();
        std::vector<RlqsPush> pushes;
        for (const RlqsUsage& u : reports->usages) {
          absl::Status st = service_->buckets_.Report(id_, domain_, u.bucket, u.allowed, u.denied,
                                                      u.elapsed_us, now, pushes);
          if (!st.ok()) {
            report.SetError(st.message());
            RequestFinishLocked(
                grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, std::string(st.message())),
                /*drain=*/false);
            break;
          }
        }
        service_->DeliverLocked(pushes, run);
        wake_joiner = service_->buckets_.TakePartsWanted();
      }
      read_again = !finish_requested_;
      if (read_again) ++read_starts_;
      service_->AddRun(run, this, NextLocked());
      report.End();
    }
    for (auto& [s, next] : run) s->Run(next);
    if (wake_joiner) service_->WakeJoiner();
    if (!read_again) return;
    StartRead(&in_);
    Next next;
    {
      absl::MutexLock lock(&service_->mu_);
      --read_starts_;
      next = NextLocked();
    }
    if (next != Next::kNone) Run(next);
  }

  void OnWriteDone(bool ok) override {
    Next next;
    {
      absl::MutexLock lock(&service_->mu_);
      writing_ = false;
      if (!ok) write_span_.SetError("write failed");
      write_span_.End();
      if (ok) {
        service_->stats_.actions_sent += out_.bucket_action_size();
      } else {
        RequestFinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "write failed"), false);
      }
      next = NextLocked();
    }
    if (next != Next::kNone) Run(next);
  }

  void OnCancel() override {
    Next next;
    {
      absl::MutexLock lock(&service_->mu_);
      RequestFinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"), false);
      next = NextLocked();
    }
    if (next != Next::kNone) Run(next);
  }

  void OnDone() override {
    std::vector<std::pair<Stream*, Next>> run;
    {
      absl::MutexLock lock(&service_->mu_);
      if (service_->streams_.erase(id_) > 0) {
        --service_->stats_.streams;
        auto peer = service_->streams_per_peer_.find(peer_);
        if (peer != service_->streams_per_peer_.end() && --peer->second == 0) {
          service_->streams_per_peer_.erase(peer);
        }
        std::vector<RlqsPush> pushes;
        service_->buckets_.RemoveStream(id_, service_->clock_.NowMicros(), pushes);
        service_->DeliverLocked(pushes, run);
      }
    }
    for (auto& [s, next] : run) s->Run(next);
    if (span_.recording()) {
      if (!domain_.empty()) span_.SetAttribute("ratelimit.rlqs.domain", domain_);
      span_.SetAttribute("rpc.grpc.status_code", int64_t{status_.error_code()});
      if (!status_.ok()) span_.SetError(status_.error_message());
      span_.End();
    }
    RlqsService* service = service_;
    delete this;
    absl::MutexLock lock(&service->mu_);
    --service->live_reactors_;
  }

 private:
  RlqsService* const service_;
  const uint64_t id_;
  const std::string peer_;
  Span span_;           // see the class comment
  std::string domain_;  // read thread only
  Reports in_;          // read thread only
  Response out_;        // the writer only
  Span write_span_;     // the writer only
  std::map<RlqsBucketKey, RlqsAssignment> pending_ ABSL_GUARDED_BY(service_->mu_);
  bool writing_ ABSL_GUARDED_BY(service_->mu_) = false;
  bool finish_requested_ ABSL_GUARDED_BY(service_->mu_) = false;
  bool drain_ ABSL_GUARDED_BY(service_->mu_) = false;
  bool finished_ ABSL_GUARDED_BY(service_->mu_) = false;
  int read_starts_ ABSL_GUARDED_BY(service_->mu_);
  // Set under the lock before finished_ is; read by the thread that set finished_ (Run).
  grpc::Status status_;
};

RlqsService::RlqsService(RlqsServiceOptions options, const Clock& clock,
                         RlqsConfigResolver resolver)
    : options_(std::move(options)),
      clock_(clock),
      buckets_(WithFleet(options_.buckets, options_.board != nullptr), std::move(resolver)),
      horizon_(options_.horizon_path) {
  {
    absl::MutexLock lock(&mu_);
    if (const int64_t until = horizon_.Load(); until > clock_.NowMicros()) {
      buckets_.HoldLimitedUntil(until);
      Log(LogLevel::kInfo, "rlqs: assignments of the previous process may still be enforced",
          {{"limited_assignments_from", absl::FormatTime(absl::FromUnixMicros(until))}});
    }
  }
  if (options_.board == nullptr) return;
  fleet_ = std::make_unique<RlqsReplicas>(options_.replicas, *options_.board);
  joiner_ = std::thread([this] { JoinLoop(); });
}

RlqsService::~RlqsService() {
  {
    absl::MutexLock lock(&join_mu_);
    join_stop_ = true;
  }
  if (joiner_.joinable()) joiner_.join();
}

void RlqsService::JoinLoop() {
  while (true) {
    {
      absl::MutexLock lock(&join_mu_);
      join_mu_.Await(absl::Condition(
          +[](RlqsService* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->join_mu_) {
            return s->join_wanted_ || s->join_stop_;
          },
          this));
      if (join_stop_) return;
      join_wanted_ = false;
    }
    SyncNewBuckets();
  }
}

void RlqsService::WakeJoiner() {
  absl::MutexLock lock(&join_mu_);
  join_wanted_ = true;
}

void RlqsService::SyncNewBuckets() {
  if (options_.board != nullptr) SyncFleet(/*without_part_only=*/true);
}

void RlqsService::SyncFleet(bool without_part_only) {
  absl::MutexLock fleet_lock(&fleet_mu_);
  std::vector<RlqsReplicaBucket> views;
  const int64_t now = clock_.NowMicros();
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    for (RlqsLimitedBucket& b : buckets_.LimitedBuckets(without_part_only)) {
      // What the record claims: no assignment of this bucket outlives it, if this replica writes
      // no later record. It sends for at most three intervals after a record (two of failed
      // syncs, then it drops its part, at the next tick), with at most the time to live of now
      // (SetPart makes longer ones wait for a record that claims them).
      const int64_t claim = std::max(b.sent_until_us, now + 3 * options_.replicas.interval_us +
                                                          (b.ttl_seconds + 1) * kMicrosPerSecond);
      views.push_back({std::move(b.domain), std::move(b.key), std::move(b.rule),
                       std::move(b.demands), b.part_rate, claim});
    }
  }
  if (views.empty()) return;
  std::vector<RlqsReplicas::Result> results = fleet_->Sync(views, now);
  std::vector<std::pair<Stream*, Next>> run;
  {
    absl::MutexLock lock(&mu_);
    std::vector<RlqsPush> pushes;
    for (size_t i = 0; i < views.size(); ++i) {
      const std::string group = RlqsReplicaGroup(views[i].domain, views[i].key);
      ++stats_.fleet_syncs;
      if (results[i].status.ok()) {
        fleet_ok_us_[group] = now;
        buckets_.SetPart(views[i].domain, views[i].key, results[i].part, views[i].held_until_us,
                         now, pushes);
        continue;
      }
      ++stats_.fleet_errors;
      // The board did not answer: keep the part for two intervals, then stop handing it out
      // (the others may have divided it among themselves by then).
      auto ok = fleet_ok_us_.find(group);
      if (ok == fleet_ok_us_.end() || now - ok->second > 2 * options_.replicas.interval_us) {
        buckets_.SetPart(views[i].domain, views[i].key, std::nullopt, 0, now, pushes);
      }
    }
    stats_.fleet_decisions = fleet_->decisions();
    stats_.fleet_over_assignments = fleet_->over_assignments();
    DeliverLocked(pushes, run);
  }
  for (auto& [s, next] : run) s->Run(next);
  // Forget the groups of buckets gone long ago.
  for (auto it = fleet_ok_us_.begin(); it != fleet_ok_us_.end();) {
    it = now - it->second > 100 * options_.replicas.interval_us ? fleet_ok_us_.erase(it) : ++it;
  }
}

grpc::ServerBidiReactor<RlqsService::Reports, RlqsService::Response>*
RlqsService::StreamRateLimitQuotas(grpc::CallbackServerContext* context) {
  std::string peer = context->peer();
  Span span = StartStreamSpan(options_.tracer, *context);
  Stream* stream = nullptr;
  std::optional<grpc::Status> refused;
  {
    absl::MutexLock lock(&mu_);
    size_t& held = streams_per_peer_[peer];
    if (shut_down_) {
      refused = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down");
    } else if (held >= options_.max_streams_per_connection) {
      ++stats_.refused_streams;
      refused = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                             absl::StrCat("this connection (", peer, ") holds ", held,
                                          " RLQS streams, the most one connection may have "
                                          "(--rlqs_max_streams_per_connection)"));
    }
    if (held == 0 && refused) streams_per_peer_.erase(peer);
    const uint64_t id = refused ? 0 : next_stream_++;
    if (!refused) ++held;
    stream = new Stream(this, id, std::move(peer), std::move(span));  // deletes itself in OnDone
    ++live_reactors_;
    if (!refused) {
      streams_[id] = stream;
      ++stats_.streams;
    }
  }
  if (refused) {
    stream->Refuse(*std::move(refused));
  } else {
    stream->Start();
  }
  return stream;
}

void RlqsService::AddRun(std::vector<std::pair<Stream*, Next>>& run, Stream* s, Next next) {
  if (next != Next::kNone) run.emplace_back(s, next);
}

void RlqsService::DeliverLocked(std::vector<RlqsPush>& pushes,
                                std::vector<std::pair<Stream*, Next>>& run) {
  horizon_.Cover(buckets_.latest_expiry_us());  // recorded before any of them is sent
  std::vector<Stream*> touched;
  for (RlqsPush& p : pushes) {
    auto it = streams_.find(p.stream);
    if (it == streams_.end()) continue;
    it->second->AssertServiceLockHeld();
    it->second->QueueLocked(p.bucket, p.assignment);
    touched.push_back(it->second);
  }
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  for (Stream* s : touched) {
    s->AssertServiceLockHeld();
    AddRun(run, s, s->NextLocked());
  }
}

void RlqsService::Tick() {
  std::vector<std::pair<Stream*, Next>> run;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    std::vector<RlqsPush> pushes;
    buckets_.Tick(clock_.NowMicros(), pushes);
    DeliverLocked(pushes, run);
  }
  for (auto& [s, next] : run) s->Run(next);
  if (options_.board != nullptr) SyncFleet(/*without_part_only=*/false);
}

void RlqsService::Shutdown() {
  std::vector<std::pair<Stream*, Next>> run;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
    std::vector<RlqsPush> pushes;
    buckets_.Shutdown(pushes);
    DeliverLocked(pushes, run);
    horizon_.Close(buckets_.DepartedUntil());  // what the time to live of 0 cannot end
    for (auto& [id, s] : streams_) {
      s->AssertServiceLockHeld();
      s->RequestFinishLocked(grpc::Status::OK, /*drain=*/true);
      AddRun(run, s, s->NextLocked());
    }
  }
  for (auto& [s, next] : run) s->Run(next);
}

bool RlqsService::AwaitStreamsEnded(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return live_reactors_ == 0; };
  return mu_.AwaitWithDeadline(absl::Condition(&ended), deadline);
}

RlqsService::Stats RlqsService::stats() const {
  absl::MutexLock lock(&mu_);
  Stats st = stats_;
  if (options_.board != nullptr) st.buckets_waiting_for_part = buckets_.LimitedBuckets(true).size();
  st.actions_waiting = 0;
  st.writes_in_flight = 0;
  for (const auto& [id, s] : streams_) {
    s->AssertServiceLockHeld();
    st.actions_waiting += s->WaitingLocked();
    if (s->WritingLocked()) ++st.writes_in_flight;
  }
  return st;
}

std::map<std::string, RlqsRuleStats> RlqsService::RuleStats() const {
  absl::MutexLock lock(&mu_);
  return buckets_.Stats();
}

RlqsService::AssignmentsView RlqsService::Assignments(absl::string_view domain,
                                                      const RlqsBucketKey* bucket,
                                                      const RlqsBucketKey* after,
                                                      size_t limit) const {
  AssignmentsView out;
  absl::MutexLock lock(&mu_);
  if (bucket != nullptr) {
    if (std::optional<RlqsBucketView> v = buckets_.View(domain, *bucket)) {
      out.buckets.push_back(*std::move(v));
    }
  } else {
    out.buckets = buckets_.ViewDomain(domain, after, limit);
  }
  for (const RlqsBucketView& b : out.buckets) {
    for (const RlqsSubscriberView& s : b.subscribers) {
      auto it = streams_.find(s.stream);
      if (it != streams_.end()) out.peers[s.stream] = it->second->peer();
    }
  }
  return out;
}

void RegisterRlqsMetrics(MetricsRegistry& registry, const RlqsService& service) {
  const RlqsService* s = &service;
  registry.AddGauge("ratelimit_rlqs_streams", "RLQS streams open now.",
                    [s] { return static_cast<double>(s->stats().streams); });
  registry.AddCollector("ratelimit_rlqs_subscribers",
                        "RLQS subscriptions now, per quota_buckets rule.", "gauge", {"rule"}, [s] {
                          MetricsRegistry::Samples out;
                          for (const auto& [rule, st] : s->RuleStats()) {
                            out.push_back({{rule}, static_cast<double>(st.subscribers)});
                          }
                          return out;
                        });
  registry.AddCollector(
      "ratelimit_rlqs_assigned_rate",
      "Requests per second assigned now to the subscribers of a rule's buckets, in total.", "gauge",
      {"rule"}, [s] {
        MetricsRegistry::Samples out;
        for (const auto& [rule, st] : s->RuleStats()) out.push_back({{rule}, st.assigned_rate});
        return out;
      });
  registry.AddCollector(
      "ratelimit_rlqs_reported_requests_total",
      "Requests Envoy reported over RLQS per rule, by result: allowed or denied.", "counter",
      {"rule", "result"},
      [s] {
        MetricsRegistry::Samples out;
        for (const auto& [rule, st] : s->RuleStats()) {
          out.push_back({{rule, "allowed"}, static_cast<double>(st.reported_allowed)});
          out.push_back({{rule, "denied"}, static_cast<double>(st.reported_denied)});
        }
        return out;
      },
      /*max_series=*/2000, /*capped_label=*/"rule");
  registry.AddCollector(
      "ratelimit_rlqs_replica_syncs_total",
      "Buckets this replica synced with the other replicas through the store, by result: ok or "
      "error (--store=redis only).",
      "counter", {"result"}, [s] {
        const RlqsService::Stats st = s->stats();
        return MetricsRegistry::Samples{
            {{"ok"}, static_cast<double>(st.fleet_syncs - st.fleet_errors)},
            {{"error"}, static_cast<double>(st.fleet_errors)}};
      });
  registry.AddCounterFn("ratelimit_rlqs_replica_decisions_total",
                        "Divisions of a bucket among the replicas that this replica wrote.",
                        [s] { return static_cast<double>(s->stats().fleet_decisions); });
  registry.AddCounterFn(
      "ratelimit_rlqs_replica_over_assignments_total",
      "Syncs in which this replica, leading a bucket, read records whose parts summed over the "
      "bucket's global rate (expected 0).",
      [s] { return static_cast<double>(s->stats().fleet_over_assignments); });
  registry.AddCollector(
      "ratelimit_rlqs_over_assignments_total",
      "Divisions after which a bucket's held rates summed over its global rate (expected 0).",
      "counter", {"rule"}, [s] {
        MetricsRegistry::Samples out;
        for (const auto& [rule, st] : s->RuleStats()) {
          out.push_back({{rule}, static_cast<double>(st.over_assignments)});
        }
        return out;
      });
}

}  // namespace ratelimit
