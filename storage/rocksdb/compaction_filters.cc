#include "storage/rocksdb/compaction_filters.h"

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "rocksdb/compaction_filter.h"
#include "storage/rocksdb/state_codec.h"

namespace ratelimit {
namespace {

// Drops records whose expiry has passed (they read as absent anyway).
class ExpiredRecordFilter final : public rocksdb::CompactionFilter {
 public:
  explicit ExpiredRecordFilter(const Clock& clock) : clock_(clock) {}

  bool Filter(int /*level*/, const rocksdb::Slice& /*key*/, const rocksdb::Slice& value,
              std::string* /*new_value*/, bool* /*value_changed*/) const override {
    const auto record = DecodeRecordValue(absl::string_view(value.data(), value.size()));
    return record.has_value() && record->first <= clock_.NowMicros();
  }

  const char* Name() const override { return "ratelimit.ExpiredRecordFilter"; }

 private:
  const Clock& clock_;
};

// Drops states that have refilled to capacity: a missing state means "full", so they carry no
// information. A state that does not decode is kept, for an operator to look at.
class RefilledStateFilter final : public rocksdb::CompactionFilter {
 public:
  explicit RefilledStateFilter(const Clock& clock) : clock_(clock) {}

  bool Filter(int /*level*/, const rocksdb::Slice& /*key*/, const rocksdb::Slice& value,
              std::string* /*new_value*/, bool* /*value_changed*/) const override {
    const std::optional<State> state = DecodeState(absl::string_view(value.data(), value.size()));
    return state.has_value() && state->full_at_us <= clock_.NowMicros();
  }

  const char* Name() const override { return "ratelimit.RefilledStateFilter"; }

 private:
  const Clock& clock_;
};

}  // namespace

std::unique_ptr<rocksdb::CompactionFilter> NewRefilledStateFilter(const Clock& clock) {
  return std::make_unique<RefilledStateFilter>(clock);
}

std::unique_ptr<rocksdb::CompactionFilter> NewExpiredRecordFilter(const Clock& clock) {
  return std::make_unique<ExpiredRecordFilter>(clock);
}

}  // namespace ratelimit
