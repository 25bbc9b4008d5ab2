#include "server/rlqs/rlqs_replicas.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace ratelimit {
namespace {

constexpr absl::string_view kDecisionTag = "rlqs-fleet-1";
constexpr absl::string_view kDemandsTag = "d2:";
constexpr absl::string_view kDemandsTagV1 = "d1:";  // no held_until_us: read, never written
// A decision's held entry is a line of the parts' shape whose name says what it is, so that a
// replica of an earlier version reads it as the part of a replica that does not exist (and
// holds its rate back while a decision spreads, as for any part).
constexpr absl::string_view kHeldPrefix = "held:";
// Rates are compared after a text round trip (%.17g is exact), so plain equality holds.
bool SameRule(const RlqsReplicaDecision& d, const RlqsRule& rule) {
  return d.rate == rule.rate_per_second && d.burst == rule.burst;
}

std::string Number(double v) { return absl::StrFormat("%.17g", v); }

bool ParseNumber(absl::string_view text, double& out) {
  return absl::SimpleAtod(text, &out) && out >= 0;
}

}  // namespace

std::optional<FairShare> RlqsReplicaDecision::PartOf(const std::string& replica,
                                                     int64_t now_us) const {
  auto it = parts.find(replica);
  if (it == parts.end()) return std::nullopt;
  const Part& p = it->second;
  if (now_us < effective_us) return FairShare{p.pre_rate, p.pre_burst};
  return FairShare{p.rate, p.burst};
}

double RlqsReplicaDecision::MostOf(const std::string& replica, int64_t now_us) const {
  auto it = parts.find(replica);
  if (it == parts.end()) return 0;
  const Part& p = it->second;
  return now_us < effective_us ? std::max(p.pre_rate, p.rate) : p.rate;
}

std::string RlqsReplicaDecision::Encode() const {
  std::string out = absl::StrCat(kDecisionTag, " ", Number(rate), " ", Number(burst), " ", made_us,
                                 " ", effective_us, "\n");
  for (const auto& [replica, p] : parts) {
    absl::StrAppend(&out, replica, " ", Number(p.pre_rate), " ", Number(p.pre_burst), " ",
                    Number(p.rate), " ", Number(p.burst), "\n");
  }
  for (const auto& [replica, h] : held) {
    absl::StrAppend(&out, kHeldPrefix, h.until_us, ":", replica, " ", Number(h.rate), " ",
                    Number(h.burst), " ", Number(h.rate), " ", Number(h.burst), "\n");
  }
  return out;
}

std::optional<RlqsReplicaDecision> RlqsReplicaDecision::Decode(absl::string_view text) {
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  if (lines.empty()) return std::nullopt;
  std::vector<absl::string_view> head = absl::StrSplit(lines[0], ' ');
  RlqsReplicaDecision d;
  if (head.size() != 5 || head[0] != kDecisionTag || !ParseNumber(head[1], d.rate) ||
      !ParseNumber(head[2], d.burst) || !absl::SimpleAtoi(head[3], &d.made_us) ||
      !absl::SimpleAtoi(head[4], &d.effective_us)) {
    return std::nullopt;
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    std::vector<absl::string_view> f = absl::StrSplit(lines[i], ' ');
    Part p;
    if (f.size() != 5 || f[0].empty() || !ParseNumber(f[1], p.pre_rate) ||
        !ParseNumber(f[2], p.pre_burst) || !ParseNumber(f[3], p.rate) ||
        !ParseNumber(f[4], p.burst)) {
      return std::nullopt;
    }
    absl::string_view name = f[0];
    if (absl::ConsumePrefix(&name, kHeldPrefix)) {
      const size_t colon = name.find(':');
      Held h{0, p.rate, p.burst};
      if (colon == absl::string_view::npos || colon + 1 == name.size() ||
          !absl::SimpleAtoi(name.substr(0, colon), &h.until_us)) {
        return std::nullopt;
      }
      d.held[std::string(name.substr(colon + 1))] = h;
      continue;
    }
    d.parts[std::string(name)] = p;
  }
  return d;
}

std::string RlqsReplicaRecord::Encode() const {
  std::string out = absl::StrCat(kDemandsTag, Number(in_force), ";", held_until_us, ";");
  for (size_t i = 0; i < demands.size(); ++i) {
    if (i > 0) out += ',';
    out += demands[i].has_value() ? Number(*demands[i]) : "-";
  }
  return out;
}

std::optional<RlqsReplicaRecord> RlqsReplicaRecord::Decode(absl::string_view text) {
  const bool v1 = absl::ConsumePrefix(&text, kDemandsTagV1);
  if (!v1 && !absl::ConsumePrefix(&text, kDemandsTag)) return std::nullopt;
  size_t semi = text.find(';');
  RlqsReplicaRecord out;
  if (semi == absl::string_view::npos || !ParseNumber(text.substr(0, semi), out.in_force)) {
    return std::nullopt;
  }
  text.remove_prefix(semi + 1);
  if (!v1) {
    semi = text.find(';');
    if (semi == absl::string_view::npos ||
        !absl::SimpleAtoi(text.substr(0, semi), &out.held_until_us) || out.held_until_us < 0) {
      return std::nullopt;
    }
    text.remove_prefix(semi + 1);
  }
  if (text.empty()) return out;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    if (item == "-") {
      out.demands.emplace_back();
      continue;
    }
    double v = 0;
    if (!ParseNumber(item, v)) return std::nullopt;
    out.demands.emplace_back(v);
  }
  return out;
}

RlqsReplicaDecision DecideRlqsReplicas(const RlqsRule& rule,
                                       const std::map<std::string, RlqsReplicaRecord>& records,
                                       const std::optional<RlqsReplicaDecision>& previous,
                                       int64_t now_us, int64_t settle_us) {
  std::vector<std::optional<double>> all;
  std::vector<const std::string*> owner;
  for (const auto& [replica, record] : records) {
    for (const std::optional<double>& d : record.demands) {
      all.push_back(d);
      owner.push_back(&replica);
    }
  }
  // Replicas gone (no fresh record) whose Envoys may still enforce what they handed out: held
  // back from the division until then.
  RlqsReplicaDecision next;
  FairShare reserved;
  if (previous.has_value()) {
    for (const auto& [replica, h] : previous->held) {
      if (records.contains(replica) || h.until_us <= now_us) continue;
      next.held[replica] = h;
      reserved.rate += h.rate;
      reserved.burst += h.burst;
    }
  }
  // The newcomers' reserve is kept back fleet-wide, as a share of the whole rule.
  const FairShare left = Distributable(FairShare{rule.rate_per_second, rule.burst}, reserved,
                                       rule.fair_share.newcomer_reserve);
  FairShareSettings settings = rule.fair_share;
  settings.newcomer_reserve = 0;
  const std::vector<FairShare> shares = DivideFairly(left.rate, left.burst, settings, all);
  next.rate = rule.rate_per_second;
  next.burst = rule.burst;
  next.made_us = now_us;
  next.effective_us = now_us + settle_us;
  for (const auto& [replica, record] : records) next.parts[replica];  // no demand: a part of 0
  for (size_t i = 0; i < shares.size(); ++i) {
    RlqsReplicaDecision::Part& p = next.parts[*owner[i]];
    p.rate += shares[i].rate;
    p.burst += shares[i].burst;
  }

  // What each replica may be handing out while the decision spreads: the larger of what its
  // record says and the most the previous decision allows it, also for replicas that are gone
  // (their Envoys may still hold it). A part grows only into what that leaves free, newcomers
  // first.
  std::map<std::string, double> bound;
  for (const auto& [replica, record] : records) bound[replica] = record.in_force;
  if (previous.has_value()) {
    for (const auto& [replica, p] : previous->parts) {
      bound[replica] = std::max(bound[replica], previous->MostOf(replica, now_us));
    }
  }
  for (const auto& [replica, h] : next.held) bound[replica] = std::max(bound[replica], h.rate);
  double headroom = rule.rate_per_second;
  for (const auto& [replica, b] : bound) headroom -= b;
  for (auto& [replica, p] : next.parts) p.pre_rate = std::min(bound[replica], p.rate);
  for (const bool newcomers : {true, false}) {
    for (auto& [replica, p] : next.parts) {
      const bool is_new = !previous.has_value() || !previous->parts.contains(replica);
      if (is_new != newcomers) continue;
      const double give = std::clamp(p.rate - p.pre_rate, 0.0, std::max(headroom, 0.0));
      p.pre_rate += give;
      headroom -= give;
    }
  }
  for (auto& [replica, p] : next.parts) {
    p.pre_burst = p.rate > 0 ? p.burst * (p.pre_rate / p.rate) : 0;
  }
  // Each live replica's entry: until when its Envoys may enforce its assignments, and the most
  // they may hold (what it hands out now, or may under this decision), which the next decision
  // holds back if the replica is gone by then.
  for (const auto& [replica, record] : records) {
    const RlqsReplicaDecision::Part& p = next.parts[replica];
    RlqsReplicaDecision::Held h{record.held_until_us,
                                std::max({bound[replica], p.pre_rate, p.rate}),
                                std::max(p.pre_burst, p.burst)};
    if (previous.has_value()) {
      if (auto old = previous->parts.find(replica); old != previous->parts.end()) {
        h.burst = std::max({h.burst, old->second.pre_burst, old->second.burst});
      }
    }
    if (h.until_us > 0) next.held[replica] = h;
  }
  return next;
}

std::string RlqsReplicaGroup(absl::string_view domain, const RlqsBucketKey& bucket) {
  // Lengths first, so that no pair of distinct buckets shares a name.
  std::string out = absl::StrCat("rlqs:", domain.size(), ":", domain);
  for (const auto& [k, v] : bucket) absl::StrAppend(&out, ":", k.size(), ":", k, v.size(), ":", v);
  return out;
}

RlqsReplicas::RlqsReplicas(RlqsReplicasOptions options, ReplicaBoard& board)
    : options_(std::move(options)), board_(board) {}

std::vector<RlqsReplicas::Result> RlqsReplicas::Sync(absl::Span<const RlqsReplicaBucket> buckets,
                                                     int64_t now_us) {
  std::vector<Result> out;
  out.reserve(buckets.size());
  for (const RlqsReplicaBucket& b : buckets) out.push_back(SyncOne(b, now_us));
  return out;
}

RlqsReplicas::Result RlqsReplicas::SyncOne(const RlqsReplicaBucket& bucket, int64_t now_us) {
  const int64_t interval = options_.interval_us;
  const std::string& me = options_.replica;
  BoardSyncRequest request;
  request.group = RlqsReplicaGroup(bucket.domain, bucket.key);
  request.member = me;
  request.record =
      RlqsReplicaRecord{bucket.in_force, bucket.demands, bucket.held_until_us}.Encode();
  request.now_us = now_us;
  request.lead_us = interval;
  request.stale_us = 3 * interval;
  // The group outlives what its records claim, so that a held entry is not forgotten while the
  // Envoys it stands for may still enforce it.
  request.keep_us = std::max({int64_t{10} * interval, int64_t{60} * kMicrosPerSecond,
                              bucket.held_until_us - now_us + interval});
  absl::StatusOr<BoardSyncReply> reply = board_.Sync(request);
  if (!reply.ok()) return {reply.status(), std::nullopt};
  std::optional<RlqsReplicaDecision> decision = RlqsReplicaDecision::Decode(reply->decision);
  if (reply->leading) {
    double in_force = 0;
    for (const auto& [replica, text] : reply->records) {
      std::optional<RlqsReplicaRecord> r = RlqsReplicaRecord::Decode(text);
      if (r.has_value()) in_force += r->in_force;
    }
    if (in_force > bucket.rule.rate_per_second * (1 + 1e-9)) ++over_assignments_;
  }

  // At most a few rounds: a lost compare-and-set reads the winner's decision, which normally
  // includes this replica; if it does not (it raced with another newcomer), decide again.
  for (int round = 0; round < 3; ++round) {
    const bool urgent =
        !decision.has_value() || !decision->parts.contains(me) || !SameRule(*decision, bucket.rule);
    const bool periodic =
        reply->leading && decision.has_value() && now_us - decision->made_us >= interval * 9 / 10;
    if (!urgent && !periodic) break;
    if (!reply->leading || round > 0) {
      BoardSyncRequest read = request;
      read.record.clear();
      read.lead_us = 0;
      read.read_records = true;
      reply = board_.Sync(read);
      if (!reply.ok()) return {reply.status(), std::nullopt};
      decision = RlqsReplicaDecision::Decode(reply->decision);
      if (decision.has_value() && decision->parts.contains(me) &&
          SameRule(*decision, bucket.rule) && (round > 0 || !periodic)) {
        break;
      }
    }
    std::map<std::string, RlqsReplicaRecord> records;
    for (const auto& [replica, text] : reply->records) {
      std::optional<RlqsReplicaRecord> r = RlqsReplicaRecord::Decode(text);
      if (r.has_value()) records[replica] = std::move(*r);
    }
    records[me] = {bucket.in_force, bucket.demands, bucket.held_until_us};  // ours as written
    RlqsReplicaDecision next =
        DecideRlqsReplicas(bucket.rule, records, decision, now_us, interval * 3 / 2);
    int64_t keep_us = request.keep_us;
    for (const auto& [replica, h] : next.held) keep_us = std::max(keep_us, h.until_us - now_us);
    absl::StatusOr<bool> won = board_.Decide(request.group, reply->version, next.Encode(), keep_us);
    if (!won.ok()) return {won.status(), std::nullopt};
    if (*won) {
      ++decisions_;
      decision = std::move(next);
      break;
    }
    ++lost_races_;
    reply->leading = false;
  }
  if (!decision.has_value()) return {absl::OkStatus(), std::nullopt};
  return {absl::OkStatus(), decision->PartOf(me, now_us)};
}

}  // namespace ratelimit
