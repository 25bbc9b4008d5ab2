#ifndef RATELIMIT_TESTS_SUPPORT_SELECTIVE_STORE_H_
#define RATELIMIT_TESTS_SUPPORT_SELECTIVE_STORE_H_

// A StateStore wrapper for tests of batches: it fails every transaction that touches a chosen
// key (and only those), and counts the ApplyBatch calls and operations it is given.

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "storage/state_store.h"

namespace ratelimit::testing {

// Thread safety: as the wrapped store; the counters are atomic. `failing_key` is fixed at
// construction.
class SelectiveFailingStore final : public StateStore {
 public:
  // Transactions on a state whose key is `failing_key` fail with `error`.
  SelectiveFailingStore(std::unique_ptr<StateStore> inner, std::string failing_key,
                        absl::Status error = absl::UnavailableError("disk on fire"))
      : inner_(std::move(inner)), failing_key_(std::move(failing_key)), error_(std::move(error)) {}

  absl::Status Update(absl::Span<const StateKey> keys, DecideFn decide) override {
    for (const StateKey& k : keys) {
      if (k.key == failing_key_) return error_;
    }
    return inner_->Update(keys, decide);
  }
  std::vector<absl::StatusOr<Outcome>> ApplyBatch(absl::Span<const Operation> ops,
                                                  const Clock& clock) override {
    ++batches_;
    operations_ += static_cast<int64_t>(ops.size());
    return StateStore::ApplyBatch(ops, clock);  // Apply each, through Update above
  }
  absl::StatusOr<std::optional<State>> Get(const StateKey& key) override {
    return inner_->Get(key);
  }
  absl::StatusOr<uint64_t> Delete(const StateKey& key) override { return inner_->Delete(key); }
  absl::StatusOr<uint64_t> DeleteAll(LimitSource source, absl::string_view name) override {
    return inner_->DeleteAll(source, name);
  }
  absl::StatusOr<std::string> Secret(absl::string_view name,
                                     absl::FunctionRef<std::string()> generate) override {
    return inner_->Secret(name, generate);
  }
  absl::Status Close() override { return inner_->Close(); }
  absl::string_view backend_name() const override { return inner_->backend_name(); }

  // ApplyBatch calls so far, and the operations they carried.
  int64_t batches() const { return batches_.load(); }
  int64_t operations() const { return operations_.load(); }

 private:
  std::unique_ptr<StateStore> inner_;
  const std::string failing_key_;
  const absl::Status error_;
  std::atomic<int64_t> batches_{0};
  std::atomic<int64_t> operations_{0};
};

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_SUPPORT_SELECTIVE_STORE_H_
