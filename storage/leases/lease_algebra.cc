// The lease algebra (lease.h): DecideLease and LeaseSetExpiresAt. Pure; every rule is stated in
// lease.h, which the Redis function library repeats in Lua.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "storage/leases/lease.h"
#include "storage/status_util.h"

namespace ratelimit {
namespace {

// The set as read at now_us: the kept leases (expired and request_id-less released ones dropped),
// the slots held, the leases that expired unreleased and the earliest expiry of the kept ones.
struct ReadSet {
  std::vector<Lease> kept;
  LeaseSetIndex index;  // of `kept`
  int64_t held = 0;
  int64_t expired_unreleased = 0;
  int64_t earliest_expiry = INT64_MAX;
};

// Takes the leases of `current` (moved, in order: nothing is copied).
ReadSet Read(LeaseSet current, int64_t now_us) {
  ReadSet r;
  r.kept = std::move(current.leases);
  r.index = std::move(current.index);
  // Sums in locals: kept in registers, not added to `r` through memory lease by lease.
  int64_t held = 0;
  int64_t expired_unreleased = 0;
  int64_t earliest = INT64_MAX;
  size_t out = 0;
  for (size_t i = 0; i < r.kept.size(); ++i) {
    Lease& l = r.kept[i];
    if (now_us >= l.expires_at_us) {
      if (!l.released) ++expired_unreleased;
      r.index.Dropping(l);
      continue;
    }
    if (l.released && l.request_id.empty()) {
      r.index.Dropping(l);
      continue;
    }
    if (!l.released) held += l.count;
    earliest = std::min(earliest, l.expires_at_us);
    if (out != i) r.kept[out] = std::move(l);
    ++out;
  }
  if (out != r.kept.size()) r.index.Reordered();
  r.kept.resize(out);
  r.held = held;
  r.expired_unreleased = expired_unreleased;
  r.earliest_expiry = earliest;
  return r;
}

// The held leases of `kept`, soonest expiry first (ties: earlier acquired, then id).
std::vector<Lease> HeldSorted(const std::vector<Lease>& kept) {
  std::vector<Lease> out;
  for (const Lease& l : kept) {
    if (!l.released) out.push_back(l);
  }
  std::sort(out.begin(), out.end(), [](const Lease& a, const Lease& b) {
    if (a.expires_at_us != b.expires_at_us) return a.expires_at_us < b.expires_at_us;
    if (a.acquired_at_us != b.acquired_at_us) return a.acquired_at_us < b.acquired_at_us;
    return a.id < b.id;
  });
  return out;
}

// The first expiry at which the held slots are down to `target`, the leases expiring soonest
// first. REQUIRES: target >= 0 (then the last expiry always qualifies).
int64_t RetryAt(const std::vector<Lease>& kept, int64_t held, int64_t target) {
  int64_t remaining = held;
  for (const Lease& l : HeldSorted(kept)) {
    remaining -= l.count;
    if (remaining <= target) return l.expires_at_us;
  }
  return 0;  // unreachable when held > target >= 0
}

// now_us + ttl_us, saturating at INT64_MAX.
int64_t ExpiryOf(int64_t now_us, int64_t ttl_us) {
  return now_us > INT64_MAX - ttl_us ? INT64_MAX : now_us + ttl_us;
}

// The index in r.kept of the held lease `id`, or -1.
int FindHeld(ReadSet& r, const std::string& id) {
  const int i = r.index.Find(r.kept, id);
  return i >= 0 && !r.kept[i].released ? i : -1;
}

}  // namespace

LeaseDecision DecideLease(const LeaseOp& op, LeaseSet current, int64_t now_us) {
  LeaseSetSummary unknown;
  LeaseDecision d;
  DecideLease(op, std::move(current), now_us, unknown, d);
  return d;
}

void DecideLease(const LeaseOp& op, LeaseSet current, int64_t now_us, LeaseSetSummary& summary,
                 LeaseDecision& d) {
  ReadSet r;
  if (LeaseSummarySparesRead(summary, now_us)) {
    // Read would keep every lease, in order, and find summary.held held.
    r.kept = std::move(current.leases);
    r.index = std::move(current.index);
    r.held = summary.held;
  } else {
    r = Read(std::move(current), now_us);
    summary.known = true;
    summary.expires_from_us = r.earliest_expiry;
  }
  const int64_t capacity = static_cast<int64_t>(op.config.capacity.value_or(0));
  d.expired_unreleased = r.expired_unreleased;
  d.allowed = true;
  switch (op.action) {
    case LeaseAction::kAcquire:
    case LeaseAction::kCheck: {
      if (op.action == LeaseAction::kAcquire && !op.request_id.empty() &&
          r.index.MayHoldRequestId(r.kept, op.request_id)) {
        for (const Lease& l : r.kept) {
          if (l.request_id == op.request_id) {
            d.replayed = true;
            d.lease = l;
            d.held = r.held;
            d.free = std::max<int64_t>(0, capacity - r.held);
            d.next.leases = std::move(r.kept);
            d.next.index = std::move(r.index);
            summary.held = r.held;
            return;
          }
        }
      }
      if (op.count > capacity) {
        d.allowed = false;
        d.reason = DenyReason::kCountExceedsCapacity;
        break;
      }
      if (r.held + op.count > capacity) {
        d.allowed = false;
        d.reason = DenyReason::kNoFreeSlots;
        d.retry_at_us = RetryAt(r.kept, r.held, capacity - op.count);
        break;
      }
      if (op.action == LeaseAction::kCheck) break;
      Lease l;
      l.id = op.lease_id;
      l.count = op.count;
      l.acquired_at_us = now_us;
      l.expires_at_us = ExpiryOf(now_us, op.ttl_us);
      l.request_id = op.request_id;
      l.holder = op.holder;
      d.lease = l;
      summary.expires_from_us = std::min(summary.expires_from_us, l.expires_at_us);
      r.kept.push_back(std::move(l));
      r.index.Appended(r.kept);
      r.held += op.count;
      d.write = true;
      break;
    }
    case LeaseAction::kRelease: {
      const int i = FindHeld(r, op.lease_id);
      if (i < 0) break;
      d.state = LeaseState::kReleased;
      r.held -= r.kept[i].count;
      if (r.kept[i].request_id.empty()) {
        r.index.Removing(r.kept, static_cast<size_t>(i));
        d.released = std::move(r.kept[i]);
        // The last lease takes its place: a hot key's release moves one lease, not half of them.
        if (static_cast<size_t>(i) + 1 != r.kept.size()) r.kept[i] = std::move(r.kept.back());
        r.kept.pop_back();
      } else {
        d.released = r.kept[i];
        r.kept[i].released = true;
      }
      d.write = true;
      break;
    }
    case LeaseAction::kExtend: {
      const int i = FindHeld(r, op.lease_id);
      if (i < 0) break;
      d.state = LeaseState::kHeld;
      r.kept[i].expires_at_us = ExpiryOf(now_us, op.ttl_us);
      summary.expires_from_us = std::min(summary.expires_from_us, r.kept[i].expires_at_us);
      d.lease = r.kept[i];
      d.write = true;
      break;
    }
    case LeaseAction::kList:
      d.held_leases = HeldSorted(r.kept);
      break;
    case LeaseAction::kReset:
      r.kept.clear();
      r.index.Clear();
      r.held = 0;
      summary.expires_from_us = INT64_MAX;
      d.write = true;
      break;
  }
  d.held = r.held;
  d.free = std::max<int64_t>(0, capacity - r.held);
  d.next.leases = std::move(r.kept);
  d.next.index = std::move(r.index);
  summary.held = r.held;
}

absl::Status ValidateLeaseOp(const LeaseOp& op, absl::string_view field_prefix) {
  if (op.config.kind != LimitKind::kConcurrency) {
    return InvalidField(field_prefix, "config.kind", "must be concurrency");
  }
  // Every decision is validated (a store's run checks each operation): a prefix is joined only
  // when there is one to join.
  std::string joined;
  if (!field_prefix.empty()) joined = absl::StrCat(field_prefix, "config.");
  const absl::string_view config_prefix =
      field_prefix.empty() ? absl::string_view("config.") : absl::string_view(joined);
  if (absl::Status s = ValidateLimitConfig(op.config, config_prefix); !s.ok()) return s;
  const bool takes_count = op.action == LeaseAction::kAcquire || op.action == LeaseAction::kCheck;
  if (takes_count && (op.count < 1 || op.count > static_cast<int64_t>(kMaxSlots))) {
    return InvalidField(field_prefix, "count",
                        absl::StrCat("must be a whole number of slots, 1..1e9, got ", op.count));
  }
  const bool takes_ttl = op.action == LeaseAction::kAcquire || op.action == LeaseAction::kExtend;
  if (takes_ttl && (op.ttl_us < kMinLeaseTtlMicros || op.ttl_us > op.config.max_lease_ttl_us)) {
    return InvalidField(field_prefix, "ttl",
                        absl::StrCat("must be between 1ms and max_lease_ttl (",
                                     op.config.max_lease_ttl_us, "us), got ", op.ttl_us, "us"));
  }
  const bool names_lease = op.action == LeaseAction::kAcquire ||
                           op.action == LeaseAction::kRelease || op.action == LeaseAction::kExtend;
  if (names_lease && op.lease_id.empty()) return InvalidField(field_prefix, "lease_id", "is empty");
  return absl::OkStatus();
}

int64_t LeaseSetExpiresAt(const LeaseSet& set) {
  int64_t latest = 0;
  for (const Lease& l : set.leases) latest = std::max(latest, l.expires_at_us);
  return latest;
}

uint64_t NextLeaseDecisionSeq(uint64_t n) {
  // Relaxed: the store's hold of the key orders its decisions, and one atomic's increments are
  // seen by every thread in one order consistent with it.
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(n, std::memory_order_relaxed);
}

}  // namespace ratelimit
