#include "storage/rocksdb/indexed_memtable.h"

#include <atomic>
#include <cstdint>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "storage/byte_codec.h"

namespace ratelimit {
namespace {

using rocksdb::KeyHandle;
using rocksdb::MemTableRep;

// A memtable entry: [internal key length: varint32] [internal key: user key, then the tag (u64
// LE: seq << 8 | type)] [value length: varint32] [value].
struct Decoded {
  absl::string_view user_key;
  uint64_t tag = 0;
};

// The internal key of `entry`. Its length is a varint32 RocksDB wrote (at most 5 bytes, all
// within the entry: the internal key after it is at least 8).
absl::string_view InternalKeyOf(const char* entry) {
  constexpr size_t kMaxVarint32 = 5;
  ByteReader in(absl::string_view(entry, kMaxVarint32));
  uint64_t length = 0;
  in.Varint(length);
  return absl::string_view(entry + (kMaxVarint32 - in.left()), static_cast<size_t>(length));
}

Decoded Decode(absl::string_view internal_key) {
  return Decoded{internal_key.substr(0, internal_key.size() - 8),
                 LoadFixed64(internal_key.data() + internal_key.size() - 8)};
}

Decoded DecodeEntry(const char* entry) { return Decode(InternalKeyOf(entry)); }

// Entries hashed and compared by their user key; looked up by a user key.
struct EntryHash {
  using is_transparent = void;
  size_t operator()(const char* entry) const { return (*this)(DecodeEntry(entry).user_key); }
  size_t operator()(absl::string_view user_key) const { return absl::HashOf(user_key); }
};
struct EntryEq {
  using is_transparent = void;
  static absl::string_view Key(const char* entry) { return DecodeEntry(entry).user_key; }
  static absl::string_view Key(absl::string_view user_key) { return user_key; }
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    return Key(a) == Key(b);
  }
};

class IndexedRep final : public MemTableRep {
 public:
  IndexedRep(MemTableRep* inner, rocksdb::Allocator* allocator)
      : MemTableRep(allocator), inner_(inner) {}

  KeyHandle Allocate(const size_t len, char** buf) override { return inner_->Allocate(len, buf); }

  void Insert(KeyHandle handle) override {
    inner_->Insert(handle);
    Index(handle);
  }
  bool InsertKey(KeyHandle handle) override { return inner_->InsertKey(handle) && Index(handle); }
  void InsertWithHint(KeyHandle handle, void** hint) override {
    inner_->InsertWithHint(handle, hint);
    Index(handle);
  }
  bool InsertKeyWithHint(KeyHandle handle, void** hint) override {
    return inner_->InsertKeyWithHint(handle, hint) && Index(handle);
  }
  void InsertWithHintConcurrently(KeyHandle handle, void** hint) override {
    inner_->InsertWithHintConcurrently(handle, hint);
    Index(handle);
  }
  bool InsertKeyWithHintConcurrently(KeyHandle handle, void** hint) override {
    return inner_->InsertKeyWithHintConcurrently(handle, hint) && Index(handle);
  }
  void InsertConcurrently(KeyHandle handle) override {
    inner_->InsertConcurrently(handle);
    Index(handle);
  }
  bool InsertKeyConcurrently(KeyHandle handle) override {
    return inner_->InsertKeyConcurrently(handle) && Index(handle);
  }

  bool Contains(const char* key) const override { return inner_->Contains(key); }

  void MarkReadOnly() override {
    inner_->MarkReadOnly();
    absl::MutexLock lock(&mu_);
    read_only_ = true;
    absl::flat_hash_set<const char*, EntryHash, EntryEq>().swap(newest_);
    index_bytes_.store(0, std::memory_order_relaxed);
  }
  void MarkFlushed() override { inner_->MarkFlushed(); }

  void Get(const rocksdb::LookupKey& k, void* callback_args,
           bool (*callback_func)(void* arg, const char* entry)) override {
    inner_->Get(k, callback_args, callback_func);
  }
  uint64_t ApproximateNumEntries(const rocksdb::Slice& start_ikey,
                                 const rocksdb::Slice& end_key) override {
    return inner_->ApproximateNumEntries(start_ikey, end_key);
  }
  void UniqueRandomSample(const uint64_t num_entries, const uint64_t target_sample_size,
                          std::unordered_set<const char*>* entries) override {
    inner_->UniqueRandomSample(num_entries, target_sample_size, entries);
  }
  size_t ApproximateMemoryUsage() override {
    return inner_->ApproximateMemoryUsage() + index_bytes_.load(std::memory_order_relaxed);
  }

  Iterator* GetIterator(rocksdb::Arena* arena) override { return inner_->GetIterator(arena); }
  Iterator* GetDynamicPrefixIterator(rocksdb::Arena* arena) override {
    if (arena != nullptr) return inner_->GetDynamicPrefixIterator(arena);
    return new IndexedIterator(*this);
  }
  bool IsMergeOperatorSupported() const override { return inner_->IsMergeOperatorSupported(); }
  bool IsSnapshotSupported() const override { return inner_->IsSnapshotSupported(); }

 private:
  // Seeks through the index when it can (see the header), else as the inner representation's
  // dynamic prefix iterator, to which every other move goes.
  class IndexedIterator final : public Iterator {
   public:
    explicit IndexedIterator(IndexedRep& rep) : rep_(rep) {}

    bool Valid() const override { return entry_ != nullptr || (inner_ && inner_->Valid()); }
    const char* key() const override { return entry_ != nullptr ? entry_ : inner_->key(); }
    void Next() override {
      Reposition();
      inner_->Next();
    }
    void Prev() override {
      Reposition();
      inner_->Prev();
    }
    void Seek(const rocksdb::Slice& internal_key, const char* memtable_key) override {
      entry_ = rep_.NewestNoNewerThan(
          Decode(absl::string_view(internal_key.data(), internal_key.size())));
      if (entry_ != nullptr) return;
      Inner().Seek(internal_key, memtable_key);
    }
    void SeekForPrev(const rocksdb::Slice& internal_key, const char* memtable_key) override {
      entry_ = nullptr;
      Inner().SeekForPrev(internal_key, memtable_key);
    }
    void RandomSeek() override {
      entry_ = nullptr;
      Inner().RandomSeek();
    }
    void SeekToFirst() override {
      entry_ = nullptr;
      Inner().SeekToFirst();
    }
    void SeekToLast() override {
      entry_ = nullptr;
      Inner().SeekToLast();
    }

   private:
    Iterator& Inner() {
      if (!inner_) inner_.reset(rep_.inner_->GetDynamicPrefixIterator(nullptr));
      return *inner_;
    }
    // Moves the inner iterator to the entry the index found, so that it can step from there.
    void Reposition() {
      if (entry_ == nullptr) return;
      const absl::string_view internal_key = InternalKeyOf(entry_);
      Inner().Seek(rocksdb::Slice(internal_key.data(), internal_key.size()), entry_);
      entry_ = nullptr;
    }

    IndexedRep& rep_;
    const char* entry_ = nullptr;  // found through the index
    std::unique_ptr<Iterator> inner_;
  };

  // Records `handle` (an entry just inserted) as its user key's newest entry unless a newer one
  // is there. Returns true (for the InsertKey* forms).
  bool Index(KeyHandle handle) {
    const char* entry = static_cast<const char*>(handle);
    const Decoded d = DecodeEntry(entry);
    absl::MutexLock lock(&mu_);
    if (read_only_) return true;
    auto [it, added] = newest_.insert(entry);
    if (!added && DecodeEntry(*it).tag < d.tag) {
      newest_.erase(it);
      newest_.insert(entry);
    }
    index_bytes_.store(newest_.capacity() * (sizeof(const char*) + 1), std::memory_order_relaxed);
    return true;
  }

  // The newest entry of `target`'s user key when it sorts at or after `target` (its tag is not
  // above the target's), else null: then it is not the entry a Seek to `target` gives.
  const char* NewestNoNewerThan(const Decoded& target) {
    absl::MutexLock lock(&mu_);
    auto it = newest_.find(target.user_key);
    if (it == newest_.end() || DecodeEntry(*it).tag > target.tag) return nullptr;
    return *it;
  }

  const std::unique_ptr<MemTableRep> inner_;
  absl::Mutex mu_;
  bool read_only_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_set<const char*, EntryHash, EntryEq> newest_ ABSL_GUARDED_BY(mu_);
  std::atomic<size_t> index_bytes_{0};
};

class IndexedFactory final : public rocksdb::MemTableRepFactory {
 public:
  explicit IndexedFactory(std::shared_ptr<rocksdb::MemTableRepFactory> inner)
      : inner_(std::move(inner)) {}
  MemTableRep* CreateMemTableRep(const MemTableRep::KeyComparator& compare,
                                 rocksdb::Allocator* allocator,
                                 const rocksdb::SliceTransform* transform,
                                 rocksdb::Logger* logger) override {
    return new IndexedRep(inner_->CreateMemTableRep(compare, allocator, transform, logger),
                          allocator);
  }
  MemTableRep* CreateMemTableRep(const MemTableRep::KeyComparator& compare,
                                 rocksdb::Allocator* allocator,
                                 const rocksdb::SliceTransform* transform, rocksdb::Logger* logger,
                                 uint32_t column_family_id) override {
    return new IndexedRep(
        inner_->CreateMemTableRep(compare, allocator, transform, logger, column_family_id),
        allocator);
  }
  const char* Name() const override { return "RatelimitIndexedMemTableFactory"; }
  bool IsInsertConcurrentlySupported() const override { return false; }
  bool CanHandleDuplicatedKey() const override { return inner_->CanHandleDuplicatedKey(); }

 private:
  const std::shared_ptr<rocksdb::MemTableRepFactory> inner_;
};

}  // namespace

std::shared_ptr<rocksdb::MemTableRepFactory> NewIndexedMemTableFactory(
    std::shared_ptr<rocksdb::MemTableRepFactory> inner) {
  return std::make_shared<IndexedFactory>(std::move(inner));
}

}  // namespace ratelimit
