#ifndef RATELIMIT_STORAGE_STATE_STORE_H_
#define RATELIMIT_STORAGE_STATE_STORE_H_

#include <optional>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
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

// Where the (value, ts) states live. Every implementation guarantees:
//  - Update is atomic and isolated: the states `decide` sees are not changed by anyone else
//    until its writes are applied, and its writes are applied all together or not at all.
//  - A successful Update is durable to the implementation's promise (RocksDB: in the WAL).
//  - Errors come back as a status (UNAVAILABLE for I/O trouble); nothing throws.
//
// Thread safety: all methods may be called concurrently from any number of threads.
class StateStore {
 public:
  // Called with the current states of the keys passed to Update (same order; nullopt where there
  // is none). It fills `writes` (same size, initially all nullopt) with the states to store;
  // nullopt leaves a key unchanged. If it returns an error, nothing is written and Update
  // returns that error.
  using DecideFn = absl::FunctionRef<absl::Status(absl::Span<const std::optional<State>> current,
                                                  absl::Span<std::optional<State>> writes)>;

  virtual ~StateStore() = default;

  // Reads, decides and writes `keys` as one transaction. REQUIRES: keys are distinct, 1..N.
  virtual absl::Status Update(absl::Span<const StateKey> keys, DecideFn decide) = 0;

  // The current state of `key`, or nullopt when it has none.
  virtual absl::StatusOr<std::optional<State>> Get(const StateKey& key) = 0;

  // Removes the state of one key (it becomes full). Not an error when there is none.
  virtual absl::Status Delete(const StateKey& key) = 0;

  // Removes the state of every key of limit `name` of `source`, and nothing else.
  virtual absl::Status DeleteAll(LimitSource source, absl::string_view name) = 0;
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_STATE_STORE_H_
