// Fuzz target: the stored form of a lease set (storage/leases/lease_codec.h), as a store reads it
// back. Properties: decoding any bytes returns a set or DATA_LOSS, never crashes; a set that
// decodes encodes back to exactly the same bytes (one encoding per set); and the lease algebra
// decides every action on it without crashing, writing only a set that itself round trips. The
// same bytes as one lease alone (DecodeLeaseEntry): a lease or DATA_LOSS, and a lease that
// decodes encodes back to the same bytes. The same bytes as a RocksDB lease record's value
// (DecodeLeaseEntryRecord, either form): a lease or DATA_LOSS, and a lease that decodes is written
// as a record that reads back as the same lease.

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "storage/leases/lease.h"
#include "storage/leases/lease_codec.h"
#include "storage/rocksdb/lease_record.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ratelimit;
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<Lease> lease = DecodeLeaseEntry(bytes);
  if (lease.ok()) {
    std::string again;
    AppendLeaseEntry(*lease, &again);
    FUZZ_CHECK(again == bytes, "a decoded lease encodes to other bytes");
  } else {
    FUZZ_CHECK(lease.status().code() == absl::StatusCode::kDataLoss, "%s",
               lease.status().ToString().c_str());
  }
  absl::StatusOr<Lease> recorded = DecodeLeaseEntryRecord(bytes);
  if (recorded.ok()) {
    std::string record;
    EncodeLeaseEntryRecord(*recorded, &record);
    absl::StatusOr<Lease> again = DecodeLeaseEntryRecord(record);
    FUZZ_CHECK(again.ok() && *again == *recorded, "a lease record does not round trip");
  } else {
    FUZZ_CHECK(recorded.status().code() == absl::StatusCode::kDataLoss, "%s",
               recorded.status().ToString().c_str());
  }
  absl::StatusOr<LeaseSet> set = DecodeLeaseSet(bytes);
  if (!set.ok()) {
    FUZZ_CHECK(set.status().code() == absl::StatusCode::kDataLoss, "%s",
               set.status().ToString().c_str());
    return 0;
  }
  FUZZ_CHECK(EncodeLeaseSet(*set) == bytes, "a decoded set encodes to other bytes");
  LeaseOp op;
  op.config.kind = LimitKind::kConcurrency;
  op.config.capacity = 5;
  op.config.lease_ttl_us = 1000;
  op.config.max_lease_ttl_us = 1'000'000;
  op.ttl_us = 1000;
  op.request_id = set->leases.empty() ? "r" : set->leases[0].request_id;
  op.lease_id = set->leases.empty() ? LeaseId::FromWords(0, 1) : set->leases[0].id;
  const int64_t now = set->leases.empty() ? 0 : set->leases[0].acquired_at_us;
  for (LeaseAction action : {LeaseAction::kAcquire, LeaseAction::kRelease, LeaseAction::kExtend,
                             LeaseAction::kCheck, LeaseAction::kList, LeaseAction::kReset}) {
    op.action = action;
    const LeaseDecision d = DecideLease(op, *set, now);
    FUZZ_CHECK(d.free >= 0, "free slots below 0");
    if (d.write) {
      absl::StatusOr<LeaseSet> again = DecodeLeaseSet(EncodeLeaseSet(d.next));
      FUZZ_CHECK(again.ok() && *again == d.next, "a written set does not round trip");
    }
  }
  return 0;
}
