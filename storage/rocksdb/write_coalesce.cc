#include "storage/rocksdb/write_coalesce.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"

namespace ratelimit {
namespace {

struct Entry {
  uint32_t family;
  rocksdb::Slice key;
  rocksdb::Slice value;
  bool is_delete;
};

// Lists the entries of a batch (slices into the batch's own buffer) and the index of each key's
// last entry; `supported` turns false on anything but a Put or a Delete.
class Lister : public rocksdb::WriteBatch::Handler {
 public:
  explicit Lister(size_t expected) {
    entries_.reserve(expected);
    last_.reserve(expected);
  }

  rocksdb::Status PutCF(uint32_t family, const rocksdb::Slice& key,
                        const rocksdb::Slice& value) override {
    Add(family, key, value, /*is_delete=*/false);
    return rocksdb::Status::OK();
  }
  rocksdb::Status DeleteCF(uint32_t family, const rocksdb::Slice& key) override {
    Add(family, key, rocksdb::Slice(), /*is_delete=*/true);
    return rocksdb::Status::OK();
  }
  rocksdb::Status SingleDeleteCF(uint32_t, const rocksdb::Slice&) override { return Unsupported(); }
  rocksdb::Status MergeCF(uint32_t, const rocksdb::Slice&, const rocksdb::Slice&) override {
    return Unsupported();
  }
  void LogData(const rocksdb::Slice&) override { supported_ = false; }
  bool Continue() override { return supported_; }

  bool supported() const { return supported_; }
  const std::vector<Entry>& entries() const { return entries_; }
  size_t distinct() const { return last_.size(); }
  // Per entry, whether it is the last one of its key.
  std::vector<bool> LastOfTheirKeys() const {
    std::vector<bool> last(entries_.size(), false);
    for (const auto& [key, index] : last_) last[index] = true;
    return last;
  }

 private:
  using FamilyKey = std::pair<uint32_t, absl::string_view>;

  void Add(uint32_t family, const rocksdb::Slice& key, const rocksdb::Slice& value,
           bool is_delete) {
    entries_.push_back(Entry{family, key, value, is_delete});
    last_[FamilyKey{family, absl::string_view(key.data(), key.size())}] = entries_.size() - 1;
  }
  rocksdb::Status Unsupported() {
    supported_ = false;
    return rocksdb::Status::NotSupported("not coalesced");
  }

  std::vector<Entry> entries_;
  absl::flat_hash_map<FamilyKey, size_t> last_;
  bool supported_ = true;
};

}  // namespace

size_t CoalesceRepeatedKeys(absl::Span<rocksdb::ColumnFamilyHandle* const> families,
                            rocksdb::WriteBatch& batch) {
  const uint32_t count = batch.Count();
  if (count < 2) return 0;
  Lister lister(count);
  // The iteration stops with an error at an entry the lister refuses (or one of a family the
  // default handler does not take): the batch is then left as it is.
  if (!batch.Iterate(&lister).ok() || !lister.supported()) return 0;
  const size_t dropped = lister.entries().size() - lister.distinct();
  if (dropped == 0) return 0;

  auto handle_of = [&](uint32_t id) -> rocksdb::ColumnFamilyHandle* {
    for (rocksdb::ColumnFamilyHandle* h : families) {
      if (h->GetID() == id) return h;
    }
    return nullptr;
  };
  // The entries are slices into `batch`: the new batch is built beside it, and replaces it only
  // once complete, so every early return leaves `batch` intact.
  const std::vector<bool> last = lister.LastOfTheirKeys();
  rocksdb::WriteBatch coalesced(batch.GetDataSize());
  for (size_t i = 0; i < lister.entries().size(); ++i) {
    if (!last[i]) continue;
    const Entry& e = lister.entries()[i];
    rocksdb::ColumnFamilyHandle* family = handle_of(e.family);
    if (family == nullptr) return 0;  // a family not listed
    rocksdb::Status s =
        e.is_delete ? coalesced.Delete(family, e.key) : coalesced.Put(family, e.key, e.value);
    if (!s.ok()) return 0;
  }
  batch = std::move(coalesced);
  return dropped;
}

}  // namespace ratelimit
