// Fuzz target: concurrency-limit decisions on the RocksDB store, handed over in batches as a
// serving burst hands them (StateStore::ApplyLeaseBatch), against the in-memory store deciding
// the same operations one at a time in the order the RocksDB store decides a batch in (every
// operation that is not an acquire, then the acquires, each kind in the order given). The
// inputs choose the operations (acquires with and without request_ids, holders and rate limits
// taken with the slots; releases and extends of leases handed out, released, expired or never
// acquired; checks, lists, resets of a key and of every key of the limit), the batches (1 to 16
// operations, or one batch of up to 300 acquires on one key: past the size from which a set keeps
// an index of its leases), the clock's steps, a capacity lowered under held leases, and a restart
// of the RocksDB store; the store decides with its default cache of lease sets, with none (every
// decision reads the records) or with a small one that evicts sets as other keys are used.
// Properties:
//  - differential: both stores give every operation the same answer (verdict, reason, state,
//    replay, slots held and free, the lease, retry_at, the leases listed), and after a restart
//    or the reset of the whole limit (DeleteAllLeases) the RocksDB store lists on every key what
//    the memory store holds;
//  - never more slots held than the capacity, unless that capacity was lowered below what was
//    held; a list's leases add up to the slots held, soonest expiry first.
// LEASE_DECIDE_TRACE=1 in the environment prints what an input does, step by step (to read a
// crash's input, or a seed's). The seeds (tests/fuzz/corpus/lease_decide) are written by
// tests/fuzz/lease_decide_seeds.py, which encodes runs in the order Run decodes them.
// Each input works on a limit of its own in stores shared by the process (opened once: an open
// costs more than an input), so inputs do not see each other's leases.

#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "storage/leases/lease.h"
#include "storage/leases/lease_id.h"
#include "storage/memory/memory_state_store.h"
#include "storage/rocksdb/rocksdb_state_store.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/support/lease_test_ops.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::ById;
using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::kLeaseTtl;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::LeaseOpOf;
using ::ratelimit::testing::TempDir;

// 2026-12-03T00:00:00.123456Z: each input starts its clock here.
constexpr int64_t kStartUs = 1796256000123456;
constexpr int kKeys = 3;

// A RocksDB store opened once per process in a temporary directory, reopened on request. Its
// garbage-collection clock stays at 0, so compaction never drops a lease set during a run.
struct SharedStore {
  explicit SharedStore(size_t lease_cache_bytes) : cache_bytes(lease_cache_bytes) { Open(); }

  void Open() {
    store.reset();
    RocksDbStateStoreOptions options;
    options.path = dir.File("db");
    options.clock = &gc_clock;
    options.lock_stripes = 64;
    options.block_cache_bytes = size_t{1} << 20;
    options.lease_cache_bytes = cache_bytes;
    absl::StatusOr<std::unique_ptr<RocksDbStateStore>> opened = RocksDbStateStore::Open(options);
    FUZZ_CHECK(opened.ok(), "%s", opened.status().ToString().c_str());
    store = *std::move(opened);
  }

  const size_t cache_bytes;
  TempDir dir;
  FakeClock gc_clock{0};
  std::unique_ptr<RocksDbStateStore> store;
};

// The store with its default cache of lease sets (0), with none (1), or with one of 16 KiB, which
// keeps a few small sets and evicts them as others are used (2).
SharedStore& Store(int which) {
  static SharedStore* stores[3] = {new SharedStore(RocksDbStateStoreOptions().lease_cache_bytes),
                                   new SharedStore(0), new SharedStore(16 << 10)};
  return *stores[which];
}

std::string Describe(const LeaseOp& op) {
  static constexpr const char* kActions[] = {"acquire", "release", "extend",
                                             "check",   "list",    "reset"};
  return absl::StrCat(kActions[static_cast<int>(op.action)], " key ", op.key.key, " count ",
                      op.count, " capacity ", op.config.capacity.value_or(-1), " lease ",
                      op.lease_id.ToString(), " request_id '", op.request_id, "'");
}

std::string Describe(const std::optional<Lease>& lease) {
  if (!lease) return "none";
  return absl::StrCat(lease->id.ToString(), " count ", lease->count, " acquired ",
                      lease->acquired_at_us, " expires ", lease->expires_at_us, " released ",
                      lease->released, " request_id '", lease->request_id, "' holder '",
                      lease->holder, "'");
}

bool Tracing() {
  static const bool tracing = std::getenv("LEASE_DECIDE_TRACE") != nullptr;
  return tracing;
}

// One input's run.
class Run {
 public:
  Run(FuzzedDataProvider& in, uint64_t input) : in_(in) {
    rocks_ = &Store(in_.ConsumeIntegralInRange(0, 2));
    name_ = absl::StrCat("jobs", input);
    for (int k = 0; k < kKeys; ++k) {
      keys_[k] = absl::StrCat("k", k);
      // Mostly small capacities (refusals, retry_at); sometimes large (many leases, indexes).
      capacities_[k] =
          in_.ConsumeBool() ? in_.ConsumeIntegralInRange(1, 6) : in_.ConsumeIntegralInRange(7, 400);
    }
    rate_.key = StateKey{"per-second", absl::StrCat("in", input)};
    rate_.config = testing::TokenBucket(5, kSecond, 5);
    rate_.count = 1;
  }

  void Go() {
    if (Tracing()) {
      std::fprintf(stderr, "lease cache %zu bytes, capacities %lld %lld %lld\n",
                   rocks_->cache_bytes, static_cast<long long>(capacities_[0]),
                   static_cast<long long>(capacities_[1]), static_cast<long long>(capacities_[2]));
    }
    bool restarted = false, filled = false, deleted = false;
    for (int step = 0; step < 40 && in_.remaining_bytes() > 0; ++step) {
      const int what = in_.ConsumeIntegralInRange(0, 15);
      if (what == 0) {
        clock_.Advance(in_.ConsumeIntegralInRange<int64_t>(0, 3 * kLeaseTtl));
        if (Tracing())
          std::fprintf(stderr, "now %lld\n", static_cast<long long>(clock_.NowMicros()));
      } else if (what == 1 && !restarted) {
        restarted = true;  // one restart an input: an open costs more than the rest of it
        if (Tracing()) std::fprintf(stderr, "restart\n");
        rocks_->Open();
        CompareLists();
      } else if (what == 2 && !filled) {
        filled = true;
        Fill();
      } else if (what == 3 && !deleted) {
        deleted = true;
        DeleteAll();
      } else {
        Batch();
      }
      if (in_.ConsumeBool()) clock_.Advance(in_.ConsumeIntegralInRange<int64_t>(0, kSecond));
    }
    CompareLists();
  }

 private:
  // An op on key `key` of the input's limit (leases of kLeaseTtl, at most 100x).
  LeaseOp NewOp(LeaseAction action, int key) {
    return LeaseOpOf(action, static_cast<double>(capacities_[key]), "", name_, keys_[key]);
  }

  LeaseId NextId() {
    uint8_t bytes[LeaseId::kBytes] = {};
    const uint64_t n = ++issued_;
    for (int i = 0; i < 8; ++i) bytes[LeaseId::kBytes - 1 - i] = static_cast<uint8_t>(n >> (8 * i));
    LeaseId id = LeaseId::FromBytes(bytes);
    ids_.push_back(id);
    return id;
  }

  // A lease handed out (recent ones more often), or one never acquired.
  LeaseId SomeId() {
    if (ids_.empty() || in_.ConsumeIntegralInRange(0, 9) == 0) {
      uint8_t bytes[LeaseId::kBytes] = {0xee};
      return LeaseId::FromBytes(bytes);
    }
    const size_t back = in_.ConsumeBool() ? in_.ConsumeIntegralInRange<size_t>(
                                                0, std::min<size_t>(ids_.size(), 8) - 1)
                                          : in_.ConsumeIntegralInRange<size_t>(0, ids_.size() - 1);
    return ids_[ids_.size() - 1 - back];
  }

  LeaseOperation RandomOp() {
    const int key = in_.ConsumeIntegralInRange(0, kKeys - 1);
    const int pick = in_.ConsumeIntegralInRange(0, 15);
    LeaseOperation operation;
    LeaseOp& op = operation.lease;
    if (pick < 7) {
      op = NewOp(LeaseAction::kAcquire, key);
      op.count = in_.ConsumeIntegralInRange(1, 3);
      op.lease_id = NextId();
      if (in_.ConsumeBool()) op.request_id = absl::StrCat("r", in_.ConsumeIntegralInRange(0, 5));
      if (in_.ConsumeIntegralInRange(0, 3) == 0) op.holder = in_.ConsumeBool() ? "a" : "b";
      if (in_.ConsumeIntegralInRange(0, 7) == 0) operation.limits = absl::MakeConstSpan(&rate_, 1);
    } else if (pick < 11) {
      op = NewOp(LeaseAction::kRelease, key);
      op.lease_id = SomeId();
    } else if (pick < 13) {
      op = NewOp(LeaseAction::kExtend, key);
      op.lease_id = SomeId();
    } else if (pick == 13) {
      op = NewOp(LeaseAction::kCheck, key);
      op.count = in_.ConsumeIntegralInRange(1, 3);
    } else if (pick == 14) {
      op = NewOp(LeaseAction::kList, key);
    } else {
      op = NewOp(in_.ConsumeIntegralInRange(0, 3) == 0 ? LeaseAction::kReset : LeaseAction::kList,
                 key);
    }
    if (op.action == LeaseAction::kAcquire || op.action == LeaseAction::kExtend) {
      op.ttl_us = in_.ConsumeBool() ? kLeaseTtl
                                    : in_.ConsumeIntegralInRange<int64_t>(1000, 100 * kLeaseTtl);
    }
    // Now and then the key's capacity is lowered (a limits file or an override changed it),
    // possibly below the slots held.
    if (in_.ConsumeIntegralInRange(0, 31) == 0 && capacities_[key] > 1) {
      capacities_[key] = in_.ConsumeIntegralInRange<int64_t>(1, capacities_[key] - 1);
      lowered_[key] = true;
      op.config.capacity = static_cast<double>(capacities_[key]);
    }
    return operation;
  }

  void Batch() {
    std::vector<LeaseOperation> ops(in_.ConsumeIntegralInRange(1, 16));
    for (LeaseOperation& op : ops) op = RandomOp();
    Decide(ops);
  }

  // Up to 300 acquires of one slot on one key in one batch.
  void Fill() {
    const int key = in_.ConsumeIntegralInRange(0, kKeys - 1);
    std::vector<LeaseOperation> ops(in_.ConsumeIntegralInRange(1, 300));
    for (LeaseOperation& operation : ops) {
      operation.lease = NewOp(LeaseAction::kAcquire, key);
      operation.lease.lease_id = NextId();
      operation.lease.ttl_us = kLeaseTtl + static_cast<int64_t>(ids_.size()) * 1000;
    }
    Decide(ops);
  }

  void Decide(const std::vector<LeaseOperation>& ops) {
    std::vector<const LeaseOperation*> pointers;
    for (const LeaseOperation& op : ops) pointers.push_back(&op);
    std::vector<absl::StatusOr<LeaseOutcome>> got =
        rocks_->store->ApplyLeaseBatch(pointers, clock_);
    FUZZ_CHECK(got.size() == ops.size(), "%zu answers to %zu operations", got.size(), ops.size());
    if (Tracing()) {
      std::fprintf(stderr, "batch of %zu at %lld\n", ops.size(),
                   static_cast<long long>(clock_.NowMicros()));
      for (size_t i = 0; i < ops.size(); ++i) {
        std::fprintf(stderr, "  %s%s: %s held %lld\n", Describe(ops[i].lease).c_str(),
                     ops[i].limits.empty() ? "" : " with a rate limit",
                     got[i].ok() ? (got[i]->allowed ? "allowed" : "refused") : "error",
                     got[i].ok() ? static_cast<long long>(got[i]->lease.held) : -1LL);
      }
    }
    for (int acquires = 0; acquires < 2; ++acquires) {
      for (size_t i = 0; i < ops.size(); ++i) {
        if ((ops[i].lease.action == LeaseAction::kAcquire) != (acquires == 1)) continue;
        absl::StatusOr<LeaseOutcome> want = memory_.ApplyLease(ops[i], clock_);
        Compare(ops[i].lease, got[i], want);
      }
    }
  }

  void Compare(const LeaseOp& op, const absl::StatusOr<LeaseOutcome>& got,
               const absl::StatusOr<LeaseOutcome>& want) {
    FUZZ_CHECK(got.ok() && want.ok(), "%s: rocksdb %s, memory %s", Describe(op).c_str(),
               got.status().ToString().c_str(), want.status().ToString().c_str());
    const LeaseDecision& g = got->lease;
    const LeaseDecision& w = want->lease;
    FUZZ_CHECK(got->allowed == want->allowed, "%s: allowed %d, memory %d", Describe(op).c_str(),
               got->allowed, want->allowed);
    FUZZ_CHECK(g.reason == w.reason && g.state == w.state && g.replayed == w.replayed,
               "%s: reason %d state %d replayed %d, memory %d %d %d", Describe(op).c_str(),
               static_cast<int>(g.reason), static_cast<int>(g.state), g.replayed,
               static_cast<int>(w.reason), static_cast<int>(w.state), w.replayed);
    FUZZ_CHECK(g.held == w.held && g.free == w.free, "%s: held %lld free %lld, memory %lld %lld",
               Describe(op).c_str(), static_cast<long long>(g.held), static_cast<long long>(g.free),
               static_cast<long long>(w.held), static_cast<long long>(w.free));
    FUZZ_CHECK(g.retry_at_us == w.retry_at_us, "%s: retry_at %lld, memory %lld",
               Describe(op).c_str(), static_cast<long long>(g.retry_at_us.value_or(-1)),
               static_cast<long long>(w.retry_at_us.value_or(-1)));
    FUZZ_CHECK(g.lease == w.lease, "%s: lease %s, memory %s", Describe(op).c_str(),
               Describe(g.lease).c_str(), Describe(w.lease).c_str());
    FUZZ_CHECK(ById(g.held_leases) == ById(w.held_leases), "%s: %zu leases listed, memory %zu",
               Describe(op).c_str(), g.held_leases.size(), w.held_leases.size());
    const int key = KeyIndex(op);
    const int64_t capacity = static_cast<int64_t>(*op.config.capacity);
    FUZZ_CHECK(lowered_[key] || g.held <= capacity, "%s: %lld slots held", Describe(op).c_str(),
               static_cast<long long>(g.held));
    if (op.action == LeaseAction::kList) {
      int64_t sum = 0;
      for (size_t i = 0; i < g.held_leases.size(); ++i) {
        sum += g.held_leases[i].count;
        FUZZ_CHECK(i == 0 || g.held_leases[i - 1].expires_at_us <= g.held_leases[i].expires_at_us,
                   "%s: leases listed out of expiry order", Describe(op).c_str());
      }
      FUZZ_CHECK(sum == g.held, "%s: leases listed hold %lld slots, held %lld",
                 Describe(op).c_str(), static_cast<long long>(sum), static_cast<long long>(g.held));
    }
  }

  int KeyIndex(const LeaseOp& op) const {
    for (int k = 0; k < kKeys; ++k) {
      if (keys_[k] == op.key.key) return k;
    }
    FUZZ_CHECK(false, "unknown key %s", op.key.key.c_str());
    return 0;
  }

  // Every lease of every key of the input's limit ended (an operator's Reset of the limit).
  void DeleteAll() {
    if (Tracing()) std::fprintf(stderr, "delete all leases of %s\n", name_.c_str());
    const int64_t now = clock_.NowMicros();
    const absl::StatusOr<uint64_t> got =
        rocks_->store->DeleteAllLeases(LimitSource::kDefined, name_, now);
    const absl::StatusOr<uint64_t> want =
        memory_.DeleteAllLeases(LimitSource::kDefined, name_, now);
    FUZZ_CHECK(got.ok() && want.ok(), "DeleteAllLeases: rocksdb %s, memory %s",
               got.status().ToString().c_str(), want.status().ToString().c_str());
    FUZZ_CHECK(*got == *want,
               "DeleteAllLeases ended the leases of %llu keys on rocksdb, %llu in memory",
               static_cast<unsigned long long>(*got), static_cast<unsigned long long>(*want));
    CompareLists();
  }

  // What each key holds, listed by both stores.
  void CompareLists() {
    for (int k = 0; k < kKeys; ++k) {
      const LeaseOperation list{NewOp(LeaseAction::kList, k)};
      Compare(list.lease, rocks_->store->ApplyLease(list, clock_),
              memory_.ApplyLease(list, clock_));
    }
  }

  FuzzedDataProvider& in_;
  SharedStore* rocks_ = nullptr;
  MemoryStateStore memory_;
  FakeClock clock_{kStartUs};
  std::string name_;
  std::string keys_[kKeys];
  int64_t capacities_[kKeys] = {};
  bool lowered_[kKeys] = {};
  LimitOp rate_;
  uint64_t issued_ = 0;
  std::vector<LeaseId> ids_;
};

}  // namespace
}  // namespace ratelimit

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static uint64_t inputs = 0;
  FuzzedDataProvider in(data, size);
  ratelimit::Run(in, ++inputs).Go();
  return 0;
}
