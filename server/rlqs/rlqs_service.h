#ifndef RATELIMIT_SERVER_RLQS_RLQS_SERVICE_H_
#define RATELIMIT_SERVER_RLQS_RLQS_SERVICE_H_

// envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas: Envoy's rate
// limit quota filter reports the usage of its buckets on a long-lived stream; this service
// answers with the assignments RlqsBuckets (rlqs_buckets.h) decides. The handler is thin: it
// checks and converts each message (ParseRlqsReports, rlqs_convert.h), hands it to the buckets and
// writes the pushes that come out to the streams they are for.
//
// A stream: `domain` from its first message (required there; a later message may repeat it or
// leave it empty). A malformed message ends the stream with INVALID_ARGUMENT naming the field
// and changes nothing; a report past --rlqs_max_buckets_per_stream ends it with
// RESOURCE_EXHAUSTED. A connection (the stream's peer) may hold at most
// --rlqs_max_streams_per_connection streams: one more ends at once with RESOURCE_EXHAUSTED. When
// the client half-closes or cancels, the stream ends and its buckets are divided again among
// their other subscribers.
//
// Traces (with a tracer): each stream is a SERVER span named after the method, joining the
// caller's `traceparent`, ended with the stream's status; its events are INTERNAL children, each
// ended at once: ratelimit.rlqs/open (the domain, at the first message), ratelimit.rlqs/report
// (each message read: its bucket count, and its error when refused) and ratelimit.rlqs/push
// (each response written: its actions, from the start of the write to its end).
//
// Flow control: one write in flight per stream; the actions waiting for it are kept one per
// bucket (a newer action for a bucket replaces the older), so what waits for a client that does
// not read is bounded by its buckets, never by time.
//
// Served through gRPC's callback API, from gRPC's own threads: the service is registered only
// when --rlqs is set (a callback service makes gRPC poll the port from its threads too, which
// costs the serving loop's bursts some of their batching; serving_loop.h).

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "envoy/service/rate_limit_quota/v3/rlqs.grpc.pb.h"
#include "server/observability/metrics.h"
#include "server/observability/tracer.h"
#include "server/rlqs/rlqs_buckets.h"
#include "server/rlqs/rlqs_convert.h"
#include "server/rlqs/rlqs_horizon.h"
#include "server/rlqs/rlqs_replicas.h"
#include "storage/clock.h"
#include "storage/replica_board.h"

namespace ratelimit {

struct RlqsServiceOptions {
  RlqsBucketsOptions buckets;
  // The most actions one response carries. Default 1000.
  size_t max_actions_per_response = 1000;
  // The most streams one connection (one peer address) may hold at once. Default 16; >= 1.
  size_t max_streams_per_connection = 16;
  // Traces each stream and its events (see the top of this file); null: no traces. Not owned;
  // must outlive the service.
  Tracer* tracer = nullptr;
  // Replicas sharing the buckets' budgets (rlqs_replicas.h): the board they share (null: this
  // replica divides every global rate alone) and this replica's name and reallocation interval.
  // Must outlive the service.
  ReplicaBoard* board = nullptr;
  RlqsReplicasOptions replicas;
  // One server owning its store: the file recording how long its limited assignments may last
  // (rlqs_horizon.h), so that a restart after a crash waits for them. Empty: none (a fleet, or
  // no data directory).
  std::string horizon_path;
};

// Thread safety: thread-safe. Ownership: owns the buckets and the streams' reactors (each
// deletes itself when gRPC is done with it); `clock` and the resolver's configuration must
// outlive the service. Shutdown must be called before the gRPC server shuts down.
class RlqsService final
    : public envoy::service::rate_limit_quota::v3::RateLimitQuotaService::CallbackService {
 public:
  using Reports = envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports;
  using Response = envoy::service::rate_limit_quota::v3::RateLimitQuotaResponse;

  RlqsService(RlqsServiceOptions options, const Clock& clock, RlqsConfigResolver resolver);
  ~RlqsService() override;

  grpc::ServerBidiReactor<Reports, Response>* StreamRateLimitQuotas(
      grpc::CallbackServerContext* context) override;

  // Divides every bucket again at the clock's time and pushes the result (rlqs_buckets.h); with
  // a board, first syncs every limited bucket with the other replicas (rlqs_replicas.h). The server
  // calls it every --rlqs_reallocation_interval; tests call it after moving a fake clock.
  void Tick();
  // With a board: syncs at once the buckets that have no part yet (a first subscriber here).
  // A thread of the service calls it when such a bucket appears; tests may call it directly.
  void SyncNewBuckets();
  // Sends every held assignment again with a time to live of 0, then ends every stream with OK
  // once its writes are done; later streams end at once with UNAVAILABLE. Idempotent.
  void Shutdown();
  // Blocks until every stream has ended (its reactor is done), or until `deadline`; returns
  // whether they all ended. After Shutdown, each ends once its writes are done.
  bool AwaitStreamsEnded(absl::Time deadline);

  struct Stats {
    uint64_t streams = 0;                   // open now
    uint64_t messages = 0;                  // usage messages accepted since start
    uint64_t actions_sent = 0;              // bucket actions whose write completed
    uint64_t actions_waiting = 0;           // queued or being written now
    uint64_t writes_in_flight = 0;          // responses being written now (at most one per stream)
    uint64_t refused_streams = 0;           // ended at once: past --rlqs_max_streams_per_connection
    uint64_t fleet_syncs = 0;               // buckets synced with the board
    uint64_t fleet_errors = 0;              // of which the board failed
    uint64_t fleet_decisions = 0;           // decisions this replica wrote
    uint64_t fleet_over_assignments = 0;    // leader syncs that saw the parts sum over the rate
    uint64_t buckets_waiting_for_part = 0;  // limited buckets with no part yet (with a board)
  };
  Stats stats() const;
  std::map<std::string, RlqsRuleStats> RuleStats() const;

  // The live assignments, for the admin view (rlqs_admin_service.h): the bucket `*bucket` of
  // `domain` (none when nobody reports it) when `bucket` is set, else up to `limit` buckets of
  // `domain` in key order after `*after` (from the first when null); with the peers of the
  // streams subscribed to them.
  struct AssignmentsView {
    std::vector<RlqsBucketView> buckets;
    std::map<uint64_t, std::string> peers;  // by stream id
  };
  AssignmentsView Assignments(absl::string_view domain, const RlqsBucketKey* bucket,
                              const RlqsBucketKey* after, size_t limit) const;

 private:
  class Stream;
  friend class Stream;
  // What a stream must start next, outside the lock.
  enum class Next { kNone, kWrite, kFinish };
  // Adds what `s` must start to `run`; kNone is not added, since a stream whose write or Finish
  // another thread started may be gone by the time `run` is run.
  static void AddRun(std::vector<std::pair<Stream*, Next>>& run, Stream* s, Next next);

  // Queues `pushes` on their streams; what each touched stream must start next (outside the
  // lock) goes to `run`.
  void DeliverLocked(std::vector<RlqsPush>& pushes, std::vector<std::pair<Stream*, Next>>& run)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Syncs the limited buckets (all, or those without a part) with the board and applies the
  // parts. Serialized by fleet_mu_; takes mu_ only around reading and applying.
  void SyncFleet(bool without_part_only) ABSL_LOCKS_EXCLUDED(mu_, fleet_mu_);
  void JoinLoop();
  void WakeJoiner();

  const RlqsServiceOptions options_;
  const Clock& clock_;
  absl::Mutex fleet_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::unique_ptr<RlqsReplicas> fleet_ ABSL_GUARDED_BY(fleet_mu_);
  // When the board last answered for a bucket's group (a part older than two intervals is
  // dropped: the others may have given it away).
  std::map<std::string, int64_t> fleet_ok_us_ ABSL_GUARDED_BY(fleet_mu_);
  absl::Mutex join_mu_;
  bool join_wanted_ ABSL_GUARDED_BY(join_mu_) = false;
  bool join_stop_ ABSL_GUARDED_BY(join_mu_) = false;
  std::thread joiner_;
  mutable absl::Mutex mu_;
  RlqsBuckets buckets_ ABSL_GUARDED_BY(mu_);
  RlqsHorizon horizon_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Stream*> streams_ ABSL_GUARDED_BY(mu_);
  // Open streams per peer (connection).
  std::map<std::string, size_t> streams_per_peer_ ABSL_GUARDED_BY(mu_);
  uint64_t next_stream_ ABSL_GUARDED_BY(mu_) = 1;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  // Reactors alive, refused streams' included.
  size_t live_reactors_ ABSL_GUARDED_BY(mu_) = 0;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

// Adds the service's metrics (ratelimit_rlqs_*, docs/envoy.md) to `registry`. `service` must
// outlive the registry's renders.
void RegisterRlqsMetrics(MetricsRegistry& registry, const RlqsService& service);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_RLQS_RLQS_SERVICE_H_
