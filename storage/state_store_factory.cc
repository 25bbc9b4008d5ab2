#include "storage/state_store_factory.h"

#include "absl/strings/str_cat.h"
#include "storage/memory_state_store.h"
#include "storage/rocksdb_state_store.h"

namespace ratelimit {
namespace {

absl::StatusOr<OpenedStateStore> OpenRocksDb(const StoreOptions& options) {
  RocksDbStateStoreOptions ro;
  ro.path = options.path;
  ro.sync = options.sync;
  ro.clock = options.clock;
  ro.salvage_wal = options.salvage_wal;
  absl::StatusOr<std::unique_ptr<RocksDbStateStore>> opened = RocksDbStateStore::Open(ro);
  if (!opened.ok()) return opened.status();
  OpenedStateStore result;
  const RocksDbOpenReport& report = (*opened)->open_report();
  result.report.recovery = report.recovery;
  result.report.salvaged = report.salvaged;
  result.report.warnings = report.warnings;
  result.report.upgraded_states = (*opened)->UpgradedStates();
  result.store = *std::move(opened);
  return result;
}

}  // namespace

absl::StatusOr<OpenedStateStore> OpenStateStore(const StoreOptions& options) {
  if (options.backend == "rocksdb") return OpenRocksDb(options);
  if (options.backend == "memory") {
    return OpenedStateStore{std::make_unique<MemoryStateStore>(), StoreOpenReport{}};
  }
  return absl::InvalidArgumentError(
      absl::StrCat("backend: unknown state store \"", options.backend, "\" (rocksdb or memory)"));
}

}  // namespace ratelimit
