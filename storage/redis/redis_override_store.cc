#include "storage/redis/redis_override_store.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "storage/overrides/override_codec.h"

namespace ratelimit {
namespace {

using Type = redis::Reply::Type;

// KEYS: records, version. ARGV: the encoded target. Returns {version} or {version, record}, read
// together.
constexpr char kReadScript[] = R"lua(
local v = redis.call('GET', KEYS[2]) or '0'
local r = redis.call('HGET', KEYS[1], ARGV[1])
if r then return {v, r} end
return {v}
)lua";

// KEYS: records, version, audit. ARGV: the version read, the encoded target, the new record, the
// next version, the audit entry (its sequence the next version), the last rank to remove from
// the audit (-(max_audit_entries + 1): every entry but the newest max_audit_entries). Returns 1
// when written, 0 when the version moved since it was read (nothing written). Versions are
// compared as the decimal strings this store writes, never as Lua numbers.
constexpr char kWriteScript[] = R"lua(
if (redis.call('GET', KEYS[2]) or '0') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
redis.call('SET', KEYS[2], ARGV[4])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[5])
redis.call('ZREMRANGEBYRANK', KEYS[3], 0, ARGV[6])
return 1
)lua";

// KEYS: version, audit. ARGV: a version. Returns {version, {the audit entries after ARGV[1]}},
// read together.
constexpr char kChangesScript[] = R"lua(
local v = redis.call('GET', KEYS[1]) or '0'
return {v, redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. ARGV[1], '+inf')}
)lua";

// KEYS: records, version. ARGV: encoded targets. Returns {version, record or nil per target},
// read together (HMGET in chunks: unpack takes a bounded number of values).
constexpr char kRecordsScript[] = R"lua(
local out = {redis.call('GET', KEYS[2]) or '0'}
for i = 1, #ARGV, 1000 do
  local r = redis.call('HMGET', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
  for j = 1, #r do out[#out + 1] = r[j] end
end
return out
)lua";

// The audit is read in pages of at most this many entries.
constexpr size_t kAuditPage = 256;

// UNAVAILABLE for an error reply (the store cannot serve now), INTERNAL for any other reply of a
// shape the caller did not expect.
absl::Status BadReply(absl::string_view what, const redis::Reply& reply) {
  if (reply.is_error()) {
    return absl::UnavailableError(absl::StrCat("redis overrides: ", what, ": ", reply.str));
  }
  return absl::InternalError(
      absl::StrCat("redis overrides: ", what, " answered ", reply.DebugString()));
}

// A version as GET answers it (nil: 0).
absl::StatusOr<uint64_t> ParseVersion(const redis::Reply& reply) {
  if (reply.is_nil()) return uint64_t{0};
  if (reply.type != Type::kString) return BadReply("GET version", reply);
  uint64_t v = 0;
  if (!absl::SimpleAtoi(reply.str, &v)) {
    return absl::DataLossError(absl::StrCat("redis overrides: malformed version ", reply.str));
  }
  return v;
}

}  // namespace

RedisOverrideStore::RedisOverrideStore(std::string key_prefix, CommandFn command,
                                       RedisOverrideStoreOptions options)
    : prefix_(std::move(key_prefix)),
      records_key_(KeyOf("records")),
      version_key_(KeyOf("version")),
      audit_key_(KeyOf("audit")),
      command_(std::move(command)),
      options_(options) {}

std::string RedisOverrideStore::KeyOf(const char* part) const {
  return absl::StrCat(prefix_, "overrides:{ovr}:", part);
}

absl::StatusOr<redis::Reply> RedisOverrideStore::Run(std::vector<std::string> argv) {
  // Every key shares the tag: any of them routes to the slot.
  return command_(records_key_, std::move(argv));
}

absl::StatusOr<std::optional<Override>> RedisOverrideStore::Get(const OverrideTarget& target) {
  absl::StatusOr<redis::Reply> reply = Run({"HGET", records_key_, EncodeOverrideKey(target)});
  if (!reply.ok()) return reply.status();
  if (reply->is_nil()) return std::optional<Override>();
  if (reply->type != Type::kString) return BadReply("HGET", *reply);
  std::optional<Override> o = DecodeOverride(reply->str);
  if (!o) return absl::DataLossError("redis overrides: malformed override record");
  return o;
}

absl::StatusOr<uint64_t> RedisOverrideStore::Version() {
  absl::StatusOr<redis::Reply> reply = Run({"GET", version_key_});
  if (!reply.ok()) return reply.status();
  return ParseVersion(*reply);
}

absl::StatusOr<OverrideAuditEntry> RedisOverrideStore::Modify(const OverrideTarget& target,
                                                              ChangeFn change) {
  const std::string field = EncodeOverrideKey(target);
  const std::string trim_stop = absl::StrCat("-", options_.max_audit_entries + 1);
  for (int attempt = 0; attempt < kMaxModifyAttempts; ++attempt) {
    absl::StatusOr<redis::Reply> read =
        Run({"EVAL", kReadScript, "2", records_key_, version_key_, field});
    if (!read.ok()) return read.status();
    const auto& e = read->elements;
    if (read->type != Type::kArray || e.empty() || e.size() > 2 || e[0].type != Type::kString ||
        (e.size() == 2 && e[1].type != Type::kString)) {
      return BadReply("read", *read);
    }
    absl::StatusOr<uint64_t> version = ParseVersion(e[0]);
    if (!version.ok()) return version.status();
    std::optional<Override> current;
    if (e.size() == 2) {
      current = DecodeOverride(e[1].str);
      if (!current) return absl::DataLossError("redis overrides: malformed override record");
    }
    absl::StatusOr<Change> made = change(current);
    if (!made.ok()) return made.status();
    OverrideAuditEntry audit = std::move(made->audit);
    audit.sequence = *version + 1;
    audit.target = made->record.target;
    absl::StatusOr<redis::Reply> written =
        Run({"EVAL", kWriteScript, "3", records_key_, version_key_, audit_key_, e[0].str,
             EncodeOverrideKey(made->record.target), EncodeOverride(made->record),
             absl::StrCat(audit.sequence), EncodeAuditEntry(audit), trim_stop});
    if (!written.ok()) return written.status();
    if (written->type != Type::kInteger) return BadReply("write", *written);
    if (written->integer == 1) return audit;
  }
  return absl::AbortedError("redis overrides: too many conflicting changes");
}

absl::StatusOr<OverrideStore::Snapshot> RedisOverrideStore::LoadAll() {
  for (int attempt = 0; attempt < kMaxModifyAttempts; ++attempt) {
    absl::StatusOr<uint64_t> before = Version();
    if (!before.ok()) return before.status();
    absl::StatusOr<redis::Reply> all = Run({"HGETALL", records_key_});
    if (!all.ok()) return all.status();
    if (all->type != Type::kArray || all->elements.size() % 2 != 0) {
      return BadReply("HGETALL", *all);
    }
    // Every change increments the version in the script that writes it: an unchanged version
    // means no change ran between the two reads, so the records are those of that version.
    absl::StatusOr<uint64_t> after = Version();
    if (!after.ok()) return after.status();
    if (*after != *before) continue;
    std::vector<std::pair<std::string, Override>> sorted;
    sorted.reserve(all->elements.size() / 2);
    for (size_t i = 0; i + 1 < all->elements.size(); i += 2) {
      redis::Reply& k = all->elements[i];
      const redis::Reply& v = all->elements[i + 1];
      if (k.type != Type::kString || v.type != Type::kString) return BadReply("HGETALL", *all);
      std::optional<Override> o = DecodeOverride(v.str);
      if (!o) return absl::DataLossError("redis overrides: malformed override record");
      sorted.emplace_back(std::move(k.str), *std::move(o));
    }
    std::sort(sorted.begin(), sorted.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    Snapshot out;
    out.version = *before;
    out.overrides.reserve(sorted.size());
    for (auto& [key, o] : sorted) out.overrides.push_back(std::move(o));
    return out;
  }
  return absl::AbortedError("redis overrides: the overrides kept changing while being read");
}

absl::StatusOr<std::optional<OverrideStore::Changes>> RedisOverrideStore::ChangesSince(
    uint64_t version) {
  const std::string since = absl::StrCat(version);
  for (int attempt = 0; attempt < kMaxModifyAttempts; ++attempt) {
    absl::StatusOr<redis::Reply> read =
        Run({"EVAL", kChangesScript, "2", version_key_, audit_key_, since});
    if (!read.ok()) return read.status();
    if (read->type != Type::kArray || read->elements.size() != 2 ||
        read->elements[1].type != Type::kArray) {
      return BadReply("read changes", *read);
    }
    absl::StatusOr<uint64_t> at = ParseVersion(read->elements[0]);
    if (!at.ok()) return at.status();
    Changes out;
    out.version = *at;
    if (version > out.version) return std::optional<Changes>();
    if (version == out.version) return std::optional<Changes>(std::move(out));
    const std::vector<redis::Reply>& raw = read->elements[1].elements;
    // Exactly the entries version + 1 .. out.version, each naming its target; else the history
    // was trimmed past `version` (or does not say): the caller loads everything.
    if (raw.size() != out.version - version) return std::optional<Changes>();
    std::vector<OverrideAuditEntry> entries;
    entries.reserve(raw.size());
    for (const redis::Reply& r : raw) {
      if (r.type != Type::kString) return BadReply("read changes", *read);
      std::optional<OverrideAuditEntry> e = DecodeAuditEntry(r.str);
      if (!e) return absl::DataLossError("redis overrides: malformed override audit entry");
      if (e->sequence != version + 1 + entries.size() || !e->target) {
        return std::optional<Changes>();
      }
      entries.push_back(*std::move(e));
    }
    out.changed = LatestPerTarget(std::move(entries));
    std::vector<std::string> argv = {"EVAL", kRecordsScript, "2", records_key_, version_key_};
    argv.reserve(argv.size() + out.changed.size());
    for (const ChangedTarget& c : out.changed) argv.push_back(EncodeOverrideKey(c.target));
    absl::StatusOr<redis::Reply> records = Run(std::move(argv));
    if (!records.ok()) return records.status();
    const auto& e = records->elements;
    if (records->type != Type::kArray || e.size() != out.changed.size() + 1) {
      return BadReply("read changed records", *records);
    }
    absl::StatusOr<uint64_t> still = ParseVersion(e[0]);
    if (!still.ok()) return still.status();
    // A change between the two reads: the records may be newer than the entries; read again.
    if (*still != out.version) continue;
    for (size_t i = 0; i < out.changed.size(); ++i) {
      if (e[i + 1].is_nil()) continue;
      if (e[i + 1].type != Type::kString) return BadReply("read changed records", *records);
      out.changed[i].record = DecodeOverride(e[i + 1].str);
      if (!out.changed[i].record) {
        return absl::DataLossError("redis overrides: malformed override record");
      }
    }
    return std::optional<Changes>(std::move(out));
  }
  return absl::AbortedError("redis overrides: the overrides kept changing while being read");
}

absl::StatusOr<std::vector<OverrideAuditEntry>> RedisOverrideStore::ListAudit(
    uint64_t before, absl::string_view name, size_t limit) {
  std::vector<OverrideAuditEntry> out;
  // Pages newest first from `before` (exclusive), each starting below the last sequence seen.
  uint64_t below = before;
  while (out.size() < limit) {
    const size_t page = name.empty() ? std::min(limit - out.size(), kAuditPage) : kAuditPage;
    absl::StatusOr<redis::Reply> reply =
        Run({"ZREVRANGEBYSCORE", audit_key_, below == 0 ? "+inf" : absl::StrCat("(", below), "-inf",
             "LIMIT", "0", absl::StrCat(page)});
    if (!reply.ok()) return reply.status();
    if (reply->type != Type::kArray) return BadReply("ZREVRANGEBYSCORE", *reply);
    for (const redis::Reply& r : reply->elements) {
      if (r.type != Type::kString) return BadReply("ZREVRANGEBYSCORE", *reply);
      std::optional<OverrideAuditEntry> e = DecodeAuditEntry(r.str);
      if (!e) return absl::DataLossError("redis overrides: malformed override audit entry");
      below = e->sequence;
      const Override* any = e->after ? &*e->after : e->before ? &*e->before : nullptr;
      if (!name.empty() && (any == nullptr || any->target.name != name)) continue;
      out.push_back(*std::move(e));
      if (out.size() == limit) break;
    }
    if (reply->elements.size() < page || below <= 1) break;
  }
  return out;
}

}  // namespace ratelimit
