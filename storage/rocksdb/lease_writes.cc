#include "storage/rocksdb/lease_writes.h"

#include <string>

namespace ratelimit {

absl::InlinedVector<FreedRecord, 1> RecordsFreedBy(const LeaseOp& op, const LeaseSet* read) {
  absl::InlinedVector<FreedRecord, 1> freed;
  if (read == nullptr) return freed;
  if (op.action != LeaseAction::kReset) return freed;
  for (const Lease& l : read->leases) {
    if (l.record != 0) freed.push_back(FreedRecord{l.record, KnownLeaseRecordBytes(l)});
  }
  return freed;
}

namespace {

// Gives `lease`, a lease of `set`, the lowest record number no other lease of `set` holds.
void NumberRecord(LeaseSet& set, Lease& lease) {
  lease.record = set.index.LowestFreeRecord(set.leases);
  set.index.RecordTaken(lease.record);
}

// The lease of `set` with id `id`, or null.
Lease* Find(LeaseSet& set, const LeaseId& id) {
  const int i = set.index.Find(set.leases, id);
  return i >= 0 ? &set.leases[i] : nullptr;
}

}  // namespace

void LeaseWritesOf(const LeaseOp& op, LeaseDecision& d, absl::string_view prefix,
                   absl::Span<const FreedRecord> freed, LeaseWrites& out) {
  if (!d.write) return;
  // The records of the leases the decision dropped as expired, freed: a lease expired unreleased
  // is dropped, and counted, by the decision that finds it (lease.h), and a read after this one
  // (the cache of sets evicted or the server restarted) must not find it again.
  for (const Lease& l : d.dropped) {
    if (l.record != 0) out.Free(prefix, l.record, KnownLeaseRecordBytes(l));
  }
  switch (op.action) {
    case LeaseAction::kAcquire:
    case LeaseAction::kExtend:
      if (Lease* l = Find(d.next, op.lease_id)) {
        if (l->record == 0) {
          // A record the run freed (no lease holds it: a later take would have written it) is
          // rewritten once; otherwise the lowest number no lease holds.
          l->record = out.FreeRecordOfRun();
          if (l->record == 0) {
            NumberRecord(d.next, *l);
          } else {
            d.next.index.RecordTaken(l->record);
          }
        }
        out.Put(prefix, *l);
      }
      return;
    case LeaseAction::kRelease:
      if (!d.released) return;
      // Kept, released, until its expiry when it has a request_id (a retried acquire answers it
      // again): its record rewritten; otherwise its record is free.
      if (!d.released->request_id.empty()) {
        if (Lease* l = Find(d.next, op.lease_id)) out.Put(prefix, *l);
      } else if (d.released->record != 0) {
        out.Free(prefix, d.released->record, KnownLeaseRecordBytes(*d.released));
      }
      return;
    case LeaseAction::kReset:
      for (const FreedRecord& f : freed) out.Free(prefix, f.record, f.bytes);
      return;
    case LeaseAction::kCheck:
    case LeaseAction::kList:
      return;
  }
}

}  // namespace ratelimit
