#ifndef RATELIMIT_SERVER_OVERRIDES_OVERRIDE_REFRESHER_H_
#define RATELIMIT_SERVER_OVERRIDES_OVERRIDE_REFRESHER_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/config/watched_config.h"
#include "server/observability/periodic_task.h"
#include "server/observability/repeated_log.h"
#include "storage/overrides/override_index.h"
#include "storage/overrides/override_store.h"

namespace ratelimit {

// The overrides in force on this server: the index the decision path reads (never null).
using OverrideRegistry = ConfigSnapshot<OverrideIndex>;

// Keeps an OverrideRegistry in step with an OverrideStore that other servers may change too: each
// Refresh reads the store's version counter and, only when it differs from the index's, reads
// what changed since the index's version (OverrideStore::ChangesSince) and swaps in the index
// with those changes applied (OverrideIndex::Apply: microseconds per change, whatever the number
// of overrides). When the store cannot tell what changed (its history no longer reaches back that
// far, or the first refresh), it loads every override and builds a new index. Start() refreshes
// every `interval` (a replica learns of a change within about one interval); the server that
// makes a change refreshes at once.
// A failed refresh is logged (once, then summarised) and the index in force stays.
//
// Ownership: `store` and `registry` are not owned and must outlive the refresher.
// Thread safety: thread-safe; refreshes are serialized.
class OverrideRefresher {
 public:
  OverrideRefresher(OverrideStore& store, OverrideRegistry& registry, absl::Duration interval);
  OverrideRefresher(const OverrideRefresher&) = delete;
  OverrideRefresher& operator=(const OverrideRefresher&) = delete;
  ~OverrideRefresher() { Stop(); }

  // Brings the registry to the store's version (no load when it is current).
  absl::Status Refresh();
  void Start() { task_.Start(); }

  // How many refreshes swapped in a new index by applying the changes, and by a full load.
  struct Counts {
    uint64_t incremental = 0;
    uint64_t full = 0;
  };
  Counts counts() {
    absl::MutexLock lock(&mu_);
    return {incremental_, full_};
  }
  void Stop() { task_.Stop(); }

 private:
  OverrideStore& store_;
  OverrideRegistry& registry_;
  absl::Mutex mu_;                            // serializes Refresh
  bool loaded_ ABSL_GUARDED_BY(mu_) = false;  // a first load happened (version 0 included)
  uint64_t incremental_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t full_ ABSL_GUARDED_BY(mu_) = 0;
  RepeatedLog failed_log_{LogLevel::kWarning, "override refresh failed; keeping the overrides"};
  PeriodicTask task_;
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_OVERRIDES_OVERRIDE_REFRESHER_H_
