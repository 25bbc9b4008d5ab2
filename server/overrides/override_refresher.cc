#include "server/overrides/override_refresher.h"

#include <string>

namespace ratelimit {

OverrideRefresher::OverrideRefresher(OverrideStore& store, OverrideRegistry& registry,
                                     absl::Duration interval)
    : store_(store), registry_(registry), task_(interval, [this] { Refresh().IgnoreError(); }) {}

absl::Status OverrideRefresher::Refresh() {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<uint64_t> version = store_.Version();
  if (!version.ok()) {
    failed_log_.Log({{"error", std::string(version.status().message())}});
    return version.status();
  }
  const std::shared_ptr<const OverrideIndex> current = registry_.Current();
  if (loaded_ && *version == current->version()) return absl::OkStatus();
  if (loaded_) {
    // Only what changed since the index's version, when the store can tell.
    absl::StatusOr<std::optional<OverrideStore::Changes>> changes =
        store_.ChangesSince(current->version());
    if (!changes.ok()) {
      failed_log_.Log({{"error", std::string(changes.status().message())}});
      return changes.status();
    }
    if (changes->has_value()) {
      registry_.Replace(current->Apply((*changes)->changed, (*changes)->version));
      ++incremental_;
      return absl::OkStatus();
    }
  }
  absl::StatusOr<OverrideStore::Snapshot> all = store_.LoadAll();
  if (!all.ok()) {
    failed_log_.Log({{"error", std::string(all.status().message())}});
    return all.status();
  }
  registry_.Replace(OverrideIndex::Build(std::move(all->overrides), all->version));
  loaded_ = true;
  ++full_;
  return absl::OkStatus();
}

}  // namespace ratelimit
