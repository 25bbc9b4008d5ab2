#include "storage/redis/redis_router.h"

#include <map>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "storage/redis/cluster/redis_slot.h"
#include "storage/redis/redis_function_library.h"

namespace ratelimit::redis_internal {
namespace {

// One synchronous connection: commands run on the caller's thread.
class RunnerRouter final : public Router {
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
class ClusterRouter final : public Router {
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

}  // namespace

std::unique_ptr<Router> NewRunnerRouter(std::unique_ptr<RedisCommandRunner> runner) {
  return std::make_unique<RunnerRouter>(std::move(runner));
}

std::unique_ptr<Router> NewClusterRouter(std::unique_ptr<redis::RedisClusterClient> client) {
  return std::make_unique<ClusterRouter>(std::move(client));
}

void Router::SendTraced(StoreTracer& tracer, const std::string& routing_key,
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

absl::Status ErrorReply(absl::string_view what, const redis::Reply& reply) {
  return absl::InternalError(absl::StrCat(what, ": ", reply.str));
}

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

}  // namespace ratelimit::redis_internal
