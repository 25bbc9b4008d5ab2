#include "storage/leases/lease_set_index.h"

#include <cstdint>
#include <utility>

#include "absl/hash/hash.h"
#include "storage/leases/lease.h"

namespace ratelimit {

LeaseSetIndex& LeaseSetIndex::operator=(const LeaseSetIndex& other) {
  if (this != &other) s_ = other.s_ ? std::make_unique<State>(*other.s_) : nullptr;
  return *this;
}

size_t LeaseSetIndex::MemoryBytes() const {
  if (s_ == nullptr) return 0;
  // A slot of the positions is its key and value and a control byte.
  // An entry of the expiries takes about its size in a btree node (nodes are mostly full).
  return sizeof(State) + s_->records.capacity() * sizeof(uint64_t) +
         (s_->of_id.capacity() + s_->request_ids.capacity()) *
             (sizeof(std::pair<uint64_t, uint32_t>) + 1) +
         s_->by_expiry.size() * sizeof(std::pair<int64_t, uint64_t>) * 5 / 4;
}

LeaseSetIndex::State& LeaseSetIndex::Own() {
  if (s_ == nullptr) s_ = std::make_unique<State>();
  return *s_;
}

uint64_t LeaseSetIndex::HashOf(const LeaseId& id) { return absl::HashOf(id); }

uint64_t LeaseSetIndex::HashOf(absl::string_view request_id) { return absl::HashOf(request_id); }

int LeaseSetIndex::Find(const std::vector<Lease>& leases, const LeaseId& id) {
  if (leases.size() >= kPositionsFrom) {
    State& st = Own();
    const bool live = st.live && st.of_size == leases.size();
    if (live || st.searched) {
      if (!live) BuildPositions(leases);
      const auto it = st.of_id.find(HashOf(id));
      if (it != st.of_id.end() && it->second < leases.size() && leases[it->second].id == id) {
        return static_cast<int>(it->second);
      }
      // Exact ids: every lease's hash is among the positions, so none has this id.
      if (it == st.of_id.end() && !st.ids_collide) return -1;
    }
    st.searched = true;
  }
  // Few leases, or positions that did not find it: a search (the last leases are the newest).
  for (size_t i = leases.size(); i-- > 0;) {
    if (leases[i].id == id) return static_cast<int>(i);
  }
  return -1;
}

void LeaseSetIndex::BuildPositions(const std::vector<Lease>& leases) {
  State& st = Own();
  st.of_id.clear();
  st.of_id.reserve(leases.size());
  st.ids_collide = false;
  for (size_t i = 0; i < leases.size(); ++i) {
    if (!st.of_id.try_emplace(HashOf(leases[i].id), static_cast<uint32_t>(i)).second) {
      st.ids_collide = true;
    }
  }
  st.of_size = leases.size();
  st.live = true;
}

bool LeaseSetIndex::IdsExact(const std::vector<Lease>& leases) {
  State& st = Own();
  if (!st.live || st.of_size != leases.size()) BuildPositions(leases);
  return !st.ids_collide;
}

void LeaseSetIndex::Appended(const std::vector<Lease>& leases) {
  if (s_ == nullptr) return;
  State& st = *s_;
  const Lease& added = leases.back();
  if (st.records_known && added.record != 0) SetRecord(added.record, true);
  CountRequestId(added, true);
  if (st.expiries_known) st.by_expiry.emplace(added.expires_at_us, HashOf(added.id));
  if (!st.live) return;
  if (st.of_size + 1 != leases.size()) {
    st.live = false;
    return;
  }
  if (!st.of_id.try_emplace(HashOf(added.id), static_cast<uint32_t>(leases.size() - 1)).second) {
    st.ids_collide = true;
  }
  st.of_size = leases.size();
}

void LeaseSetIndex::Removing(const std::vector<Lease>& leases, size_t i) {
  if (s_ == nullptr) return;
  Dropping(leases[i]);
  State& st = *s_;
  if (!st.live) return;
  if (st.of_size != leases.size()) {
    st.live = false;
    return;
  }
  const size_t last = leases.size() - 1;
  if (auto it = st.of_id.find(HashOf(leases[i].id)); it != st.of_id.end() && it->second == i) {
    st.of_id.erase(it);
  }
  if (i != last) {
    auto it = st.of_id.find(HashOf(leases[last].id));
    if (it != st.of_id.end() && it->second == last) it->second = static_cast<uint32_t>(i);
  }
  st.of_size = last;
}

void LeaseSetIndex::Dropping(const Lease& dropped) {
  if (s_ == nullptr) return;
  if (s_->records_known && dropped.record != 0) SetRecord(dropped.record, false);
  CountRequestId(dropped, false);
  if (s_->expiries_known) EraseExpiry(dropped, HashOf(dropped.id));
}

bool LeaseSetIndex::EraseExpiry(const Lease& lease, uint64_t hash) {
  const auto it = s_->by_expiry.find({lease.expires_at_us, hash});
  if (it == s_->by_expiry.end()) {
    ForgetExpiries();  // not counted: the expiries do not describe the set
    return false;
  }
  s_->by_expiry.erase(it);
  return true;
}

void LeaseSetIndex::ForgetExpiries() {
  s_->by_expiry.clear();
  s_->expiries_known = false;
}

void LeaseSetIndex::ExpiryChanging(const Lease& lease, int64_t expires_at_us) {
  if (s_ == nullptr || !s_->expiries_known) return;
  const uint64_t hash = HashOf(lease.id);
  if (EraseExpiry(lease, hash)) s_->by_expiry.emplace(expires_at_us, hash);
}

bool LeaseSetIndex::AskExpiries(const std::vector<Lease>& leases) {
  if (expiries_known()) return true;
  if (leases.size() < kPositionsFrom) return false;
  State& st = Own();
  if (!st.expiries_asked) {
    st.expiries_asked = true;
    return false;
  }
  st.by_expiry.clear();
  for (const Lease& l : leases) st.by_expiry.emplace(l.expires_at_us, HashOf(l.id));
  st.expiries_known = true;
  return true;
}

int LeaseSetIndex::PositionOfExpiry(const std::vector<Lease>& leases, int64_t expires_at_us,
                                    uint64_t hash) {
  State& st = *s_;
  const auto it = st.of_id.find(hash);
  if (it != st.of_id.end() && it->second < leases.size()) {
    const Lease& l = leases[it->second];
    if (l.expires_at_us == expires_at_us && HashOf(l.id) == hash) {
      return static_cast<int>(it->second);
    }
  }
  ForgetExpiries();  // the expiries name a lease the set does not hold as they say
  return -1;
}

int LeaseSetIndex::SoonestExpired(const std::vector<Lease>& leases, int64_t now_us) {
  if (!expiries_known()) return kUnknown;
  State& st = *s_;
  if (st.by_expiry.empty() || st.by_expiry.begin()->first > now_us) return -1;
  if (!IdsExact(leases)) return kUnknown;
  const auto [expires_at_us, hash] = *st.by_expiry.begin();
  const int i = PositionOfExpiry(leases, expires_at_us, hash);
  return i >= 0 ? i : kUnknown;
}

int64_t LeaseSetIndex::EarliestExpiry() const {
  return s_->by_expiry.empty() ? INT64_MAX : s_->by_expiry.begin()->first;
}

bool LeaseSetIndex::VisitByExpiry(const std::vector<Lease>& leases,
                                  absl::FunctionRef<bool(const Lease&)> visit) {
  if (!AskExpiries(leases) || !IdsExact(leases)) return false;
  for (const auto& [expires_at_us, hash] : s_->by_expiry) {
    const int i = PositionOfExpiry(leases, expires_at_us, hash);
    if (i < 0) return false;
    if (visit(leases[i])) return true;
  }
  return true;
}

void LeaseSetIndex::CountRequestId(const Lease& lease, bool added) {
  State& st = *s_;
  if (!st.request_ids_known || lease.request_id.empty()) return;
  const uint64_t hash = HashOf(lease.request_id);
  if (added) {
    ++st.request_ids[hash];
    return;
  }
  auto it = st.request_ids.find(hash);
  if (it == st.request_ids.end()) {
    // Not counted, so the counts do not describe the set: known no longer.
    st.request_ids.clear();
    st.request_ids_known = false;
    return;
  }
  if (--it->second == 0) st.request_ids.erase(it);
}

bool LeaseSetIndex::MayHoldRequestId(const std::vector<Lease>& leases,
                                     absl::string_view request_id) {
  if (leases.size() < kPositionsFrom && !request_ids_known()) return true;
  State& st = Own();
  if (!st.request_ids_known) {
    if (!st.request_id_asked) {
      st.request_id_asked = true;
      return true;
    }
    st.request_ids.clear();
    st.request_ids_known = true;
    for (const Lease& l : leases) CountRequestId(l, true);
  }
  return st.request_ids.contains(HashOf(request_id));
}

void LeaseSetIndex::Clear() {
  State& st = Own();
  st.of_id.clear();
  st.of_size = 0;
  st.live = true;
  st.records.clear();
  st.records_known = true;
  st.lowest_free = 1;
  st.request_ids.clear();
  st.request_ids_known = true;
  st.ids_collide = false;
  st.by_expiry.clear();
  st.expiries_known = true;
}

bool LeaseSetIndex::BuildRecords(const std::vector<Lease>& leases) {
  State& st = Own();
  st.records.clear();
  st.lowest_free = 1;
  st.records_known = true;
  for (const Lease& l : leases) {
    if (l.record != 0) SetRecord(l.record, true);
    if (!st.records_known) return false;
  }
  return true;
}

void LeaseSetIndex::SetRecord(uint32_t record, bool held) {
  State& st = *s_;
  if (record > kMaxKnownRecord) {
    st.records.clear();
    st.records_known = false;
    return;
  }
  const size_t word = record / 64;
  const uint64_t bit = uint64_t{1} << (record % 64);
  if (held) {
    if (word >= st.records.size()) st.records.resize(word + 1, 0);
    st.records[word] |= bit;
    return;
  }
  if (word < st.records.size()) st.records[word] &= ~bit;
  if (record < st.lowest_free) st.lowest_free = record;
}

namespace {

// The lowest record number no lease of `leases` holds, by a pass over them: with n leases (one of
// them, the new one, holding none yet) one of 1..n is free.
uint32_t LowestFreeByPass(const std::vector<Lease>& leases) {
  const size_t n = leases.size();
  std::vector<bool> used(n + 2, false);
  for (const Lease& l : leases) {
    if (l.record >= 1 && l.record <= n) used[l.record] = true;
  }
  uint32_t record = 1;
  while (used[record]) ++record;
  return record;
}

}  // namespace

uint32_t LeaseSetIndex::LowestFreeRecord(const std::vector<Lease>& leases) {
  if (!records_known() && !BuildRecords(leases)) return LowestFreeByPass(leases);
  State& st = *s_;
  // Every record below lowest_free is held: search from there, a word at a time.
  size_t word = st.lowest_free / 64;
  uint64_t bits = word < st.records.size() ? st.records[word] : 0;
  bits |= (uint64_t{1} << (st.lowest_free % 64)) - 1;  // below lowest_free: held, or record 0
  if (word == 0) bits |= 1;                            // record 0 is no record
  while (~bits == 0) {
    ++word;
    bits = word < st.records.size() ? st.records[word] : 0;
  }
  st.lowest_free = static_cast<uint32_t>(word * 64 + static_cast<size_t>(__builtin_ctzll(~bits)));
  return st.lowest_free;
}

void LeaseSetIndex::RecordTaken(uint32_t record) {
  if (records_known() && record != 0) SetRecord(record, true);
}

}  // namespace ratelimit
