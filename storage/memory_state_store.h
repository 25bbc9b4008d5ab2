#ifndef RATELIMIT_STORAGE_MEMORY_STATE_STORE_H_
#define RATELIMIT_STORAGE_MEMORY_STATE_STORE_H_

#include <map>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "storage/state_store.h"

namespace ratelimit {

// A StateStore in a std::map behind one mutex: the reference model the RocksDB store is tested
// against, and a store for tests. Nothing survives the process.
class MemoryStateStore final : public StateStore {
 public:
  MemoryStateStore() = default;
  MemoryStateStore(const MemoryStateStore&) = delete;
  MemoryStateStore& operator=(const MemoryStateStore&) = delete;

  absl::Status Update(absl::Span<const StateKey> keys, DecideFn decide) override;
  absl::StatusOr<std::optional<State>> Get(const StateKey& key) override;
  absl::Status Delete(const StateKey& key) override;
  absl::Status DeleteAll(LimitSource source, absl::string_view name) override;
  absl::string_view backend_name() const override { return "memory"; }

  // Number of stored states.
  size_t Size() const;

 private:
  using Key = std::tuple<LimitSource, std::string, std::string>;
  mutable absl::Mutex mu_;
  std::map<Key, State> states_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_MEMORY_STATE_STORE_H_
