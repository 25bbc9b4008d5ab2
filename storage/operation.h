#ifndef RATELIMIT_STORAGE_OPERATION_H_
#define RATELIMIT_STORAGE_OPERATION_H_

// What the service asks of a store, and what a store answers: a whole request stated
// declaratively (an Operation of one or more LimitOps, with optional idempotency records), so that
// a store can decide it where the states live (storage/state_store.h), and its Outcome. Plain
// values: no behaviour beyond what storage/algebra gives them.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "storage/algebra.h"

namespace ratelimit {

// Identifies one state: a limit name and a key within it, in the namespace of the limit's source
// (states of different sources never meet, whatever their names).
struct StateKey {
  std::string name;
  std::string key;
  LimitSource source = LimitSource::kDefined;

  friend bool operator==(const StateKey&, const StateKey&) = default;
};

// One limit of an Operation.
struct LimitOp {
  StateKey key;
  // REQUIRES: ValidateLimitConfig(config) is OK.
  LimitConfig config;
  // REQUIRES: finite and > 0.
  double count = 1;
  // Set: this limit settles an earlier take (storage/algebra Settle) instead of being decided
  // by the operation's mode; `count` is ignored. A settlement is always allowed.
  struct Settlement {
    double taken = 0;  // REQUIRES: finite and > 0
    double used = 0;   // REQUIRES: finite and >= 0
    int64_t taken_at_us = 0;
    // The balance the take left (storage/algebra Settle); unset when not known.
    std::optional<double> value_after_take = std::nullopt;
  };
  std::optional<Settlement> settle = std::nullopt;
};

// An idempotency record, decided atomically with an Operation: when one of an operation's
// records is present (and not expired), the store returns it without deciding or writing
// anything; when none is, the store decides and writes the states and every record together.
struct RecordSpec {
  // Opaque key, in one namespace shared by all records of the store: 1..256 bytes, except a
  // lease set's (storage/leases/apply_lease.h), up to 4 + kMaxNameBytes + kMaxKeyBytes.
  std::string key;
  // After this time the record reads as absent and the store may drop it.
  int64_t expires_at_us = 0;
};

struct Outcome;

// A whole request, stated declaratively so that a store can decide it where the states live.
struct Operation {
  // 1..N limits, in request order. The same key may appear more than once: it names one state,
  // and each later mention decides against the state the earlier ones left.
  absl::Span<const LimitOp> limits;
  Mode mode = Mode::kConsume;
  // Idempotency records (none by default); see RecordSpec. Not with kCheck.
  absl::Span<const RecordSpec> records = {};
  // The bytes stored in every record of `records`, computed from the outcome inside the
  // transaction (possibly more than once: it must be a pure function of the outcome and what it
  // captured). Unset: empty bytes.
  std::function<std::string(const Outcome&)> record_value = nullptr;
};

// One decision per limit of an operation; inline for the common single-limit request.
using Decisions = absl::InlinedVector<Decision, 1>;

// What a store answers to an Operation.
struct Outcome {
  // Every limit allowed (and, unless checking, every one was taken, all in one transaction).
  bool allowed = false;
  // One per limit, in operation order, as storage/algebra `Decide` gives it for the state the
  // limit saw and `now_us`. When the operation is denied, nothing is taken anywhere, and the
  // `value` of each limit that alone would have been allowed is its balance as it is.
  Decisions decisions;
  // The time the decision was made at.
  int64_t now_us = 0;
  // Set when a record of the operation was already present: the index of the first such record
  // in Operation::records and its stored bytes. Nothing was decided then (`decisions` is empty).
  std::optional<size_t> existing_record = std::nullopt;
  std::string existing_value = std::string();
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_OPERATION_H_
