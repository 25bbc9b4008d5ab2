#include "storage/redis/redis_replica_board.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "storage/key_hash.h"

namespace ratelimit {
namespace {

// KEYS: records, lead, decision. ARGV: member, record, now_us, lead until_us (0: do not lead),
// oldest fresh record's time_us, keep_ms, read_records (0/1). Returns {leading, version,
// decision, member1, record1, ...}. Times travel as decimal strings and are only compared in
// Lua (exact below 2^53), never printed by it: Lua would print them with 14 digits.
constexpr char kSyncScript[] = R"lua(
local member, record = ARGV[1], ARGV[2]
local now, lead_until, oldest = tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local keep_ms, read_records = ARGV[6], ARGV[7] == '1'
if record ~= '' then
  redis.call('HSET', KEYS[1], member, ARGV[3] .. '|' .. record)
  redis.call('PEXPIRE', KEYS[1], keep_ms)
  if redis.call('EXISTS', KEYS[3]) == 1 then redis.call('PEXPIRE', KEYS[3], keep_ms) end
end
local leading = 0
if lead_until ~= '0' then
  local lead = redis.call('GET', KEYS[2])
  local free = true
  if lead then
    local bar = string.find(lead, '|', 1, true)
    local untilv, holder = tonumber(string.sub(lead, 1, bar - 1)), string.sub(lead, bar + 1)
    free = holder == member or untilv <= now
  end
  if free then
    redis.call('SET', KEYS[2], lead_until .. '|' .. member, 'PX', keep_ms)
    leading = 1
  end
end
local d = redis.call('HMGET', KEYS[3], 'v', 'd')
local out = {leading, tonumber(d[1] or '0'), d[2] or ''}
if leading == 1 or read_records then
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    local v = all[i + 1]
    local bar = string.find(v, '|', 1, true)
    if tonumber(string.sub(v, 1, bar - 1)) < oldest then
      redis.call('HDEL', KEYS[1], all[i])
    else
      out[#out + 1] = all[i]
      out[#out + 1] = string.sub(v, bar + 1)
    end
  end
end
return out
)lua";

// KEYS: decision. ARGV: expected version, decision, keep_ms, the next version. Returns 1 when
// written, else 0.
constexpr char kDecideScript[] = R"lua(
local v = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
if v ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'v', ARGV[4], 'd', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
)lua";

absl::Status BadReply(const char* what, const redis::Reply& reply) {
  if (reply.is_error()) return reply.ToStatus();
  return absl::InternalError(
      absl::StrCat("the replica board's ", what, " answered ", reply.DebugString()));
}

std::string KeepMillis(int64_t keep_us) {
  return absl::StrCat(keep_us / 1000 > 0 ? keep_us / 1000 : 1);
}

}  // namespace

RedisReplicaBoard::RedisReplicaBoard(std::string key_prefix, CommandFn command)
    : prefix_(std::move(key_prefix)), command_(std::move(command)) {}

std::string RedisReplicaBoard::KeyOf(const std::string& group, const char* part) const {
  // The tag is a hash of the group, so a group name may hold any byte (braces included).
  return absl::StrCat(prefix_, "board:{", absl::Hex(StableKeyHash("board", group)), "}:", group, ":",
                      part);
}

absl::StatusOr<BoardSyncReply> RedisReplicaBoard::Sync(const BoardSyncRequest& request) {
  const std::string records = KeyOf(request.group, "records");
  std::vector<std::string> argv = {"EVAL",
                                   kSyncScript,
                                   "3",
                                   records,
                                   KeyOf(request.group, "lead"),
                                   KeyOf(request.group, "decision"),
                                   request.member,
                                   request.record,
                                   absl::StrCat(request.now_us),
                                   request.lead_us > 0
                                       ? absl::StrCat(request.now_us + request.lead_us)
                                       : std::string("0"),
                                   absl::StrCat(request.now_us - request.stale_us),
                                   KeepMillis(request.keep_us),
                                   request.read_records ? "1" : "0"};
  absl::StatusOr<redis::Reply> reply = command_(records, std::move(argv));
  if (!reply.ok()) return reply.status();
  const auto& e = reply->elements;
  if (reply->type != redis::Reply::Type::kArray || e.size() < 3 || e.size() % 2 != 1 ||
      e[0].type != redis::Reply::Type::kInteger || e[1].type != redis::Reply::Type::kInteger ||
      e[2].type != redis::Reply::Type::kString) {
    return BadReply("sync", *reply);
  }
  BoardSyncReply out;
  out.leading = e[0].integer == 1;
  out.version = static_cast<uint64_t>(e[1].integer);
  out.decision = e[2].str;
  for (size_t i = 3; i + 1 < e.size(); i += 2) out.records.emplace(e[i].str, e[i + 1].str);
  return out;
}

absl::StatusOr<bool> RedisReplicaBoard::Decide(const std::string& group,
                                               uint64_t expected_version,
                                               const std::string& decision, int64_t keep_us) {
  const std::string key = KeyOf(group, "decision");
  absl::StatusOr<redis::Reply> reply =
      command_(key, {"EVAL", kDecideScript, "1", key, absl::StrCat(expected_version), decision,
                     KeepMillis(keep_us), absl::StrCat(expected_version + 1)});
  if (!reply.ok()) return reply.status();
  if (reply->type != redis::Reply::Type::kInteger) return BadReply("decide", *reply);
  return reply->integer == 1;
}

}  // namespace ratelimit
