#include "server/rlqs/rlqs_buckets.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ratelimit {
namespace {

bool SameRule(const RlqsRule& a, const RlqsRule& b) {
  return a.name == b.name && a.action == b.action && a.rate_per_second == b.rate_per_second &&
         a.burst == b.burst && a.shadow == b.shadow && a.fair_share == b.fair_share;
}

std::string RuleLabel(const std::string& domain, const RlqsRule& rule) {
  return absl::StrCat(domain, "/", rule.name);
}

// Until when an Envoy enforces assignment `a`, delivered at `sent_at_us`, if it holds a rate (a
// token bucket with a time to live); 0 if it holds none. Envoy reads the time to live in whole
// seconds when the assignment arrives: a second more covers its delivery.
int64_t HeldUntil(int64_t sent_at_us, const RlqsAssignment& a) {
  if (a.kind != RlqsAssignment::Kind::kTokenBucket || a.ttl_seconds <= 0) return 0;
  return sent_at_us + (a.ttl_seconds + 1) * kMicrosPerSecond;
}

}  // namespace

RlqsBuckets::RlqsBuckets(RlqsBucketsOptions options, RlqsConfigResolver resolver)
    : options_(std::move(options)), resolver_(std::move(resolver)) {}

RlqsRule RlqsBuckets::RuleFor(const Bucket& b) const {
  std::shared_ptr<const RlqsDomainConfig> config = resolver_ ? resolver_(b.domain) : nullptr;
  if (config == nullptr) {
    RlqsRule allow;
    allow.name = "default";
    return allow;
  }
  return config->Match(b.key);
}

RlqsRuleStats& RlqsBuckets::StatsOf(const Bucket& b) {
  return totals_[RuleLabel(b.domain, b.rule)];
}

absl::Status RlqsBuckets::Report(uint64_t stream, absl::string_view domain,
                                 const RlqsBucketKey& bucket, uint64_t allowed, uint64_t denied,
                                 int64_t elapsed_us, int64_t now_us, std::vector<RlqsPush>& out) {
  BucketId id(std::string(domain), bucket);
  std::set<BucketId>& mine = streams_[stream];
  const bool fresh = !mine.contains(id);
  if (fresh && mine.size() >= options_.max_buckets_per_stream) {
    const size_t held = mine.size();
    if (held == 0) streams_.erase(stream);
    return absl::ResourceExhaustedError(
        absl::StrCat("bucket_quota_usages.bucket_id: this stream is subscribed to ", held,
                     " buckets, the most one stream may have (--rlqs_max_buckets_per_stream)"));
  }
  auto [it, new_bucket] = buckets_.try_emplace(id);
  Bucket& b = it->second;
  if (new_bucket) {
    b.domain = id.first;
    b.key = bucket;
  }
  Subscriber& s = b.subscribers[stream];
  const double smoothing = b.has_rule ? b.rule.fair_share.smoothing : FairShareSettings().smoothing;
  s.demand.AddReport(allowed + denied, elapsed_us, smoothing);
  s.last_report_us = now_us;
  if (elapsed_us >= kMicrosPerSecond) {
    s.interval_us = std::min(elapsed_us, kMaxRlqsReportingIntervalSeconds * kMicrosPerSecond);
  }
  if (fresh) {
    mine.insert(std::move(id));
    Divide(b, /*force=*/true, now_us, out);
  }
  RlqsRuleStats& st = StatsOf(b);  // the bucket has a rule: it was divided when subscribed
  st.reported_allowed += allowed;
  st.reported_denied += denied;
  return absl::OkStatus();
}

void RlqsBuckets::RemoveStream(uint64_t stream, int64_t now_us, std::vector<RlqsPush>& out) {
  auto it = streams_.find(stream);
  if (it == streams_.end()) return;
  for (const BucketId& id : it->second) {
    auto b = buckets_.find(id);
    if (b == buckets_.end()) continue;
    Bucket& bucket = b->second;
    auto s = bucket.subscribers.find(stream);
    if (s != bucket.subscribers.end()) {
      const Subscriber& gone = s->second;
      const int64_t until = gone.has_sent ? HeldUntil(gone.sent_at_us, gone.sent) : 0;
      if (until > now_us) {
        bucket.departed.push_back(Departed{gone.held.rate, gone.held.burst, until});
      }
      bucket.subscribers.erase(s);
    }
    if (!bucket.subscribers.empty()) {
      Divide(bucket, /*force=*/true, now_us, out);
    } else if (bucket.departed.empty()) {
      buckets_.erase(b);
    }
  }
  streams_.erase(it);
}

void RlqsBuckets::Tick(int64_t now_us, std::vector<RlqsPush>& out) {
  const int64_t idle_us = absl::ToInt64Microseconds(options_.idle_abandon);
  for (auto it = buckets_.begin(); it != buckets_.end();) {
    Bucket& b = it->second;
    bool left = false;
    for (auto s = b.subscribers.begin(); s != b.subscribers.end();) {
      if (now_us - s->second.last_report_us < idle_us) {
        ++s;
        continue;
      }
      RlqsPush abandon{s->first, b.key, {}};
      abandon.assignment.kind = RlqsAssignment::Kind::kAbandon;
      out.push_back(std::move(abandon));
      auto st = streams_.find(s->first);
      if (st != streams_.end()) {
        st->second.erase(it->first);
        if (st->second.empty()) streams_.erase(st);
      }
      s = b.subscribers.erase(s);
      left = true;
    }
    if (b.subscribers.empty()) {
      StillDeparted(b, now_us);
      it = b.departed.empty() ? buckets_.erase(it) : std::next(it);
      continue;
    }
    Divide(b, /*force=*/left, now_us, out);
    ++it;
  }
}

FairShare RlqsBuckets::StillDeparted(Bucket& b, int64_t now_us) {
  std::erase_if(b.departed, [now_us](const Departed& d) { return d.until_us <= now_us; });
  FairShare held;
  for (const Departed& d : b.departed) {
    held.rate += d.rate;
    held.burst += d.burst;
  }
  return held;
}

int64_t RlqsBuckets::TtlSeconds(const Bucket& b) const {
  int64_t interval_us = 0;
  for (const auto& [stream, s] : b.subscribers) interval_us = std::max(interval_us, s.interval_us);
  if (interval_us == 0)
    interval_us = options_.default_reporting_interval_seconds * kMicrosPerSecond;
  // Three reporting intervals (as reported, to the microsecond), and three divisions: the
  // assignment sent when this one is half-way through goes out at a division, at most one
  // interval after that half. Rounded up to whole seconds, which is what Envoy reads.
  auto seconds = [](int64_t us) { return (us + kMicrosPerSecond - 1) / kMicrosPerSecond; };
  return std::max(
      {int64_t{1}, seconds(3 * interval_us), seconds(3 * options_.reallocation_interval_us)});
}

void RlqsBuckets::Divide(Bucket& b, bool force, int64_t now_us, std::vector<RlqsPush>& out) {
  if (shut_down_) return;
  RlqsRule rule = RuleFor(b);
  if (!b.has_rule || !SameRule(rule, b.rule)) force = true;
  b.rule = std::move(rule);
  b.has_rule = true;
  const bool limited = b.rule.action == RlqsRuleAction::kLimit && !b.rule.shadow;
  int64_t ttl = TtlSeconds(b);
  if (limited && options_.fleet && b.claimed_until_us > 0) {
    // No assignment outlives what the fleet was told this replica's may last until
    // (SetPart): a longer time to live waits for the next record to claim it, and with less
    // than a second's left (no sync for that long) nothing is sent.
    const int64_t allowed = (b.claimed_until_us - now_us) / kMicrosPerSecond - 1;
    if (allowed < 1) return;
    ttl = std::min(ttl, allowed);
  }

  std::vector<std::optional<double>> demands;
  demands.reserve(b.subscribers.size());
  for (const auto& [stream, s] : b.subscribers) demands.push_back(s.demand.demand());
  if (limited && now_us < hold_until_us_) return;  // a previous process's may be enforced
  // The rate this replica divides: the rule's, or in fleet mode its part (the reserve for
  // newcomers was kept back from the parts fleet-wide), less what ended streams' assignments
  // still hold.
  const FairShare departed = StillDeparted(b, now_us);
  double budget = b.rule.rate_per_second;
  std::vector<FairShare> shares;
  if (limited) {
    FairShare whole{b.rule.rate_per_second, b.rule.burst};
    FairShareSettings settings = b.rule.fair_share;
    // Set aside: the departed streams' shares, and the newcomers' reserve as a share of the whole
    // rule (Distributable).
    double reserve = settings.newcomer_reserve;
    if (options_.fleet) {
      if (!b.part.has_value()) {  // nothing to hand out before the fleet gives a part
        parts_wanted_ = true;
        return;
      }
      whole = *b.part;  // the fleet kept the reserve back from the parts
      reserve = 0;
    }
    settings.newcomer_reserve = 0;
    const FairShare left = Distributable(whole, departed, reserve);
    budget = left.rate;
    shares = DivideFairly(left.rate, left.burst, settings, demands);
  } else {
    shares.resize(b.subscribers.size());
  }

  // Which subscribers get their new share: all when forced; those whose share moved past the
  // threshold; those whose assignment is half-way through its time to live (the new share, or
  // the same assignment again as an extension). All of them when updating only those would let
  // the held rates sum over the global rate.
  std::vector<bool> update(shares.size(), force);
  std::vector<bool> due(shares.size(), false);
  double held_sum = 0;
  size_t i = 0;
  for (const auto& [stream, s] : b.subscribers) {
    // Half-way through the time to live it was sent with (a claim may have shortened it).
    due[i] = s.has_sent && now_us - s.sent_at_us >= s.sent.ttl_seconds * kMicrosPerSecond / 2;
    if (!update[i]) {
      update[i] = !s.has_sent || due[i] || ShareMoved(s.held, shares[i], b.rule.fair_share);
    }
    held_sum += update[i] ? shares[i].rate : s.held.rate;
    ++i;
  }
  if (limited && held_sum > budget) std::fill(update.begin(), update.end(), true);

  i = 0;
  double assigned = 0;
  for (auto& [stream, s] : b.subscribers) {
    const size_t k = i++;
    if (!update[k]) {
      assigned += s.held.rate;
      continue;
    }
    RlqsAssignment a;
    a.ttl_seconds = ttl;
    s.held = shares[k];
    a.kind = b.rule.action == RlqsRuleAction::kDenyAll ? RlqsAssignment::Kind::kDenyAll
             : limited                                 ? RlqsAssignment::Kind::kTokenBucket
                                                       : RlqsAssignment::Kind::kAllowAll;
    if (limited) {
      a.token_bucket = ToWholeSecondTokenBucket(s.held);
      // No whole token in a day: denied, as the share says, by a message Envoy validates.
      if (a.token_bucket.tokens_per_fill == 0) a.kind = RlqsAssignment::Kind::kDenyAll;
    }
    assigned += s.held.rate;
    latest_expiry_us_ = std::max(latest_expiry_us_, HeldUntil(now_us, a));
    s.sent = a;
    s.has_sent = true;
    s.sent_at_us = now_us;
    out.push_back(RlqsPush{stream, b.key, a});
  }
  if (limited && assigned > budget * (1 + 1e-9)) ++StatsOf(b).over_assignments;
}

void RlqsBuckets::Shutdown(std::vector<RlqsPush>& out) {
  shut_down_ = true;
  for (auto& [id, b] : buckets_) {
    for (auto& [stream, s] : b.subscribers) {
      if (!s.has_sent) continue;
      s.sent.ttl_seconds = 0;
      out.push_back(RlqsPush{stream, b.key, s.sent});
    }
  }
}

std::vector<RlqsLimitedBucket> RlqsBuckets::LimitedBuckets(bool without_part_only) const {
  std::vector<RlqsLimitedBucket> out;
  for (const auto& [id, b] : buckets_) {
    if (!b.has_rule || b.rule.action != RlqsRuleAction::kLimit || b.rule.shadow) continue;
    if (without_part_only && b.part.has_value()) continue;
    if (b.subscribers.empty()) continue;  // kept only for its departed shares
    RlqsLimitedBucket& l = out.emplace_back();
    l.domain = b.domain;
    l.key = b.key;
    l.rule = b.rule;
    l.has_part = b.part.has_value();
    l.part_rate = b.part.has_value() ? b.part->rate : 0;
    l.demands.reserve(b.subscribers.size());
    for (const auto& [stream, s] : b.subscribers) {
      l.demands.push_back(s.demand.demand());
      if (s.has_sent) l.sent_until_us = std::max(l.sent_until_us, HeldUntil(s.sent_at_us, s.sent));
    }
    l.sent_until_us = std::max(l.sent_until_us, DepartedUntil(b));
    l.ttl_seconds = TtlSeconds(b);
  }
  return out;
}

void RlqsBuckets::SetPart(absl::string_view domain, const RlqsBucketKey& bucket,
                          std::optional<FairShare> part, int64_t claimed_until_us, int64_t now_us,
                          std::vector<RlqsPush>& out) {
  auto it = buckets_.find(BucketId(std::string(domain), bucket));
  if (it == buckets_.end()) return;
  Bucket& b = it->second;
  b.claimed_until_us = std::max(b.claimed_until_us, claimed_until_us);
  const bool first = !b.part.has_value() && part.has_value();
  b.part = part;
  // The first part sends every subscriber its first assignment; a smaller part than the held
  // shares sum to is caught by Divide's check of the held sum.
  Divide(b, /*force=*/first, now_us, out);
}

int64_t RlqsBuckets::DepartedUntil(const Bucket& b) {
  int64_t until = 0;
  for (const Departed& d : b.departed) until = std::max(until, d.until_us);
  return until;
}

int64_t RlqsBuckets::DepartedUntil() const {
  int64_t until = 0;
  for (const auto& [id, b] : buckets_) until = std::max(until, DepartedUntil(b));
  return until;
}

size_t RlqsBuckets::BucketsOf(uint64_t stream) const {
  auto it = streams_.find(stream);
  return it == streams_.end() ? 0 : it->second.size();
}

std::map<std::string, RlqsRuleStats> RlqsBuckets::Stats() const {
  std::map<std::string, RlqsRuleStats> out = totals_;
  for (const auto& [id, b] : buckets_) {
    if (!b.has_rule) continue;
    RlqsRuleStats& st = out[RuleLabel(b.domain, b.rule)];
    st.subscribers += b.subscribers.size();
    if (b.rule.action == RlqsRuleAction::kLimit && !b.rule.shadow) {
      for (const auto& [stream, s] : b.subscribers) st.assigned_rate += s.held.rate;
      for (const Departed& d : b.departed) st.assigned_rate += d.rate;  // until Tick drops it
    }
  }
  return out;
}

namespace {

RlqsBucketView ToView(const RlqsBucketKey& key, const RlqsRule& rule,
                      const std::optional<FairShare>& part, const auto& subscribers) {
  RlqsBucketView v{key, rule, part, {}};
  for (const auto& [stream, s] : subscribers) {
    v.subscribers.push_back(RlqsSubscriberView{stream, s.demand.demand(), s.held, s.sent,
                                               s.has_sent, s.sent_at_us, s.last_report_us});
  }
  return v;
}

}  // namespace

std::optional<RlqsBucketView> RlqsBuckets::View(absl::string_view domain,
                                                const RlqsBucketKey& key) const {
  auto it = buckets_.find(BucketId(std::string(domain), key));
  if (it == buckets_.end()) return std::nullopt;
  return ToView(it->second.key, it->second.rule, it->second.part, it->second.subscribers);
}

std::vector<RlqsBucketView> RlqsBuckets::ViewDomain(absl::string_view domain,
                                                    const RlqsBucketKey* after,
                                                    size_t limit) const {
  std::vector<RlqsBucketView> out;
  const BucketId from(std::string(domain), after ? *after : RlqsBucketKey());
  auto it = after ? buckets_.upper_bound(from) : buckets_.lower_bound(from);
  for (; it != buckets_.end() && it->first.first == domain && out.size() < limit; ++it) {
    const Bucket& b = it->second;
    out.push_back(ToView(b.key, b.rule, b.part, b.subscribers));
  }
  return out;
}

}  // namespace ratelimit
