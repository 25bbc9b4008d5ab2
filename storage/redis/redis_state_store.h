#ifndef RATELIMIT_STORAGE_REDIS_REDIS_STATE_STORE_H_
#define RATELIMIT_STORAGE_REDIS_REDIS_STATE_STORE_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "storage/redis/redis_command_runner.h"
#include "storage/state_store.h"

namespace ratelimit {

struct RedisStateStoreOptions {
  // Every key starts with it. REQUIRES: ValidateRedisKeyPrefix(key_prefix) is OK.
  std::string key_prefix = "ratelimit:";
  // Tests: the time of every decision instead of the server's TIME. Not owned; outlives the store.
  const Clock* clock_override = nullptr;
};

// A StateStore on one Redis node (a standalone server): every operation is decided inside Redis
// by the function library (redis_function_library.h) in one atomic FCALL, at the server's clock
// (`clock` of Apply is not used, unless options.clock_override is set), and checked against
// storage/algebra. Idle states expire by themselves once refilled (PXAT at full_at), so
// CollectGarbage has nothing to do. Each state has its own key (no hash tag).
//
// Update (a decision made in C++) is an optimistic transaction: read the states, decide, then
// ratelimit_compare_and_set; a conflicting write in between makes it decide again (at most 64
// times, then ABORTED).
//
// Errors: the connection's status (UNAVAILABLE, DEADLINE_EXCEEDED); INTERNAL for an error reply
// or a disagreement between the library and the algebra; UNAVAILABLE once closed.
//
// Thread safety: thread-safe if the connection is (REQUIRES: it is, when the store is shared).
class RedisStateStore final : public StateStore {
 public:
  // Checks the prefix, loads the function library if the server's differs (EnsureRedisLibrary).
  // `connection` is owned.
  static absl::StatusOr<std::unique_ptr<RedisStateStore>> Open(
      std::unique_ptr<RedisCommandRunner> connection, RedisStateStoreOptions options);

  RedisStateStore(const RedisStateStore&) = delete;
  RedisStateStore& operator=(const RedisStateStore&) = delete;

  absl::StatusOr<Outcome> Apply(const Operation& op, const Clock& clock) override;
  absl::Status Update(absl::Span<const StateKey> keys, DecideFn decide) override;
  absl::StatusOr<std::optional<State>> Get(const StateKey& key) override;
  absl::Status Delete(const StateKey& key) override;
  // SCANs the keys of `name` and deletes them.
  absl::Status DeleteAll(LimitSource source, absl::string_view name) override;
  // A PING.
  absl::Status Health() override;
  absl::Status Close() override;
  absl::string_view backend_name() const override { return "redis"; }

 private:
  RedisStateStore(std::unique_ptr<RedisCommandRunner> connection, RedisStateStoreOptions options)
      : connection_(std::move(connection)), options_(std::move(options)) {}
  absl::StatusOr<redis::Reply> Command(absl::Span<const std::string> argv);
  std::string KeyFor(const StateKey& key) const;

  const std::unique_ptr<RedisCommandRunner> connection_;
  const RedisStateStoreOptions options_;
  std::atomic<bool> closed_{false};
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_REDIS_REDIS_STATE_STORE_H_
