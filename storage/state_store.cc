#include "storage/state_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "storage/apply.h"
#include "storage/leases/lease.h"

// The defaults of the optional methods of StateStore (see the header): each is built on the
// required methods, or refuses a capability the store does not have.

namespace ratelimit {

absl::StatusOr<Outcome> StateStore::Apply(const Operation& op, const Clock& clock) {
  return ApplyWithUpdate(*this, op, clock);
}

void StateStore::ApplyAsync(const Operation& op, const Clock& clock, ApplyDone done) {
  std::move(done)(Apply(op, clock));
}

std::vector<absl::StatusOr<Outcome>> StateStore::ApplyBatch(absl::Span<const Operation> ops,
                                                            const Clock& clock) {
  std::vector<absl::StatusOr<Outcome>> results;
  results.reserve(ops.size());
  for (const Operation& op : ops) results.push_back(Apply(op, clock));
  return results;
}

namespace {
thread_local bool writes_here = false;
}  // namespace

StateStore::WritesHereScope::WritesHereScope() : outer_(writes_here) { writes_here = true; }

StateStore::WritesHereScope::~WritesHereScope() { writes_here = outer_; }

bool StateStore::WritesHereScope::Active() { return writes_here; }

absl::Status StateStore::UpdateWithRecords(absl::Span<const StateKey> /*keys*/,
                                           absl::Span<const RecordSpec> /*records*/,
                                           const Clock& /*clock*/, RecordDecideFn /*decide*/) {
  return absl::UnimplementedError(
      absl::StrCat("the ", backend_name(),
                   " store does not keep idempotency records (receipts and request_id)"));
}

absl::StatusOr<Outcome> StateStore::ApplyRecorded(const Operation& op, const Clock& clock) {
  return ApplyWithRecords(*this, op, clock);
}

absl::StatusOr<std::string> StateStore::Secret(absl::string_view /*name*/,
                                               absl::FunctionRef<std::string()> /*generate*/) {
  return absl::UnimplementedError(absl::StrCat("the ", backend_name(), " store keeps no secrets"));
}

absl::StatusOr<LeaseOutcome> StateStore::ApplyLease(const LeaseOperation& /*op*/,
                                                    const Clock& /*clock*/) {
  return absl::UnimplementedError(
      absl::StrCat("the ", backend_name(), " store keeps no leases (concurrency limits)"));
}

void StateStore::ApplyLeaseAsync(const LeaseOperation& op, const Clock& clock, LeaseDone done) {
  std::move(done)(ApplyLease(op, clock));
}

std::vector<absl::StatusOr<LeaseOutcome>> StateStore::ApplyLeaseBatch(
    absl::Span<const LeaseOperation* const> ops, const Clock& clock) {
  std::vector<absl::StatusOr<LeaseOutcome>> results;
  results.reserve(ops.size());
  for (const LeaseOperation* op : ops) results.push_back(ApplyLease(*op, clock));
  return results;
}

absl::StatusOr<uint64_t> StateStore::DeleteAllLeases(LimitSource /*source*/,
                                                     absl::string_view /*name*/,
                                                     int64_t /*now_us*/) {
  return absl::UnimplementedError(
      absl::StrCat("the ", backend_name(), " store keeps no leases (concurrency limits)"));
}

absl::StatusOr<StateStore::LeakedLeaseKeys> StateStore::FindLeakedLeaseKeys(
    absl::string_view /*cursor*/, int64_t /*now_us*/) {
  return absl::UnimplementedError(
      absl::StrCat("the ", backend_name(), " store keeps no leases (concurrency limits)"));
}

absl::Status StateStore::Health() { return Get(StateKey{"ratelimit.health", "probe"}).status(); }

}  // namespace ratelimit
