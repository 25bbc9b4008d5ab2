// The lease algebra (lease.h): DecideLease and LeaseSetExpiresAt. Pure; every rule is stated in
// lease.h, which the Redis function library repeats in Lua.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
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

// The set as read at now_us when `summary` is known and the set's index knows its expiries: the
// leases that expired are found in expiry order and removed one by one, the last lease taking the
// place of each (the rest are not visited), into d.dropped. False when the index cannot tell:
// the caller passes over the leases left (those dropped before stay dropped and counted).
bool ReadByExpiry(ReadSet& r, const LeaseSetSummary& summary, int64_t now_us, LeaseDecision& d) {
  if (!summary.known) return false;
  int64_t held = summary.held;
  for (;;) {
    const int i = r.index.SoonestExpired(r.kept, now_us);
    if (i == LeaseSetIndex::kUnknown) {
      if (!d.dropped.empty()) break;  // the leases left are read by the pass below
      return false;
    }
    if (i < 0) {
      r.held = held;
      r.earliest_expiry = r.index.EarliestExpiry();
      return true;
    }
    Lease& l = r.kept[static_cast<size_t>(i)];
    if (!l.released) {
      ++r.expired_unreleased;
      held -= l.count;
    }
    d.dropped.push_back(TakeLease(r.kept, r.index, static_cast<size_t>(i)));
  }
  return false;
}

// Takes the leases of `r` (moved in from the set, in order: nothing is copied) and passes over
// them; adds to what `r` counted already. The expired leases are moved into `dropped`.
void Read(ReadSet& r, int64_t now_us, std::vector<Lease>& dropped) {
  // Sums in locals: kept in registers, not added to `r` through memory lease by lease.
  int64_t held = 0;
  int64_t expired_unreleased = r.expired_unreleased;
  int64_t earliest = INT64_MAX;
  size_t out = 0;
  for (size_t i = 0; i < r.kept.size(); ++i) {
    Lease& l = r.kept[i];
    if (now_us >= l.expires_at_us) {
      if (!l.released) ++expired_unreleased;
      r.index.Dropping(l);
      dropped.push_back(std::move(l));
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
  r.index.AskExpiries(r.kept);
  r.held = held;
  r.expired_unreleased = expired_unreleased;
  r.earliest_expiry = earliest;
}

// ListingPage of the leases `candidates` points to (every one held): only the page's leases
// are copied.
std::vector<Lease> PageOf(std::vector<const Lease*> candidates,
                          const std::optional<LeasePlace>& after, int64_t limit, bool* more) {
  if (after) {
    std::erase_if(candidates, [&](const Lease* l) { return !(*after < PlaceOf(*l)); });
  }
  auto before = [](const Lease* a, const Lease* b) { return PlaceOf(*a) < PlaceOf(*b); };
  size_t n = candidates.size();
  if (limit > 0 && static_cast<uint64_t>(limit) < n) {
    n = static_cast<size_t>(limit);
    std::nth_element(candidates.begin(), candidates.begin() + n, candidates.end(), before);
  }
  *more = n < candidates.size();
  std::sort(candidates.begin(), candidates.begin() + n, before);
  std::vector<Lease> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(*candidates[i]);
  return out;
}

// The page `op` lists of the held leases of `kept`.
std::vector<Lease> HeldPage(const LeaseOp& op, const std::vector<Lease>& kept, bool* more) {
  std::vector<const Lease*> held;
  for (const Lease& l : kept) {
    if (!l.released) held.push_back(&l);
  }
  return PageOf(std::move(held), op.list_after, op.list_limit, more);
}

// The first expiry at which the held slots are down to `target`, the leases expiring soonest
// first: in the order the index keeps when it knows it, else sorted. REQUIRES: target >= 0 (then
// the last expiry always qualifies).
int64_t RetryAt(ReadSet& r, int64_t held, int64_t target) {
  int64_t remaining = held;
  int64_t at = 0;
  // A held lease expiring at `expires_at_us` frees `count` slots: true once they are enough.
  const auto frees = [&](int64_t expires_at_us, int64_t count) {
    remaining -= count;
    if (remaining > target) return false;
    at = expires_at_us;
    return true;
  };
  if (r.index.VisitByExpiry(
          r.kept, [&](const Lease& l) { return !l.released && frees(l.expires_at_us, l.count); })) {
    return at;
  }
  // The held leases' expiries and counts, sorted (the leases themselves are not copied).
  std::vector<std::pair<int64_t, int64_t>> expiries;
  expiries.reserve(r.kept.size());
  for (const Lease& l : r.kept) {
    if (!l.released) expiries.emplace_back(l.expires_at_us, l.count);
  }
  std::sort(expiries.begin(), expiries.end());
  remaining = held;
  for (const auto& [expires_at_us, count] : expiries) {
    if (frees(expires_at_us, count)) return at;
  }
  return 0;  // unreachable when held > target >= 0
}

// now_us + ttl_us, saturating at INT64_MAX.
int64_t ExpiryOf(int64_t now_us, int64_t ttl_us) {
  return now_us > INT64_MAX - ttl_us ? INT64_MAX : now_us + ttl_us;
}

// Whether a decision writes: when its action changed the set, and whenever it found leases
// expired unreleased, whatever it was asked. Those are dropped by the decision that finds them,
// so that each is counted once (expired_unreleased, the leak detector).
bool Writes(bool changed, int64_t expired_unreleased) { return changed || expired_unreleased > 0; }

// The kept lease (held or released) acquired under `request_id`, or null.
const Lease* AcquiredUnder(ReadSet& r, const std::string& request_id) {
  if (!r.index.MayHoldRequestId(r.kept, request_id)) return nullptr;
  for (const Lease& l : r.kept) {
    if (l.request_id == request_id) return &l;
  }
  return nullptr;
}

// The index in r.kept of the held lease `id`, or -1.
int FindHeld(ReadSet& r, const LeaseId& id) {
  const int i = r.index.Find(r.kept, id);
  return i >= 0 && !r.kept[i].released ? i : -1;
}

}  // namespace

std::vector<Lease> ListingPage(const std::vector<Lease>& leases,
                               const std::optional<LeasePlace>& after, int64_t limit, bool* more) {
  std::vector<const Lease*> all;
  all.reserve(leases.size());
  for (const Lease& l : leases) all.push_back(&l);
  return PageOf(std::move(all), after, limit, more);
}

LeaseDecision DecideLease(const LeaseOp& op, LeaseSet current, int64_t now_us) {
  LeaseSetSummary unknown;
  LeaseDecision d;
  DecideLease(op, std::move(current), now_us, unknown, d);
  return d;
}

void DecideLease(const LeaseOp& op, LeaseSet current, int64_t now_us, LeaseSetSummary& summary,
                 LeaseDecision& d) {
  ReadSet r;
  r.kept = std::move(current.leases);
  r.index = std::move(current.index);
  if (LeaseSummarySparesRead(summary, now_us)) {
    // Read would keep every lease, in order, and find summary.held held.
    r.held = summary.held;
  } else {
    if (!ReadByExpiry(r, summary, now_us, d)) {
      Read(r, now_us, d.dropped);
      d.read_all = true;
    }
    summary.known = true;
    summary.expires_from_us = r.earliest_expiry;
  }
  const int64_t capacity = static_cast<int64_t>(op.config.capacity.value_or(0));
  d.expired_unreleased = r.expired_unreleased;
  d.allowed = true;
  switch (op.action) {
    case LeaseAction::kAcquire:
    case LeaseAction::kCheck: {
      if (op.action == LeaseAction::kAcquire && !op.request_id.empty()) {
        if (const Lease* earlier = AcquiredUnder(r, op.request_id)) {
          d.replayed = true;
          d.lease = *earlier;
          break;
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
        d.retry_at_us = RetryAt(r, r.held, capacity - op.count);
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
        // A hot key's release moves one lease, not half of them.
        d.released = TakeLease(r.kept, r.index, static_cast<size_t>(i));
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
      const int64_t expires_at_us = ExpiryOf(now_us, op.ttl_us);
      r.index.ExpiryChanging(r.kept[i], expires_at_us);
      r.kept[i].expires_at_us = expires_at_us;
      summary.expires_from_us = std::min(summary.expires_from_us, r.kept[i].expires_at_us);
      d.lease = r.kept[i];
      d.write = true;
      break;
    }
    case LeaseAction::kList:
      d.held_leases = HeldPage(op, r.kept, &d.more_listed);
      break;
    case LeaseAction::kReset:
      r.kept.clear();
      r.index.Clear();
      r.held = 0;
      summary.expires_from_us = INT64_MAX;
      d.write = true;
      break;
  }
  d.write = Writes(d.write, r.expired_unreleased);
  d.held = r.held;
  d.free = std::max<int64_t>(0, capacity - r.held);
  d.next.leases = std::move(r.kept);
  d.next.index = std::move(r.index);
  summary.held = r.held;
}

void WithdrawAcquire(const LeaseOp& op, LeaseDecision& d, LeaseSetSummary& summary) {
  d.lease.reset();
  TakeLease(d.next.leases, d.next.index, d.next.leases.size() - 1);
  d.held -= op.count;
  d.free = std::max<int64_t>(0, static_cast<int64_t>(op.config.capacity.value_or(0)) - d.held);
  d.write = Writes(false, d.expired_unreleased);
  summary.held = d.held;
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
    return InvalidField(
        field_prefix, "ttl",
        absl::StrCat("must be between 1ms and max_lease_ttl (",
                     absl::FormatDuration(absl::Microseconds(op.config.max_lease_ttl_us)),
                     "), got ", absl::FormatDuration(absl::Microseconds(op.ttl_us))));
  }
  const bool names_lease = op.action == LeaseAction::kAcquire ||
                           op.action == LeaseAction::kRelease || op.action == LeaseAction::kExtend;
  if (names_lease && op.lease_id.empty()) return InvalidField(field_prefix, "lease_id", "is empty");
  return absl::OkStatus();
}

Lease TakeLease(std::vector<Lease>& leases, LeaseSetIndex& index, size_t i) {
  index.Removing(leases, i);
  Lease taken = std::move(leases[i]);
  if (i + 1 != leases.size()) leases[i] = std::move(leases.back());
  leases.pop_back();
  return taken;
}

bool operator==(const LeaseSet& a, const LeaseSet& b) {
  if (a.leases.size() != b.leases.size()) return false;
  // Ids are unique in a set: each set's leases ordered by id, then compared in that order.
  const auto by_id = [](const std::vector<Lease>& leases) {
    std::vector<const Lease*> out;
    out.reserve(leases.size());
    for (const Lease& l : leases) out.push_back(&l);
    std::sort(out.begin(), out.end(), [](const Lease* x, const Lease* y) { return x->id < y->id; });
    return out;
  };
  const std::vector<const Lease*> x = by_id(a.leases);
  const std::vector<const Lease*> y = by_id(b.leases);
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(*x[i] == *y[i])) return false;
  }
  return true;
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
