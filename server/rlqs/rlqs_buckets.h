#ifndef RATELIMIT_SERVER_RLQS_RLQS_BUCKETS_H_
#define RATELIMIT_SERVER_RLQS_RLQS_BUCKETS_H_

// The state of the RLQS service without its transport: every bucket (a domain and its BucketId
// pairs in key order), the streams subscribed to it with their demand, and the assignments each
// holds. Reports, stream ends and periodic ticks go in; the assignments (and abandons) to push
// to each stream come out. No clock, no protos, no locks: `now` is an argument.
//
// Rules of the division (docs/envoy.md, "Rate Limit Quota Service"):
// - The first report of a bucket by a stream subscribes the stream; the bucket is then divided
//   again at once and every subscriber gets its assignment (the newcomer's first one included).
//   A stream that ends is unsubscribed and the bucket divided again at once, but the share its
//   assignment holds stays held until that assignment expires: an Envoy whose stream broke goes
//   on enforcing its last assignment until then (only an abandon or a time to live of 0 ends it
//   sooner), so the others grow into it only once it is over.
// - Tick divides every bucket again. A subscriber gets a new assignment when its share moved by
//   more than the rule's reassign_threshold, when the rule changed (a reload), or when its
//   assignment is half-way through its time to live: then its current share, which is the same
//   assignment again when the share did not change (Envoy treats that as an extension and keeps
//   its tokens). So a share that moved by less than the threshold is still sent within half a
//   time to live. When updating only those subscribers would let the held rates sum over the
//   global rate, every subscriber gets its new share.
// - A time to live is three reporting intervals (the longest of the subscribers' latest
//   time_elapsed, at most 300 s, else the configured default), in whole seconds, at least 1.
// - A subscription without a report for `idle_abandon` is abandoned (AbandonAction) and
//   forgotten; a bucket without subscribers is forgotten.
// - Shutdown re-sends every held assignment with a time to live of 0: Envoy falls back at once.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/rlqs/rlqs_allocator.h"
#include "server/rlqs/rlqs_config.h"

namespace ratelimit {

// What a subscriber of a bucket is told.
struct RlqsAssignment {
  enum class Kind { kTokenBucket, kAllowAll, kDenyAll, kAbandon };
  Kind kind = Kind::kAllowAll;
  WholeSecondTokenBucket token_bucket;  // kTokenBucket only
  int64_t ttl_seconds = 0;              // not for kAbandon

  friend bool operator==(const RlqsAssignment&, const RlqsAssignment&) = default;
};

// One action for one stream.
struct RlqsPush {
  uint64_t stream = 0;
  RlqsBucketKey bucket;
  RlqsAssignment assignment;
};

// The quota_buckets of a domain (null: the domain has none, every bucket is ALLOW_ALL).
using RlqsConfigResolver =
    std::function<std::shared_ptr<const RlqsDomainConfig>(absl::string_view domain)>;

// A reported time_elapsed counts as at most this long, and so does the reporting interval assumed
// before reports show it (--rlqs_reporting_interval): a time to live is three of them.
inline constexpr int64_t kMaxRlqsReportingIntervalSeconds = 300;

struct RlqsBucketsOptions {
  // The reporting interval assumed until a bucket's reports show theirs. Default 5 s.
  int64_t default_reporting_interval_seconds = 5;  // at most kMaxRlqsReportingIntervalSeconds
  // A subscription without a report for this long is abandoned. Default 5 minutes.
  absl::Duration idle_abandon = absl::Minutes(5);
  // The most buckets one stream may be subscribed to. Default 10000.
  size_t max_buckets_per_stream = 10000;
  // How often Tick divides the buckets again (--rlqs_reallocation_interval). An assignment lives
  // at least three of these, so that the one sent half-way through its time to live arrives, at
  // the next division, before it ends. Default 1 s.
  int64_t reallocation_interval_us = kMicrosPerSecond;
  // Several replicas share the buckets' budgets (rlqs_replicas.h): a limited bucket is divided
  // among this replica's subscribers within the part SetPart gave it, and sends nothing before
  // it has one. Default false: the whole global rate is this replica's.
  bool fleet = false;
};

// A limited bucket as the fleet sync needs it (rlqs_replicas.h).
struct RlqsLimitedBucket {
  std::string domain;
  RlqsBucketKey key;
  RlqsRule rule;
  std::vector<std::optional<double>> demands;  // of this replica's subscribers
  bool has_part = false;
  double part_rate = 0;  // the part's rate (0 without one)
  // The latest end of a limited assignment sent so far, ended streams' included (0: none), and
  // the time to live a division would give now.
  int64_t sent_until_us = 0;
  int64_t ttl_seconds = 0;
};

// Counters per rule ("<domain>/<rule name>"), for metrics.
struct RlqsRuleStats {
  uint64_t subscribers = 0;       // now, over every bucket of the rule
  double assigned_rate = 0;       // requests per second held by them now
  uint64_t reported_allowed = 0;  // since start
  uint64_t reported_denied = 0;   // since start
  uint64_t over_assignments = 0;  // divisions whose held rates summed over the global rate
};

// What the admin view shows of one subscriber of a bucket (RlqsBuckets::View).
struct RlqsSubscriberView {
  uint64_t stream = 0;
  std::optional<double> demand;  // requests per second; nullopt before a whole-second report
  FairShare held;                // the share its assignment was made from
  RlqsAssignment sent;           // the assignment last sent (has_sent)
  bool has_sent = false;
  int64_t sent_at_us = 0;
  int64_t last_report_us = 0;
};

// What the admin view shows of one bucket.
struct RlqsBucketView {
  RlqsBucketKey key;
  RlqsRule rule;                  // of its last division
  std::optional<FairShare> part;  // fleet mode: this replica's part of the global rate
  std::vector<RlqsSubscriberView> subscribers;  // by stream id
};

// Not thread-safe: the owner serializes calls (RlqsService holds a mutex around it).
class RlqsBuckets {
 public:
  RlqsBuckets(RlqsBucketsOptions options, RlqsConfigResolver resolver);
  RlqsBuckets(const RlqsBuckets&) = delete;
  RlqsBuckets& operator=(const RlqsBuckets&) = delete;

  // Adds a usage report of `stream` for `bucket` of `domain`. A first report subscribes the
  // stream and appends the bucket's new division to `out`. RESOURCE_EXHAUSTED (nothing changed)
  // when it would subscribe the stream to more than max_buckets_per_stream buckets.
  // REQUIRES: `bucket` sorted by key, keys unique, at least one pair.
  absl::Status Report(uint64_t stream, absl::string_view domain, const RlqsBucketKey& bucket,
                      uint64_t allowed, uint64_t denied, int64_t elapsed_us, int64_t now_us,
                      std::vector<RlqsPush>& out);
  // The stream ended: unsubscribes it everywhere; the others' new shares go to `out`.
  void RemoveStream(uint64_t stream, int64_t now_us, std::vector<RlqsPush>& out);
  // Divides every bucket again, abandons idle subscriptions (see the top of this file).
  void Tick(int64_t now_us, std::vector<RlqsPush>& out);
  // Every held assignment again with a time to live of 0, which ends them: a stream that ends
  // afterwards leaves no share held, and nothing is divided or sent any more.
  void Shutdown(std::vector<RlqsPush>& out);

  // Fleet mode (options.fleet): the buckets whose rule is a limit; only those without a part
  // when `without_part_only`.
  std::vector<RlqsLimitedBucket> LimitedBuckets(bool without_part_only) const;
  // Fleet mode: this replica's part of the bucket's global rate (nullopt: none; its subscribers
  // keep what they hold until it expires). The bucket is divided again within it; the pushes go
  // to `out`. A bucket that is gone is ignored. `claimed_until_us` (0: unchanged) is the time the
  // fleet was told no assignment of this bucket from this replica outlives (rlqs_replicas.h):
  // from then on no assignment is sent with a time to live that would end later.
  void SetPart(absl::string_view domain, const RlqsBucketKey& bucket, std::optional<FairShare> part,
               int64_t claimed_until_us, int64_t now_us, std::vector<RlqsPush>& out);

  // Fleet mode: whether a bucket without a part was subscribed since the last call (the fleet
  // should sync it now); clears the flag.
  bool TakePartsWanted() { return std::exchange(parts_wanted_, false); }

  // Sends no limited assignment before `until_us` (a restart after a crash: the previous
  // process's assignments may be enforced until then, rlqs_horizon.h); the subscribers get their
  // first one at the first division after it.
  void HoldLimitedUntil(int64_t until_us) { hold_until_us_ = until_us; }
  // The latest end of a limited assignment sent so far (its time to live and a second for its
  // delivery; 0: none).
  int64_t latest_expiry_us() const { return latest_expiry_us_; }
  // The latest end of a share held for a stream that ended (0: none), which no message can end.
  int64_t DepartedUntil() const;

  // Buckets `stream` is subscribed to.
  size_t BucketsOf(uint64_t stream) const;
  size_t bucket_count() const { return buckets_.size(); }
  std::map<std::string, RlqsRuleStats> Stats() const;
  // The bucket `key` of `domain`; nullopt when no stream is subscribed to it.
  std::optional<RlqsBucketView> View(absl::string_view domain, const RlqsBucketKey& key) const;
  // Up to `limit` buckets of `domain` in key order, from the first whose key is after `after`
  // (from the first when null).
  std::vector<RlqsBucketView> ViewDomain(absl::string_view domain, const RlqsBucketKey* after,
                                         size_t limit) const;

 private:
  struct Subscriber {
    DemandEstimator demand;
    FairShare held;
    RlqsAssignment sent;
    bool has_sent = false;
    int64_t sent_at_us = 0;
    int64_t last_report_us = 0;
    int64_t interval_us = 0;  // its latest time_elapsed of a second or more; 0: none yet
  };
  // The share of a stream that ended while its assignment was live, held until the assignment
  // expires.
  struct Departed {
    double rate = 0;
    double burst = 0;
    int64_t until_us = 0;
  };
  struct Bucket {
    std::string domain;
    RlqsBucketKey key;
    RlqsRule rule;  // the rule of the last division
    bool has_rule = false;
    std::optional<FairShare> part;  // fleet mode: this replica's part of the global rate
    std::map<uint64_t, Subscriber> subscribers;
    std::vector<Departed> departed;  // a bucket is kept while it has some, even without streams
    int64_t claimed_until_us = 0;    // fleet mode: SetPart's
  };
  using BucketId = std::pair<std::string, RlqsBucketKey>;

  // Drops b's departed shares whose assignments expired by `now_us`; the rate and burst the rest
  // still hold.
  static FairShare StillDeparted(Bucket& b, int64_t now_us);
  // The latest end of b's departed shares (0: none).
  static int64_t DepartedUntil(const Bucket& b);
  // The time to live of b's assignments: three of its subscribers' longest reporting interval,
  // at least three reallocation intervals.
  int64_t TtlSeconds(const Bucket& b) const;
  // Divides `b` again; `force`: every subscriber gets its assignment.
  void Divide(Bucket& b, bool force, int64_t now_us, std::vector<RlqsPush>& out);
  RlqsRule RuleFor(const Bucket& b) const;
  RlqsRuleStats& StatsOf(const Bucket& b);

  const RlqsBucketsOptions options_;
  const RlqsConfigResolver resolver_;
  std::map<BucketId, Bucket> buckets_;
  std::map<uint64_t, std::set<BucketId>> streams_;
  // Counters that outlive buckets (reported usage, over-assignments), by rule.
  std::map<std::string, RlqsRuleStats> totals_;
  bool parts_wanted_ = false;
  int64_t hold_until_us_ = 0;
  bool shut_down_ = false;
  int64_t latest_expiry_us_ = 0;
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_RLQS_RLQS_BUCKETS_H_
