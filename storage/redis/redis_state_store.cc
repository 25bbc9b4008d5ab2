#include "storage/redis/redis_state_store.h"

#include <algorithm>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "storage/apply.h"
#include "storage/key_hash.h"
#include "storage/redis/redis_function_library.h"
#include "storage/redis/redis_slot.h"
#include "storage/redis/redis_store_metrics.h"
#include "storage/store_trace.h"

namespace ratelimit {

// How the store reaches Redis. Implementations are thread-safe.
class RedisStateStore::Router {
 public:
  using Callback = std::function<void(absl::StatusOr<redis::Reply>)>;
  virtual ~Router() = default;
  // Runs `argv` on the node serving `routing_key` and calls `done` once (on any thread, often
  // the client's I/O thread: `done` must not wait for Redis).
  virtual void Execute(const std::string& routing_key, std::vector<std::string> argv,
                       Callback done) = 0;
  // Execute, and while a store tracer is installed on the calling thread (store_trace.h), one
  // CLIENT span for the round trip, ended when the reply arrives.
  void Send(const std::string& routing_key, std::vector<std::string> argv, Callback done) {
    SendVia(CurrentStoreTracer(), routing_key, std::move(argv), std::move(done));
  }
  // Send, traced by `tracer` (null: untraced) rather than the calling thread's: for a command
  // sent from a reply's callback on behalf of a traced call.
  void SendVia(StoreTracer* tracer, const std::string& routing_key, std::vector<std::string> argv,
               Callback done) {
    if (tracer != nullptr) {
      SendTraced(*tracer, routing_key, std::move(argv), std::move(done));
      return;
    }
    Execute(routing_key, std::move(argv), std::move(done));
  }
  // The primaries to SCAN and PING ("" for the only node of a plain connection).
  virtual std::vector<std::string> Primaries() = 0;
  virtual absl::StatusOr<redis::Reply> ExecuteOnNode(const std::string& node,
                                                     std::vector<std::string> argv) = 0;
  // The client's counters; nullptr when there is no cluster client. Valid while the router lives.
  virtual const redis::RedisClusterClient* client() const { return nullptr; }
  // Whether every key lives on one server (a standalone one): keys of different slots may then
  // meet in one command.
  virtual bool SingleNode() const = 0;

 protected:
  // Execute, filling `info` (not null) before `done` runs when the router knows the details.
  virtual void ExecuteWithInfo(const std::string& routing_key, std::vector<std::string> argv,
                               Callback done, std::shared_ptr<redis::CommandInfo> info) {
    (void)info;
    Execute(routing_key, std::move(argv), std::move(done));
  }

 private:
  void SendTraced(StoreTracer& tracer, const std::string& routing_key,
                  std::vector<std::string> argv, Callback done);
};

namespace {

constexpr int kMaxUpdateAttempts = 64;

absl::Status ErrorReply(absl::string_view what, const redis::Reply& reply) {
  return absl::InternalError(absl::StrCat(what, ": ", reply.str));
}

// One synchronous connection: commands run on the caller's thread.
class RunnerRouter final : public RedisStateStore::Router {
 public:
  explicit RunnerRouter(std::unique_ptr<RedisCommandRunner> runner) : runner_(std::move(runner)) {}
  void Execute(const std::string&, std::vector<std::string> argv, Callback done) override {
    done(runner_->Command(argv));
  }
  std::vector<std::string> Primaries() override { return {""}; }
  absl::StatusOr<redis::Reply> ExecuteOnNode(const std::string&,
                                             std::vector<std::string> argv) override {
    return runner_->Command(argv);
  }
  bool SingleNode() const override { return true; }

 private:
  const std::unique_ptr<RedisCommandRunner> runner_;
};

// The cluster client: commands are routed by slot and run on its I/O thread.
class ClusterRouter final : public RedisStateStore::Router {
 public:
  explicit ClusterRouter(std::unique_ptr<redis::RedisClusterClient> client)
      : client_(std::move(client)) {}
  void Execute(const std::string& routing_key, std::vector<std::string> argv,
               Callback done) override {
    client_->Execute(routing_key, std::move(argv), std::move(done));
  }
  void ExecuteWithInfo(const std::string& routing_key, std::vector<std::string> argv, Callback done,
                       std::shared_ptr<redis::CommandInfo> info) override {
    client_->Execute(routing_key, std::move(argv), std::move(done), std::move(info));
  }
  std::vector<std::string> Primaries() override { return client_->Primaries(); }
  absl::StatusOr<redis::Reply> ExecuteOnNode(const std::string& node,
                                             std::vector<std::string> argv) override {
    return client_->ExecuteOnNodeSync(node, std::move(argv));
  }
  const redis::RedisClusterClient* client() const override { return client_.get(); }
  bool SingleNode() const override { return !client_->cluster_mode(); }

 private:
  const std::unique_ptr<redis::RedisClusterClient> client_;
};

// A RedisCommandRunner on one node of a router (to load the library on each primary).
class NodeRunner final : public RedisCommandRunner {
 public:
  NodeRunner(RedisStateStore::Router& router, std::string node)
      : router_(router), node_(std::move(node)) {}
  absl::StatusOr<redis::Reply> Command(absl::Span<const std::string> argv) override {
    return router_.ExecuteOnNode(node_, std::vector<std::string>(argv.begin(), argv.end()));
  }

 private:
  RedisStateStore::Router& router_;
  const std::string node_;
};

// Replies of commands sent together, awaited together. The callbacks share its state, so a
// callback finishing its unlock after the waiter returned touches nothing freed.
class Replies {
 public:
  explicit Replies(size_t n) : state_(std::make_shared<Shared>(n)) {}
  RedisStateStore::Router::Callback For(size_t i) {
    return [state = state_, i](absl::StatusOr<redis::Reply> reply) {
      absl::MutexLock l(&state->mu);
      state->replies[i] = std::move(reply);
      --state->pending;
    };
  }
  // Every callback has run.
  std::vector<absl::StatusOr<redis::Reply>>& Wait() {
    absl::MutexLock l(&state_->mu);
    state_->mu.Await(absl::Condition(
        +[](size_t* pending) { return *pending == 0; }, &state_->pending));
    return state_->replies;
  }

 private:
  struct Shared {
    explicit Shared(size_t n) : replies(n, absl::UnknownError("no reply")), pending(n) {}
    absl::Mutex mu;
    // Written by the callbacks under mu; read by the waiter once pending is 0.
    std::vector<absl::StatusOr<redis::Reply>> replies;
    size_t pending ABSL_GUARDED_BY(mu);
  };
  const std::shared_ptr<Shared> state_;
};

// The indices of `redis_keys` in each slot, slots in order of first mention.
std::vector<std::vector<size_t>> SlotGroups(const std::vector<std::string>& redis_keys) {
  std::vector<std::vector<size_t>> groups;
  std::map<int, size_t> group_of_slot;
  for (size_t k = 0; k < redis_keys.size(); ++k) {
    const auto [it, added] = group_of_slot.emplace(redis::KeySlot(redis_keys[k]), groups.size());
    if (added) groups.emplace_back();
    groups[it->second].push_back(k);
  }
  return groups;
}

std::string RandomRequestId() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrCat(absl::Hex(rng(), absl::kZeroPad16), absl::Hex(rng(), absl::kZeroPad16));
}

// The states an ratelimit_apply reply says the function read, one per key.
absl::StatusOr<std::vector<std::optional<State>>> ReadStates(const redis::Reply& reply, size_t n) {
  std::vector<std::optional<State>> read(n);
  if (reply.type != redis::Reply::Type::kArray || reply.elements.size() != 2 + 2 * n) {
    return absl::InternalError("FCALL ratelimit_take_held: malformed reply");
  }
  for (size_t k = 0; k < n; ++k) {
    const std::string& text = reply.elements[2 + k].str;
    if (text.empty()) continue;
    read[k] = DecodeRedisState(text);
    if (!read[k]) return absl::InternalError("FCALL ratelimit_take_held: unreadable state");
  }
  return read;
}

// A record as stored: "<expires_at_us> <value>".
std::string EncodeRecord(int64_t expires_at_us, absl::string_view value) {
  return absl::StrCat(expires_at_us, " ", value);
}

// The value of a stored record, nullopt when it has expired at `now_us`; an error when `raw` is
// not a record.
absl::StatusOr<std::optional<std::string>> DecodeRecord(absl::string_view raw, int64_t now_us,
                                                        absl::string_view redis_key) {
  if (absl::StartsWith(raw, "P")) {  // a claim of ApplyRecorded across slots
    return absl::AbortedError(
        "request_id: a request with this request_id is in progress elsewhere; retry");
  }
  const size_t space = raw.find(' ');
  int64_t expires_at_us = 0;
  if (space == absl::string_view::npos || !absl::SimpleAtoi(raw.substr(0, space), &expires_at_us)) {
    return absl::InternalError(absl::StrCat("unreadable record at ", redis_key));
  }
  if (expires_at_us <= now_us) return std::optional<std::string>();
  return std::optional<std::string>(std::string(raw.substr(space + 1)));
}

// The millisecond at which Redis may drop a record that expires at `expires_at_us`: never before.
int64_t RecordExpiryMs(int64_t expires_at_us) {
  if (expires_at_us <= 0) return 1;
  return expires_at_us / 1000 + (expires_at_us % 1000 != 0 ? 1 : 0);
}

// The span name of a command: "redis/<command>", with the function's name for an FCALL.
const char* RedisSpanName(const std::vector<std::string>& argv) {
  if (argv.empty()) return "redis/command";
  const std::string& command = argv[0];
  if (command == "FCALL" && argv.size() > 1) {
    const std::string& function = argv[1];
    if (function == kRedisApplyFunction) return "redis/FCALL ratelimit_apply";
    if (function == kRedisTakeHeldFunction) return "redis/FCALL ratelimit_take_held";
    if (function == kRedisRefundFunction) return "redis/FCALL ratelimit_refund";
    if (function == kRedisCompareAndSetFunction) return "redis/FCALL ratelimit_compare_and_set";
    if (function == kRedisCommitFunction) return "redis/FCALL ratelimit_commit";
    if (function == kRedisTakeRecordedFunction) return "redis/FCALL ratelimit_take_recorded";
    return "redis/FCALL";
  }
  if (command == "MGET") return "redis/MGET";
  if (command == "GET") return "redis/GET";
  if (command == "SET") return "redis/SET";
  if (command == "DEL") return "redis/DEL";
  return "redis/command";
}

// A claim on the record of a request_id (ApplyRecorded across slots), stored in the record's
// place until the answer replaces it: "P<generation> <lease_until_us> <owner> <incarnation>".
// The incarnation is the owner of generation 1, kept by takeovers: it names the holds of this
// use of the id, so that a new use after the record expired never re-uses an old use's takes.
// (A claim of three fields has an empty incarnation.)
struct Claim {
  int64_t generation = 0;
  int64_t lease_until_us = 0;
  std::string incarnation;
};

std::string EncodeClaim(int64_t generation, int64_t lease_until_us, absl::string_view owner,
                        absl::string_view incarnation) {
  return absl::StrCat("P", generation, " ", lease_until_us, " ", owner, " ", incarnation);
}

std::optional<Claim> ParseClaim(absl::string_view raw) {
  if (!absl::StartsWith(raw, "P")) return std::nullopt;
  std::vector<absl::string_view> parts = absl::StrSplit(raw.substr(1), ' ');
  Claim claim;
  if ((parts.size() != 3 && parts.size() != 4) || !absl::SimpleAtoi(parts[0], &claim.generation) ||
      !absl::SimpleAtoi(parts[1], &claim.lease_until_us)) {
    return std::nullopt;
  }
  if (parts.size() == 4) claim.incarnation = std::string(parts[3]);
  return claim;
}

// The limits, states and records of one slot of an operation whose keys span slots.
struct SlotPart {
  std::vector<LimitOp> limits;      // in operation order
  std::vector<size_t> limit_index;  // their positions in the operation
  OperationKeys keys;
  std::vector<std::string> redis_keys;  // the states, then the records
  std::vector<size_t> record_index;     // the records' positions in the operation
  std::vector<RecordSpec> records;
};

// The operation's limits split by slot (`groups`: the keys of each slot); with `with_records`,
// record i goes with limit i (a Settle).
std::vector<SlotPart> SplitBySlot(const Operation& op, const OperationKeys& keys,
                                  const std::vector<std::vector<size_t>>& groups,
                                  bool with_records) {
  std::vector<size_t> group_of_key(keys.keys.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t k : groups[g]) group_of_key[k] = g;
  }
  std::vector<SlotPart> parts(groups.size());
  for (size_t i = 0; i < op.limits.size(); ++i) {
    SlotPart& part = parts[group_of_key[keys.slot_of[i]]];
    part.limits.push_back(op.limits[i]);
    part.limit_index.push_back(i);
    if (with_records) {
      part.record_index.push_back(i);
      part.records.push_back(op.records[i]);
    }
  }
  for (SlotPart& part : parts) part.keys = DistinctKeys(part.limits);
  return parts;
}

// What one MGET of a SlotPart's keys read.
struct SlotSnapshot {
  std::vector<std::optional<State>> states;
  std::vector<std::optional<std::string>> records;
  std::vector<std::string> raw;  // as read, "" for none: the states, then the records
};

absl::StatusOr<SlotSnapshot> ParseSnapshot(const absl::StatusOr<redis::Reply>& reply,
                                           const SlotPart& part, int64_t now_us) {
  if (!reply.ok()) return reply.status();
  const size_t n = part.keys.keys.size();
  const size_t total = part.redis_keys.size();
  if (reply->type != redis::Reply::Type::kArray || reply->elements.size() != total) {
    return ErrorReply("MGET", *reply);
  }
  SlotSnapshot snap;
  snap.states.resize(n);
  snap.records.resize(total - n);
  snap.raw.resize(total);
  for (size_t i = 0; i < total; ++i) {
    const redis::Reply& r = reply->elements[i];
    if (r.type != redis::Reply::Type::kString) continue;
    snap.raw[i] = r.str;
    if (i < n) {
      snap.states[i] = DecodeRedisState(r.str);
      if (!snap.states[i]) {
        return absl::InternalError(absl::StrCat("unreadable state at ", part.redis_keys[i]));
      }
      continue;
    }
    absl::StatusOr<std::optional<std::string>> value =
        DecodeRecord(r.str, now_us, part.redis_keys[i]);
    if (!value.ok()) return value.status();
    snap.records[i - n] = *std::move(value);
  }
  return snap;
}

// The keys a DEL removed (its integer reply; anything else counts none).
uint64_t DeletedCount(const redis::Reply& reply) {
  return reply.type == redis::Reply::Type::kInteger && reply.integer > 0
             ? static_cast<uint64_t>(reply.integer)
             : 0;
}

}  // namespace

void RedisStateStore::Router::SendTraced(StoreTracer& tracer, const std::string& routing_key,
                                         std::vector<std::string> argv, Callback done) {
  const char* name = RedisSpanName(argv);
  std::shared_ptr<StoreSpan> span = tracer.StartClientSpan(name);
  span->SetAttribute("db.system", "redis");
  span->SetAttribute("db.operation", absl::string_view(name).substr(6));  // after "redis/"
  span->SetAttribute("db.redis.slot", int64_t{redis::KeySlot(routing_key)});
  auto info = std::make_shared<redis::CommandInfo>();
  Callback traced = [span, info, done = std::move(done)](absl::StatusOr<redis::Reply> reply) {
    if (!info->address.empty()) {
      const size_t colon = info->address.rfind(':');
      int64_t port = 0;
      span->SetAttribute("server.address", absl::string_view(info->address).substr(0, colon));
      if (colon != std::string::npos &&
          absl::SimpleAtoi(absl::string_view(info->address).substr(colon + 1), &port)) {
        span->SetAttribute("server.port", port);
      }
      span->SetAttribute("db.redis.redirects", int64_t{info->redirects});
      if (info->pipeline_depth > 0) {
        span->SetAttribute("db.redis.pipeline_depth", int64_t{info->pipeline_depth});
      }
      if (info->wait_replicas > 0) {
        span->SetAttribute("db.redis.wait_replicas", int64_t{info->wait_replicas});
      }
    }
    if (!reply.ok()) {
      span->SetError(reply.status().message());
    } else if (reply->is_error()) {
      span->SetError(reply->str);
    }
    span->End();
    done(std::move(reply));
  };
  ExecuteWithInfo(routing_key, std::move(argv), std::move(traced), std::move(info));
}

RedisStateStore::RedisStateStore(std::unique_ptr<Router> router, RedisStateStoreOptions options)
    : router_(std::move(router)), options_(std::move(options)) {}

RedisStateStore::~RedisStateStore() = default;

absl::StatusOr<std::unique_ptr<RedisStateStore>> RedisStateStore::Open(
    std::unique_ptr<RedisCommandRunner> connection, RedisStateStoreOptions options) {
  if (absl::Status s = ValidateRedisKeyPrefix(options.key_prefix); !s.ok()) return s;
  absl::StatusOr<bool> loaded = EnsureRedisLibrary(*connection);
  if (!loaded.ok()) return loaded.status();
  return std::unique_ptr<RedisStateStore>(new RedisStateStore(
      std::make_unique<RunnerRouter>(std::move(connection)), std::move(options)));
}

absl::StatusOr<std::unique_ptr<RedisStateStore>> RedisStateStore::Open(
    std::unique_ptr<redis::RedisClusterClient> client, RedisStateStoreOptions options) {
  if (absl::Status s = ValidateRedisKeyPrefix(options.key_prefix); !s.ok()) return s;
  if (options.hold_ttl < absl::Milliseconds(1)) {
    return absl::InvalidArgumentError("hold_ttl: must be at least 1 ms");
  }
  for (int slot = 0; slot < redis::kSlotCount; ++slot) {
    if (!client->PrimaryForSlot(slot).empty()) continue;
    int last = slot;
    while (last + 1 < redis::kSlotCount && client->PrimaryForSlot(last + 1).empty()) ++last;
    return absl::UnavailableError(
        absl::StrCat("redis cluster: slots ", slot, "-", last, " are not served by any primary"));
  }
  auto router = std::make_unique<ClusterRouter>(std::move(client));
  for (const std::string& primary : router->Primaries()) {
    NodeRunner runner(*router, primary);
    absl::StatusOr<bool> loaded = EnsureRedisLibrary(runner);
    if (!loaded.ok()) {
      return absl::Status(loaded.status().code(),
                          absl::StrCat("redis ", primary, ": ", loaded.status().message()));
    }
  }
  return std::unique_ptr<RedisStateStore>(
      new RedisStateStore(std::move(router), std::move(options)));
}

absl::StatusOr<redis::Reply> RedisStateStore::Command(const std::string& routing_key,
                                                      std::vector<std::string> argv) {
  if (closed_.load()) return absl::UnavailableError("the Redis store is closed");
  Replies replies(1);
  router_->Send(routing_key, std::move(argv), replies.For(0));
  return std::move(replies.Wait()[0]);
}

absl::string_view RedisHashTagOfKey(absl::string_view key) {
  const size_t open = key.find('{');
  if (open == absl::string_view::npos) return "";
  const size_t close = key.find('}', open + 1);
  if (close == absl::string_view::npos) return "";
  return key.substr(open + 1, close - open - 1);
}

std::string RedisStateStore::KeyFor(const StateKey& key) const {
  return RedisKeyFor(options_.key_prefix, key, RedisHashTagOfKey(key.key));
}

absl::StatusOr<Outcome> RedisStateStore::Apply(const Operation& op, const Clock&) {
  if (closed_.load()) return absl::UnavailableError("the Redis store is closed");
  const OperationKeys keys = DistinctKeys(op.limits);
  std::vector<std::string> redis_keys;
  redis_keys.reserve(keys.keys.size());
  for (const StateKey& k : keys.keys) redis_keys.push_back(KeyFor(k));
  std::optional<int64_t> now;
  if (options_.clock_override != nullptr) now = options_.clock_override->NowMicros();
  const std::vector<std::vector<size_t>> groups = SlotGroups(redis_keys);
  if (groups.size() > 1) return ApplyAcrossSlots(op, keys, redis_keys, groups, now);
  absl::StatusOr<redis::Reply> reply =
      Command(redis_keys[0], RedisApplyCommand(op, keys, redis_keys, now));
  if (!reply.ok()) return reply.status();
  return RedisApplyOutcome(op, keys, *reply);
}

void RedisStateStore::ApplyAsync(const Operation& op, const Clock& clock, ApplyDone done) {
  if (closed_.load()) {
    std::move(done)(absl::UnavailableError("the Redis store is closed"));
    return;
  }
  if (!op.records.empty()) {  // records are not one FCALL: Apply
    std::move(done)(Apply(op, clock));
    return;
  }
  // What the reply is checked against, owned until it arrives.
  struct Call {
    std::vector<LimitOp> limits;
    Mode mode;
    OperationKeys keys;
    ApplyDone done;
  };
  auto call = std::make_shared<Call>();
  call->keys = DistinctKeys(op.limits);
  std::vector<std::string> redis_keys;
  redis_keys.reserve(call->keys.keys.size());
  for (const StateKey& k : call->keys.keys) redis_keys.push_back(KeyFor(k));
  std::optional<int64_t> now;
  if (options_.clock_override != nullptr) now = options_.clock_override->NowMicros();
  const int slot = redis::KeySlot(redis_keys[0]);
  for (const std::string& key : redis_keys) {
    if (redis::KeySlot(key) != slot) {  // one take per slot, with holds and refunds
      ApplyAcrossSlotsAsync(op, call->keys, redis_keys, SlotGroups(redis_keys), now,
                            std::move(done));
      return;
    }
  }
  call->limits.assign(op.limits.begin(), op.limits.end());
  call->mode = op.mode;
  call->done = std::move(done);
  std::vector<std::string> argv = RedisApplyCommand(op, call->keys, redis_keys, now);
  router_->Send(redis_keys[0], std::move(argv), [call](absl::StatusOr<redis::Reply> reply) {
    if (!reply.ok()) {
      std::move(call->done)(reply.status());
      return;
    }
    std::move(call->done)(
        RedisApplyOutcome(Operation{call->limits, call->mode}, call->keys, *reply));
  });
}

// One request across slots between its takes and its answer (ApplyAcrossSlotsAsync).
struct RedisStateStore::CrossSlotCall {
  // Per slot: its limits (in operation order), their positions in the operation, its keys and
  // its hold key.
  struct Group {
    std::vector<LimitOp> limits;
    std::vector<size_t> limit_index;
    OperationKeys keys;
    std::vector<std::string> redis_keys;
    std::string hold_key;
  };
  std::vector<LimitOp> limits;
  Mode mode = Mode::kConsume;
  OperationKeys keys;
  std::vector<std::vector<size_t>> groups;  // key indices of each slot
  std::vector<Group> parts;
  std::string hold_ttl_ms;
  StoreTracer* tracer = nullptr;  // of the caller's thread; lives until `done` has run
  ApplyDone done;
  // Each take's reply is written by its own callback; the last one to arrive (pending reaching
  // 0, acquire-release) reads them all.
  std::vector<absl::StatusOr<redis::Reply>> takes;
  std::atomic<size_t> pending{0};
  // After the takes, when some slot took and the request is denied: the answer, sent once every
  // refund has been answered.
  absl::StatusOr<Outcome> answer = absl::UnknownError("unanswered");
  std::atomic<size_t> refunds_pending{0};
};

absl::StatusOr<Outcome> RedisStateStore::ApplyAcrossSlots(
    const Operation& op, const OperationKeys& keys, const std::vector<std::string>& redis_keys,
    const std::vector<std::vector<size_t>>& groups, std::optional<int64_t> now) {
  absl::Notification answered;
  absl::StatusOr<Outcome> result = absl::UnknownError("unanswered");
  ApplyAcrossSlotsAsync(op, keys, redis_keys, groups, now, [&](absl::StatusOr<Outcome> outcome) {
    result = std::move(outcome);
    answered.Notify();
  });
  answered.WaitForNotification();  // every command has a deadline: it is answered
  return result;
}

void RedisStateStore::ApplyAcrossSlotsAsync(const Operation& op, const OperationKeys& keys,
                                            const std::vector<std::string>& redis_keys,
                                            const std::vector<std::vector<size_t>>& groups,
                                            std::optional<int64_t> now, ApplyDone done) {
  auto call = std::make_shared<CrossSlotCall>();
  const size_t n_groups = groups.size();
  call->limits.assign(op.limits.begin(), op.limits.end());
  call->mode = op.mode;
  call->keys = keys;
  call->groups = groups;
  call->hold_ttl_ms = absl::StrCat(absl::ToInt64Milliseconds(options_.hold_ttl));
  call->tracer = CurrentStoreTracer();
  call->done = std::move(done);
  call->takes.assign(n_groups, absl::UnknownError("no reply"));
  call->pending.store(n_groups, std::memory_order_relaxed);
  const std::string request_id = RandomRequestId();
  std::vector<size_t> group_of_key(keys.keys.size());
  for (size_t g = 0; g < n_groups; ++g) {
    for (size_t k : groups[g]) group_of_key[k] = g;
  }
  call->parts.resize(n_groups);
  for (size_t i = 0; i < op.limits.size(); ++i) {
    CrossSlotCall::Group& part = call->parts[group_of_key[keys.slot_of[i]]];
    part.limits.push_back(op.limits[i]);
    part.limit_index.push_back(i);
  }
  std::vector<std::vector<std::string>> commands(n_groups);
  for (size_t g = 0; g < n_groups; ++g) {
    CrossSlotCall::Group& part = call->parts[g];
    part.keys = DistinctKeys(part.limits);
    for (const StateKey& k : part.keys.keys) part.redis_keys.push_back(KeyFor(k));
    part.hold_key = absl::StrCat(options_.key_prefix, "{", redis::HashTagOf(part.redis_keys[0]),
                                 "}hold:", request_id);
    commands[g] =
        RedisApplyCommand(Operation{part.limits, op.mode}, part.keys, part.redis_keys, now);
    if (op.mode != Mode::kCheck) {
      // FCALL ratelimit_apply n keys... args... -> FCALL ratelimit_take_held n+1 keys... hold ttl
      std::vector<std::string>& argv = commands[g];
      const size_t n = part.redis_keys.size();
      argv[1] = std::string(kRedisTakeHeldFunction);
      argv[2] = absl::StrCat(n + 1);
      argv.insert(argv.begin() + 3 + n, {part.hold_key, call->hold_ttl_ms});
    }
  }
  // Every command is built before the first is sent: a reply may arrive (and finish the call)
  // before the last Send returns.
  for (size_t g = 0; g < n_groups; ++g) {
    const std::string routing_key = call->parts[g].redis_keys[0];
    router_->SendVia(call->tracer, routing_key, std::move(commands[g]),
                     [this, call, g](absl::StatusOr<redis::Reply> reply) {
                       call->takes[g] = std::move(reply);
                       if (call->pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
                         OnCrossSlotTakes(std::move(call));
                       }
                     });
  }
}

void RedisStateStore::OnCrossSlotTakes(std::shared_ptr<CrossSlotCall> call) {
  const size_t n_groups = call->parts.size();
  const bool check = call->mode == Mode::kCheck;
  const Operation op{call->limits, call->mode};
  // What each slot answered: its outcome (checked against the algebra) and the states it read.
  absl::Status failure;
  bool allowed = true;
  int64_t decided_at = 0;
  std::vector<std::optional<Outcome>> outcomes(n_groups);
  std::vector<std::optional<State>> read(call->keys.keys.size());
  std::vector<bool> refund(n_groups, false);
  for (size_t g = 0; g < n_groups; ++g) {
    const CrossSlotCall::Group& part = call->parts[g];
    const absl::StatusOr<redis::Reply>& reply = call->takes[g];
    absl::StatusOr<Outcome> outcome =
        reply.ok() ? RedisApplyOutcome(Operation{part.limits, call->mode}, part.keys, *reply)
                   : absl::StatusOr<Outcome>(reply.status());
    if (!outcome.ok()) {
      if (failure.ok()) failure = outcome.status();
      // The take may have run (a timeout) or not: the refund settles both.
      refund[g] = !check;
      allowed = false;
      continue;
    }
    absl::StatusOr<std::vector<std::optional<State>>> states =
        ReadStates(*reply, part.keys.keys.size());
    if (!states.ok()) {
      // Not a reply of ours: whatever it took is settled by the refund, as for a failure.
      if (failure.ok()) failure = states.status();
      refund[g] = !check;
      allowed = false;
      continue;
    }
    for (size_t k = 0; k < part.keys.keys.size(); ++k) {
      (*states)[k].swap(read[call->groups[g][k]]);
    }
    decided_at = std::max(decided_at, outcome->now_us);
    refund[g] = outcome->allowed && !check;
    allowed = allowed && outcome->allowed;
    outcomes[g] = *std::move(outcome);
  }
  if (allowed) {
    Outcome result;
    result.allowed = true;
    result.now_us = decided_at;
    result.decisions.resize(call->limits.size());
    for (size_t g = 0; g < n_groups; ++g) {
      for (size_t j = 0; j < call->parts[g].limit_index.size(); ++j) {
        result.decisions[call->parts[g].limit_index[j]] = outcomes[g]->decisions[j];
      }
    }
    std::move(call->done)(std::move(result));
    return;
  }
  if (!failure.ok()) {
    call->answer = failure;
  } else {
    // The denial as the algebra gives it for the states the slots read (each slot's own state is
    // exactly what its FCALL saw; the time is the latest of the slots').
    std::vector<std::optional<State>> writes(call->keys.keys.size());
    Outcome result = DecideOperation(op, call->keys, read, decided_at, absl::MakeSpan(writes));
    result.allowed = false;
    call->answer = std::move(result);
  }
  // Give back what the slots that took took, and settle the unknown ones; answer once every
  // refund is answered. A refund that fails leaves its tokens taken until they refill (an
  // under-grant, never more).
  std::vector<size_t> to_refund;
  for (size_t g = 0; g < n_groups; ++g) {
    if (refund[g]) to_refund.push_back(g);
  }
  if (to_refund.empty()) {
    std::move(call->done)(std::move(call->answer));
    return;
  }
  call->refunds_pending.store(to_refund.size(), std::memory_order_relaxed);
  std::vector<std::vector<std::string>> commands;
  for (size_t g : to_refund) {
    const CrossSlotCall::Group& part = call->parts[g];
    std::vector<std::string> argv = {"FCALL", std::string(kRedisRefundFunction),
                                     absl::StrCat(part.redis_keys.size() + 1)};
    argv.insert(argv.end(), part.redis_keys.begin(), part.redis_keys.end());
    argv.push_back(part.hold_key);
    argv.push_back(call->hold_ttl_ms);
    commands.push_back(std::move(argv));
  }
  for (size_t r = 0; r < to_refund.size(); ++r) {
    const std::string routing_key = call->parts[to_refund[r]].redis_keys[0];
    router_->SendVia(call->tracer, routing_key, std::move(commands[r]),
                     [call](absl::StatusOr<redis::Reply>) {
                       if (call->refunds_pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
                         std::move(call->done)(std::move(call->answer));
                       }
                     });
  }
}

absl::Status RedisStateStore::Update(absl::Span<const StateKey> keys, DecideFn decide) {
  const size_t n = keys.size();
  std::vector<std::string> redis_keys;
  for (const StateKey& k : keys) redis_keys.push_back(KeyFor(k));
  for (const std::string& k : redis_keys) {
    if (redis::KeySlot(k) != redis::KeySlot(redis_keys[0])) {
      return absl::FailedPreconditionError(
          "the Redis store: Update of keys in different slots is not supported (use Apply)");
    }
  }
  for (int attempt = 0; attempt < kMaxUpdateAttempts; ++attempt) {
    std::vector<std::string> get = {"MGET"};
    get.insert(get.end(), redis_keys.begin(), redis_keys.end());
    absl::StatusOr<redis::Reply> read = Command(redis_keys[0], get);
    if (!read.ok()) return read.status();
    if (read->type != redis::Reply::Type::kArray || read->elements.size() != n) {
      return ErrorReply("MGET", *read);
    }
    std::vector<std::optional<State>> current(n);
    std::vector<std::string> expected(n);
    for (size_t i = 0; i < n; ++i) {
      const redis::Reply& r = read->elements[i];
      if (r.type != redis::Reply::Type::kString) continue;
      expected[i] = r.str;
      current[i] = DecodeRedisState(r.str);
      if (!current[i])
        return absl::InternalError(absl::StrCat("unreadable state at ", redis_keys[i]));
    }
    std::vector<std::optional<State>> writes(n);
    if (absl::Status s = decide(current, absl::MakeSpan(writes)); !s.ok()) return s;
    std::vector<std::string> cas = {"FCALL", std::string(kRedisCompareAndSetFunction),
                                    absl::StrCat(n)};
    cas.insert(cas.end(), redis_keys.begin(), redis_keys.end());
    cas.insert(cas.end(), expected.begin(), expected.end());
    for (size_t i = 0; i < n; ++i) cas.push_back(writes[i] ? EncodeRedisState(*writes[i]) : "");
    absl::StatusOr<redis::Reply> done = Command(redis_keys[0], cas);
    if (!done.ok()) return done.status();
    if (done->type != redis::Reply::Type::kInteger) return ErrorReply("compare-and-set", *done);
    if (done->integer == 1) return absl::OkStatus();
  }
  return absl::AbortedError("the Redis store: too many conflicting writes");
}

absl::Status RedisStateStore::UpdateWithRecords(absl::Span<const StateKey> keys,
                                                absl::Span<const RecordSpec> records,
                                                const Clock& clock, RecordDecideFn decide) {
  if (closed_.load()) return absl::UnavailableError("the Redis store is closed");
  const size_t n = keys.size();
  const size_t m = records.size();
  std::vector<std::string> redis_keys;
  redis_keys.reserve(n + m);
  for (const StateKey& k : keys) redis_keys.push_back(KeyFor(k));
  const bool single_node = router_->SingleNode();
  const int slot = redis::KeySlot(redis_keys[0]);
  if (!single_node) {
    for (const std::string& k : redis_keys) {
      if (redis::KeySlot(k) != slot) {
        return absl::FailedPreconditionError(
            "the Redis store: on a Redis Cluster, a request with a request_id or a Settle must "
            "name limits whose keys share a hash slot (give their keys one hash tag, e.g. "
            "\"{org7}user42\" and \"{org7}\")");
      }
    }
  }
  // On a cluster a record lives here in the slot of the states it guards (a request_id's record
  // comes here only when its own slot is that one), under that slot's canonical tag, so every
  // operation on those states finds it; one server holds every key anyway.
  const absl::string_view tag = single_node ? absl::string_view() : redis::SlotTag(slot);
  for (const RecordSpec& r : records) {
    redis_keys.push_back(RedisRecordKey(options_.key_prefix, tag, r.key));
  }
  for (int attempt = 0; attempt < kMaxUpdateAttempts; ++attempt) {
    std::vector<std::string> get = {"MGET"};
    get.insert(get.end(), redis_keys.begin(), redis_keys.end());
    absl::StatusOr<redis::Reply> read = Command(redis_keys[0], get);
    if (!read.ok()) return read.status();
    if (read->type != redis::Reply::Type::kArray || read->elements.size() != n + m) {
      return ErrorReply("MGET", *read);
    }
    const int64_t now_us = clock.NowMicros();
    std::vector<std::optional<State>> current(n);
    std::vector<std::optional<std::string>> present(m);
    std::vector<std::string> expected(n + m);
    for (size_t i = 0; i < n + m; ++i) {
      const redis::Reply& r = read->elements[i];
      if (r.type != redis::Reply::Type::kString) continue;
      expected[i] = r.str;
      if (i < n) {
        current[i] = DecodeRedisState(r.str);
        if (!current[i]) {
          return absl::InternalError(absl::StrCat("unreadable state at ", redis_keys[i]));
        }
        continue;
      }
      absl::StatusOr<std::optional<std::string>> value = DecodeRecord(r.str, now_us, redis_keys[i]);
      if (!value.ok()) return value.status();
      present[i - n] = *std::move(value);
    }
    std::vector<std::optional<State>> writes(n);
    std::vector<std::optional<std::string>> record_writes(m);
    if (absl::Status s =
            decide(current, present, absl::MakeSpan(writes), absl::MakeSpan(record_writes));
        !s.ok()) {
      return s;
    }
    const bool writes_any =
        std::any_of(writes.begin(), writes.end(), [](const auto& w) { return w.has_value(); }) ||
        std::any_of(record_writes.begin(), record_writes.end(),
                    [](const auto& w) { return w.has_value(); });
    // What was read was one snapshot (MGET is atomic): a decision that writes nothing stands.
    if (!writes_any) return absl::OkStatus();
    std::vector<std::string> commit = {"FCALL", std::string(kRedisCommitFunction),
                                       absl::StrCat(n + m)};
    commit.insert(commit.end(), redis_keys.begin(), redis_keys.end());
    commit.push_back(absl::StrCat(n));
    commit.insert(commit.end(), expected.begin(), expected.begin() + n);
    for (size_t i = 0; i < n; ++i) {
      commit.push_back(writes[i] ? EncodeRedisState(*writes[i]) : "");
    }
    commit.insert(commit.end(), expected.begin() + n, expected.end());
    for (size_t r = 0; r < m; ++r) {
      commit.push_back(record_writes[r] ? EncodeRecord(records[r].expires_at_us, *record_writes[r])
                                        : "");
    }
    for (size_t r = 0; r < m; ++r) {
      commit.push_back(absl::StrCat(RecordExpiryMs(records[r].expires_at_us)));
    }
    absl::StatusOr<redis::Reply> done = Command(redis_keys[0], commit);
    if (!done.ok()) return done.status();
    if (done->type != redis::Reply::Type::kInteger)
      return ErrorReply("FCALL ratelimit_commit", *done);
    if (done->integer == 1) return absl::OkStatus();
  }
  return absl::AbortedError("the Redis store: too many conflicting writes");
}

absl::StatusOr<Outcome> RedisStateStore::ApplyRecorded(const Operation& op, const Clock& clock) {
  if (closed_.load()) return absl::UnavailableError("the Redis store is closed");
  if (router_->SingleNode()) return ApplyWithRecords(*this, op, clock);
  const OperationKeys keys = DistinctKeys(op.limits);
  std::vector<std::string> redis_keys;
  redis_keys.reserve(keys.keys.size());
  for (const StateKey& k : keys.keys) redis_keys.push_back(KeyFor(k));
  const std::vector<std::vector<size_t>> groups = SlotGroups(redis_keys);
  const size_t settles = static_cast<size_t>(std::count_if(
      op.limits.begin(), op.limits.end(), [](const LimitOp& l) { return l.settle.has_value(); }));
  // A request_id's record lives in the slot of its own key, so that every request with the id
  // meets it whatever its limits; a spent receipt's record lives with its state.
  const bool request_id = settles == 0 && op.records.size() == 1 && op.mode != Mode::kCheck;
  if (groups.size() == 1) {
    // One slot overall: one optimistic transaction (UpdateWithRecords names the record by the
    // slot's canonical tag, the same key as RedisRequestRecordKey).
    if (!request_id ||
        redis::KeySlot(RedisRequestRecordKey(options_.key_prefix, op.records[0].key)) ==
            redis::KeySlot(redis_keys[0])) {
      return ApplyWithRecords(*this, op, clock);
    }
    return RecordedAcrossSlots(op, keys, redis_keys, groups, clock);
  }
  if (settles == op.limits.size() && op.records.size() == op.limits.size() &&
      op.mode != Mode::kCheck) {
    return SettleAcrossSlots(op, keys, redis_keys, groups, clock);
  }
  if (request_id) return RecordedAcrossSlots(op, keys, redis_keys, groups, clock);
  return absl::FailedPreconditionError(
      "the Redis store: on a Redis Cluster, an operation with records whose keys span slots must "
      "be a Settle (one record per settlement) or carry one record (a request_id)");
}

absl::StatusOr<Outcome> RedisStateStore::SettleAcrossSlots(
    const Operation& op, const OperationKeys& keys, const std::vector<std::string>& redis_keys,
    const std::vector<std::vector<size_t>>& groups, const Clock& clock) {
  (void)redis_keys;
  std::vector<SlotPart> parts = SplitBySlot(op, keys, groups, /*with_records=*/true);
  for (SlotPart& part : parts) {
    for (const StateKey& k : part.keys.keys) part.redis_keys.push_back(KeyFor(k));
    const absl::string_view tag = redis::SlotTag(redis::KeySlot(part.redis_keys[0]));
    for (const RecordSpec& r : part.records) {
      part.redis_keys.push_back(RedisRecordKey(options_.key_prefix, tag, r.key));
    }
  }
  // Every record this call writes carries its random id: a re-read recognises its own commit.
  const std::string mine = absl::StrCat("settle ", RandomRequestId());
  std::vector<std::optional<SlotSnapshot>> snaps(parts.size());
  // Reads the slots `which` (in parallel) into snaps.
  auto read = [&](const std::vector<size_t>& which) -> absl::Status {
    Replies replies(which.size());
    for (size_t t = 0; t < which.size(); ++t) {
      const SlotPart& part = parts[which[t]];
      std::vector<std::string> get = {"MGET"};
      get.insert(get.end(), part.redis_keys.begin(), part.redis_keys.end());
      router_->Send(part.redis_keys[0], std::move(get), replies.For(t));
    }
    std::vector<absl::StatusOr<redis::Reply>>& got = replies.Wait();
    const int64_t now_us = clock.NowMicros();
    for (size_t t = 0; t < which.size(); ++t) {
      absl::StatusOr<SlotSnapshot> snap = ParseSnapshot(got[t], parts[which[t]], now_us);
      if (!snap.ok()) return snap.status();
      snaps[which[t]] = *std::move(snap);
    }
    return absl::OkStatus();
  };
  // The first record (in operation order) of the slots `which` present with another value than
  // `mine`, as an Outcome; nullopt when there is none.
  auto spent = [&](const std::vector<size_t>& which) -> std::optional<Outcome> {
    std::optional<Outcome> found;
    for (size_t g : which) {
      for (size_t r = 0; r < parts[g].records.size(); ++r) {
        const std::optional<std::string>& value = snaps[g]->records[r];
        if (!value || *value == mine) continue;
        const size_t index = parts[g].record_index[r];
        if (!found || index < *found->existing_record) {
          found = Outcome();
          found->existing_record = index;
          found->existing_value = *value;
        }
      }
    }
    if (found) found->now_us = clock.NowMicros();
    return found;
  };

  std::vector<size_t> todo(parts.size());
  for (size_t g = 0; g < parts.size(); ++g) todo[g] = g;
  if (absl::Status s = read(todo); !s.ok()) return s;
  if (std::optional<Outcome> refused = spent(todo)) return *std::move(refused);

  std::vector<Outcome> outcomes(parts.size());
  for (int attempt = 0; attempt < kMaxUpdateAttempts && !todo.empty(); ++attempt) {
    // Decide each slot still to do on its snapshot and commit it, slots in parallel.
    Replies commits(todo.size());
    for (size_t t = 0; t < todo.size(); ++t) {
      const size_t g = todo[t];
      const SlotPart& part = parts[g];
      const SlotSnapshot& snap = *snaps[g];
      const size_t n = part.keys.keys.size();
      const size_t m = part.records.size();
      std::vector<std::optional<State>> writes(n);
      outcomes[g] = DecideOperation(Operation{part.limits, Mode::kConsume}, part.keys, snap.states,
                                    clock.NowMicros(), absl::MakeSpan(writes));
      std::vector<std::string> commit = {"FCALL", std::string(kRedisCommitFunction),
                                         absl::StrCat(n + m)};
      commit.insert(commit.end(), part.redis_keys.begin(), part.redis_keys.end());
      commit.push_back(absl::StrCat(n));
      commit.insert(commit.end(), snap.raw.begin(), snap.raw.begin() + n);
      for (size_t i = 0; i < n; ++i) {
        commit.push_back(writes[i] ? EncodeRedisState(*writes[i]) : "");
      }
      commit.insert(commit.end(), snap.raw.begin() + n, snap.raw.end());
      for (const RecordSpec& r : part.records) {
        commit.push_back(EncodeRecord(r.expires_at_us, mine));
      }
      for (const RecordSpec& r : part.records) {
        commit.push_back(absl::StrCat(RecordExpiryMs(r.expires_at_us)));
      }
      router_->Send(part.redis_keys[0], std::move(commit), commits.For(t));
    }
    std::vector<absl::StatusOr<redis::Reply>>& done = commits.Wait();
    // A slot whose commit conflicted, or whose answer is unknown, is read again.
    std::vector<size_t> again;
    for (size_t t = 0; t < todo.size(); ++t) {
      if (done[t].ok() && done[t]->type == redis::Reply::Type::kInteger && done[t]->integer == 1) {
        continue;
      }
      if (done[t].ok() && done[t]->type != redis::Reply::Type::kInteger) {
        return ErrorReply("FCALL ratelimit_commit", *done[t]);
      }
      again.push_back(todo[t]);
    }
    if (again.empty()) {
      todo.clear();
      break;
    }
    if (absl::Status s = read(again); !s.ok()) return s;
    // Another call spent a receipt of these slots (two Settles racing on it): refuse it the way
    // a spent receipt is refused; the slots already committed stay committed.
    if (std::optional<Outcome> refused = spent(again)) return *std::move(refused);
    todo.clear();
    for (size_t g : again) {
      // Carrying our records: the commit went through after all (its answer was lost).
      const bool ours = !parts[g].records.empty() && snaps[g]->records[0] == mine;
      if (!ours) todo.push_back(g);
    }
  }
  if (!todo.empty()) return absl::AbortedError("the Redis store: too many conflicting writes");
  Outcome result;
  result.allowed = true;
  result.decisions.resize(op.limits.size());
  for (size_t g = 0; g < parts.size(); ++g) {
    result.now_us = std::max(result.now_us, outcomes[g].now_us);
    for (size_t j = 0; j < parts[g].limit_index.size(); ++j) {
      result.decisions[parts[g].limit_index[j]] = std::move(outcomes[g].decisions[j]);
    }
  }
  return result;
}

absl::StatusOr<Outcome> RedisStateStore::RecordedAcrossSlots(
    const Operation& op, const OperationKeys& keys, const std::vector<std::string>& redis_keys,
    const std::vector<std::vector<size_t>>& groups, const Clock& clock) {
  (void)redis_keys;
  const RecordSpec& record = op.records[0];
  // The record lives in the slot of its own key, whatever the slots of the states.
  const std::string record_key = RedisRequestRecordKey(options_.key_prefix, record.key);
  const std::string expiry_ms = absl::StrCat(RecordExpiryMs(record.expires_at_us));
  const std::string owner = RandomRequestId();
  const int64_t now_us = clock.NowMicros();
  const int64_t lease_until_us = now_us + absl::ToInt64Microseconds(options_.claim_lease);
  // Replaces the record's bytes `from` by `to` when it still holds `from` (ratelimit_commit).
  auto swap = [&](const std::string& from, const std::string& to) -> absl::StatusOr<bool> {
    absl::StatusOr<redis::Reply> done = Command(
        record_key,
        {"FCALL", std::string(kRedisCommitFunction), "1", record_key, "0", from, to, expiry_ms});
    if (!done.ok()) return done.status();
    if (done->type != redis::Reply::Type::kInteger) {
      return ErrorReply("FCALL ratelimit_commit", *done);
    }
    return done->integer == 1;
  };
  const absl::Status in_progress = absl::AbortedError(
      "request_id: a request with this request_id is in progress elsewhere; retry");

  // 1. Claim the request_id.
  int64_t generation = 1;
  std::string incarnation = owner;
  std::string claim = EncodeClaim(generation, lease_until_us, owner, incarnation);
  absl::StatusOr<redis::Reply> got =
      Command(record_key, {"SET", record_key, claim, "NX", "GET", "PXAT", expiry_ms});
  if (!got.ok()) return got.status();
  if (got->type == redis::Reply::Type::kString) {
    const std::string old = got->str;
    if (std::optional<Claim> pending = ParseClaim(old)) {
      if (pending->lease_until_us > now_us) return in_progress;
      generation = pending->generation + 1;  // its owner is gone: take over
      incarnation = pending->incarnation;
    } else {
      absl::StatusOr<std::optional<std::string>> value = DecodeRecord(old, now_us, record_key);
      if (!value.ok()) return value.status();
      if (*value) {
        Outcome existing;
        existing.now_us = now_us;
        existing.existing_record = 0;
        existing.existing_value = **value;
        return existing;
      }
    }
    claim = EncodeClaim(generation, lease_until_us, owner, incarnation);
    absl::StatusOr<bool> swapped = swap(old, claim);
    if (!swapped.ok()) return swapped.status();
    if (!*swapped) return in_progress;
  } else if (got->type != redis::Reply::Type::kNil) {
    return ErrorReply("SET NX GET", *got);
  }
  // Ends the lease at once, so that a retry takes over without waiting (the holds stay).
  auto release = [&](absl::Status error) {
    (void)swap(claim, EncodeClaim(generation, 0, owner, incarnation));
    return error;
  };

  // 2. Take per slot under holds named after the request (its record key, its limits and the
  // claim's incarnation).
  std::string body = absl::StrCat(static_cast<int>(op.mode));
  for (const LimitOp& l : op.limits) {
    absl::StrAppend(&body, "|", static_cast<int>(l.key.source), ":", l.key.name.size(), ":",
                    l.key.name, l.key.key.size(), ":", l.key.key, ":", l.count);
  }
  const std::string hold_name =
      absl::StrCat("hold:r", absl::BytesToHexString(record.key), ":",
                   absl::Hex(StableKeyHash(record.key, body), absl::kZeroPad16),
                   incarnation.empty() ? "" : ":", incarnation);
  const std::string hold_ttl_ms =
      absl::StrCat(std::max<int64_t>(1, RecordExpiryMs(record.expires_at_us) - now_us / 1000));
  const std::string generation_arg = absl::StrCat(generation);
  std::optional<int64_t> now_override;
  if (options_.clock_override != nullptr) now_override = options_.clock_override->NowMicros();
  std::vector<SlotPart> parts = SplitBySlot(op, keys, groups, /*with_records=*/false);
  std::vector<std::string> hold_keys(parts.size());
  Replies takes(parts.size());
  for (size_t g = 0; g < parts.size(); ++g) {
    SlotPart& part = parts[g];
    for (const StateKey& k : part.keys.keys) part.redis_keys.push_back(KeyFor(k));
    hold_keys[g] = absl::StrCat(options_.key_prefix, "{",
                                redis::SlotTag(redis::KeySlot(part.redis_keys[0])), "}", hold_name);
    std::vector<std::string> argv = RedisApplyCommand(Operation{part.limits, op.mode}, part.keys,
                                                      part.redis_keys, now_override);
    const size_t n = part.redis_keys.size();
    argv[1] = std::string(kRedisTakeRecordedFunction);
    argv[2] = absl::StrCat(n + 1);
    argv.insert(argv.begin() + 3 + n, {hold_keys[g], hold_ttl_ms, generation_arg});
    router_->Send(part.redis_keys[0], std::move(argv), takes.For(g));
  }
  std::vector<absl::StatusOr<redis::Reply>>& replies = takes.Wait();
  if (options_.stop_after_takes_for_tests && options_.stop_after_takes_for_tests()) {
    return absl::UnavailableError("stopped after the takes (test)");
  }

  absl::Status failure;
  bool allowed = true;
  int64_t decided_at = 0;
  std::vector<std::optional<Outcome>> outcomes(parts.size());
  std::vector<std::optional<State>> read(keys.keys.size());
  std::vector<bool> refund(parts.size(), false);
  std::vector<size_t> unread;  // refunded by an earlier run of this generation or a later one
  for (size_t g = 0; g < parts.size(); ++g) {
    const SlotPart& part = parts[g];
    if (replies[g].ok() && replies[g]->type == redis::Reply::Type::kError &&
        absl::StartsWith(replies[g]->str, "REFUNDED")) {
      allowed = false;
      unread.push_back(g);
      continue;
    }
    absl::StatusOr<Outcome> outcome =
        replies[g].ok() ? RedisApplyOutcome(Operation{part.limits, op.mode}, part.keys, *replies[g])
                        : absl::StatusOr<Outcome>(replies[g].status());
    if (!outcome.ok()) {
      if (failure.ok()) failure = outcome.status();
      refund[g] = true;  // the take may have run (a timeout) or not: the refund settles both
      allowed = false;
      continue;
    }
    absl::StatusOr<std::vector<std::optional<State>>> states =
        ReadStates(*replies[g], part.keys.keys.size());
    if (!states.ok()) return release(states.status());
    for (size_t k = 0; k < part.keys.keys.size(); ++k) {
      (*states)[k].swap(read[groups[g][k]]);
    }
    decided_at = std::max(decided_at, outcome->now_us);
    refund[g] = outcome->allowed;
    allowed = allowed && outcome->allowed;
    outcomes[g] = *std::move(outcome);
  }
  Outcome result;
  if (allowed) {
    result.allowed = true;
    result.now_us = decided_at;
    result.decisions.resize(op.limits.size());
    for (size_t g = 0; g < parts.size(); ++g) {
      for (size_t j = 0; j < parts[g].limit_index.size(); ++j) {
        result.decisions[parts[g].limit_index[j]] = outcomes[g]->decisions[j];
      }
    }
  } else {
    // Give back what the slots that took took, and settle the unknown ones; read the states of
    // the slots refunded before, for the denial.
    std::vector<size_t> to_refund;
    for (size_t g = 0; g < parts.size(); ++g) {
      if (refund[g]) to_refund.push_back(g);
    }
    Replies refunds(to_refund.size() + unread.size());
    for (size_t r = 0; r < to_refund.size(); ++r) {
      const SlotPart& part = parts[to_refund[r]];
      std::vector<std::string> argv = {"FCALL", std::string(kRedisRefundFunction),
                                       absl::StrCat(part.redis_keys.size() + 1)};
      argv.insert(argv.end(), part.redis_keys.begin(), part.redis_keys.end());
      argv.push_back(hold_keys[to_refund[r]]);
      argv.push_back(hold_ttl_ms);
      argv.push_back(generation_arg);
      router_->Send(part.redis_keys[0], std::move(argv), refunds.For(r));
    }
    for (size_t u = 0; u < unread.size(); ++u) {
      const SlotPart& part = parts[unread[u]];
      std::vector<std::string> get = {"MGET"};
      get.insert(get.end(), part.redis_keys.begin(), part.redis_keys.end());
      router_->Send(part.redis_keys[0], std::move(get), refunds.For(to_refund.size() + u));
    }
    std::vector<absl::StatusOr<redis::Reply>>& answered = refunds.Wait();
    if (!failure.ok()) return release(failure);
    for (size_t u = 0; u < unread.size(); ++u) {
      absl::StatusOr<SlotSnapshot> snap =
          ParseSnapshot(answered[to_refund.size() + u], parts[unread[u]], now_us);
      if (!snap.ok()) return release(snap.status());
      for (size_t k = 0; k < snap->states.size(); ++k) {
        snap->states[k].swap(read[groups[unread[u]][k]]);
      }
    }
    if (decided_at == 0) decided_at = now_override.value_or(clock.NowMicros());
    std::vector<std::optional<State>> writes(keys.keys.size());
    result = DecideOperation(op, keys, read, decided_at, absl::MakeSpan(writes));
    result.allowed = false;
  }

  // 3. The answer replaces the claim, unless another owner took the claim over meanwhile.
  const std::string value = op.record_value ? op.record_value(result) : std::string();
  absl::StatusOr<bool> recorded = swap(claim, EncodeRecord(record.expires_at_us, value));
  if (!recorded.ok()) return recorded.status();
  if (!*recorded) return in_progress;
  return result;
}

absl::StatusOr<std::string> RedisStateStore::Secret(absl::string_view name,
                                                    absl::FunctionRef<std::string()> generate) {
  const std::string key = RedisSecretKey(options_.key_prefix, name);
  absl::StatusOr<redis::Reply> got = Command(key, {"GET", key});
  if (!got.ok()) return got.status();
  if (got->type == redis::Reply::Type::kString) return got->str;
  if (got->type != redis::Reply::Type::kNil) return ErrorReply("GET", *got);
  std::string fresh = generate();
  // NX: when another process created it in between, its secret wins and is returned (GET).
  absl::StatusOr<redis::Reply> set = Command(key, {"SET", key, fresh, "NX", "GET"});
  if (!set.ok()) return set.status();
  if (set->type == redis::Reply::Type::kString) return set->str;
  if (set->type != redis::Reply::Type::kNil) return ErrorReply("SET NX", *set);
  return fresh;
}

absl::StatusOr<std::optional<State>> RedisStateStore::Get(const StateKey& key) {
  const std::string redis_key = KeyFor(key);
  absl::StatusOr<redis::Reply> reply = Command(redis_key, {"GET", redis_key});
  if (!reply.ok()) return reply.status();
  if (reply->type == redis::Reply::Type::kNil) return std::optional<State>();
  if (reply->type != redis::Reply::Type::kString) return ErrorReply("GET", *reply);
  std::optional<State> state = DecodeRedisState(reply->str);
  if (!state) return absl::InternalError(absl::StrCat("unreadable state at ", redis_key));
  return state;
}

absl::StatusOr<uint64_t> RedisStateStore::Delete(const StateKey& key) {
  const std::string redis_key = KeyFor(key);
  absl::StatusOr<redis::Reply> reply = Command(redis_key, {"DEL", redis_key});
  if (!reply.ok()) return reply.status();
  if (reply->type == redis::Reply::Type::kError) return ErrorReply("DEL", *reply);
  return DeletedCount(*reply);
}

absl::StatusOr<uint64_t> RedisStateStore::DeleteAll(LimitSource source, absl::string_view name) {
  if (closed_.load()) return absl::UnavailableError("the Redis store is closed");
  uint64_t deleted = 0;
  for (const std::string& primary : router_->Primaries()) {
    for (const std::string& pattern : RedisNamePatterns(options_.key_prefix, source, name)) {
      std::string cursor = "0";
      do {
        absl::StatusOr<redis::Reply> reply =
            router_->ExecuteOnNode(primary, {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
        if (!reply.ok()) return reply.status();
        if (reply->type != redis::Reply::Type::kArray || reply->elements.size() != 2) {
          return ErrorReply(absl::StrCat("SCAN ", primary), *reply);
        }
        cursor = reply->elements[0].str;
        std::vector<std::string> doomed;
        for (const redis::Reply& k : reply->elements[1].elements) {
          const std::optional<StateKey> state = ParseRedisKey(options_.key_prefix, k.str);
          if (state && state->source == source && state->name == name) doomed.push_back(k.str);
        }
        // One DEL per key: the keys of one primary may lie in different slots.
        Replies replies(doomed.size());
        for (size_t i = 0; i < doomed.size(); ++i) {
          router_->Send(doomed[i], {"DEL", doomed[i]}, replies.For(i));
        }
        for (absl::StatusOr<redis::Reply>& r : replies.Wait()) {
          if (!r.ok()) return r.status();
          if (r->type == redis::Reply::Type::kError) return ErrorReply("DEL", *r);
          deleted += DeletedCount(*r);
        }
      } while (cursor != "0");
    }
  }
  return deleted;
}

absl::Status RedisStateStore::Health() {
  if (closed_.load()) return absl::UnavailableError("the Redis store is closed");
  std::vector<std::string> errors;
  for (const std::string& primary : router_->Primaries()) {
    absl::StatusOr<redis::Reply> reply = router_->ExecuteOnNode(primary, {"PING"});
    if (reply.ok() && reply->type != redis::Reply::Type::kError) return absl::OkStatus();
    errors.push_back(reply.ok() ? absl::StrCat("redis ", primary, ": ", reply->str)
                                : std::string(reply.status().message()));
  }
  return absl::UnavailableError(
      absl::StrCat("no Redis primary answers: ", absl::StrJoin(errors, "; ")));
}

absl::Status RedisStateStore::Close() {
  closed_.store(true);
  return absl::OkStatus();
}

std::vector<StateStore::MetricFamily> RedisStateStore::MetricFamilies() {
  const redis::RedisClusterClient* client = router_->client();
  if (client == nullptr) return {};
  return RedisClientMetricFamilies([client] { return client->Metrics(); });
}

}  // namespace ratelimit
