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
  if (loaded_ && *version == registry_.Current()->version()) return absl::OkStatus();
  absl::StatusOr<OverrideStore::Snapshot> all = store_.LoadAll();
  if (!all.ok()) {
    failed_log_.Log({{"error", std::string(all.status().message())}});
    return all.status();
  }
  registry_.Replace(OverrideIndex::Build(std::move(all->overrides), all->version));
  loaded_ = true;
  return absl::OkStatus();
}

}  // namespace ratelimit
