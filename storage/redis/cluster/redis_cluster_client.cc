#include "storage/redis/cluster/redis_cluster_client.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "storage/redis/cluster/redis_cluster_loop.h"
#include "storage/redis/cluster/redis_connection.h"
#include "storage/redis/cluster/redis_slot.h"

namespace ratelimit::redis {

RedisClusterClient::RedisClusterClient(Options options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<RedisClusterClient>> RedisClusterClient::Connect(Options options) {
  std::vector<std::string> seeds = absl::StrSplit(options.seeds, ',', absl::SkipWhitespace());
  if (seeds.empty()) return absl::InvalidArgumentError("redis seeds: no address given");
  for (std::string& s : seeds) {
    s = std::string(absl::StripAsciiWhitespace(s));
    std::string host;
    int port = 0;
    if (absl::Status st = ParseAddress(s, &host, &port); !st.ok()) return st;
  }
  if (options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("redis connect_timeout: must be positive");
  }
  if (options.command_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("redis command_timeout: must be positive");
  }
  if (options.max_redirects < 0) {
    return absl::InvalidArgumentError("redis max_redirects: must not be negative");
  }
  if (options.max_batch_commands < 1) {
    return absl::InvalidArgumentError("redis max_batch_commands: must be at least 1");
  }
  if (options.wait_replicas < 0) {
    return absl::InvalidArgumentError("redis wait_replicas: must not be negative");
  }
  if (options.reconnect_backoff_min <= absl::ZeroDuration() ||
      options.reconnect_backoff_max < options.reconnect_backoff_min) {
    return absl::InvalidArgumentError(
        "redis reconnect_backoff: min must be positive and not above max");
  }
  auto client = std::unique_ptr<RedisClusterClient>(new RedisClusterClient(std::move(options)));
  client->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (client->wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  client->loop_ = std::make_unique<Loop>(*client, seeds);
  if (!client->loop_->ok()) {
    return absl::InternalError(absl::StrCat("epoll_create1: ", std::strerror(errno)));
  }
  client->thread_ = std::thread([c = client.get()] { c->loop_->Run(); });

  std::vector<std::string> failures;
  for (const std::string& seed : seeds) {
    absl::StatusOr<Reply> r = client->ExecuteOnNodeSync(seed, {"CLUSTER", "SLOTS"});
    if (!r.ok()) {
      if (r.status().code() == absl::StatusCode::kUnauthenticated) return r.status();
      failures.push_back(std::string(r.status().message()));
      continue;
    }
    if (r->is_error()) {
      if (absl::StrContains(r->str, "cluster support disabled")) {
        absl::Notification set;
        client->Submit([&](Loop& loop) {
          loop.SetStandalone(seed);
          set.Notify();
        });
        set.WaitForNotification();
        client->cluster_mode_ = false;
        return client;
      }
      if (absl::StartsWith(r->str, "NOAUTH")) {
        return absl::UnauthenticatedError(absl::StrCat(
            "redis ", seed, ": authentication required but no password was given (", r->str, ")"));
      }
      failures.push_back(absl::StrCat("redis ", seed, ": CLUSTER SLOTS: ", r->str));
      continue;
    }
    bool applied = false;
    absl::Notification set;
    client->Submit([&](Loop& loop) {
      applied = loop.ApplySlots(*r, seed);
      loop.SetClusterMode(applied);
      set.Notify();
    });
    set.WaitForNotification();
    if (!applied) {
      failures.push_back(absl::StrCat("redis ", seed, ": malformed CLUSTER SLOTS reply"));
      continue;
    }
    client->cluster_mode_ = true;
    return client;
  }
  return absl::UnavailableError(
      absl::StrCat("no redis seed answered: ", absl::StrJoin(failures, "; ")));
}

RedisClusterClient::~RedisClusterClient() {
  if (thread_.joinable()) {
    {
      absl::MutexLock l(&mu_);
      stopping_ = true;
    }
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
    thread_.join();
  }
  loop_.reset();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

bool RedisClusterClient::OnIoThread() const {
  return std::this_thread::get_id() == thread_.get_id();
}

void RedisClusterClient::Submit(std::function<void(Loop&)> task, int slot) {
  {
    absl::MutexLock l(&mu_);
    tasks_.push_back(std::move(task));
    if (wake_pending_) return;
    if (slot >= 0 && slot < static_cast<int>(slot_owner_.size())) {
      const int owner = slot_owner_[slot];
      if (owner >= 0 && owner < static_cast<int>(awaiting_reply_.size()) &&
          awaiting_reply_[owner]) {
        return;
      }
    }
    wake_pending_ = true;
  }
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

void RedisClusterClient::Execute(absl::string_view routing_key, std::vector<std::string> args,
                                 Callback done) {
  ExecuteInSlot(KeySlot(routing_key), std::move(args), std::move(done));
}

void RedisClusterClient::Execute(absl::string_view routing_key, std::vector<std::string> args,
                                 Callback done, std::shared_ptr<CommandInfo> info) {
  ExecuteRouted(KeySlot(routing_key), std::move(args), std::move(done), std::move(info));
}

void RedisClusterClient::ExecuteInSlot(int slot, std::vector<std::string> args, Callback done) {
  ExecuteRouted(slot, std::move(args), std::move(done), nullptr);
}

void RedisClusterClient::ExecuteRouted(int slot, std::vector<std::string> args, Callback done,
                                       std::shared_ptr<CommandInfo> info) {
  if (slot < 0 || slot >= kSlotCount) {
    done(absl::InvalidArgumentError(absl::StrCat("slot: ", slot, " is not in 0..16383")));
    return;
  }
  if (args.empty()) {
    done(absl::InvalidArgumentError("args: empty command"));
    return;
  }
  auto req = std::make_shared<Request>();
  req->wire = FormatCommand(args);
  req->slot = slot;
  req->wait = options_.wait_replicas > 0;
  if (info != nullptr) info->wait_replicas = options_.wait_replicas;
  req->info = std::move(info);
  req->done = std::move(done);
  req->deadline = Now() + ToChrono(options_.command_timeout);
  Submit([req](Loop& loop) mutable { loop.Route(std::move(req)); }, slot);
}

void RedisClusterClient::ExecuteOnNode(std::string address, std::vector<std::string> args,
                                       Callback done) {
  if (args.empty()) {
    done(absl::InvalidArgumentError("args: empty command"));
    return;
  }
  auto req = std::make_shared<Request>();
  req->wire = FormatCommand(args);
  req->node = std::move(address);
  req->done = std::move(done);
  req->deadline = Now() + ToChrono(options_.command_timeout);
  Submit([req](Loop& loop) mutable { loop.Route(std::move(req)); });
}

void RedisClusterClient::ExecuteOnEachPrimary(std::vector<std::string> args,
                                              std::function<void(std::vector<NodeReply>)> done) {
  Submit([args = std::move(args), done = std::move(done)](Loop& loop) mutable {
    loop.EachPrimary(std::move(args), std::move(done));
  });
}

namespace {

// Runs `start` with a callback and waits for it.
absl::StatusOr<Reply> Wait(const std::function<void(RedisClusterClient::Callback)>& start) {
  absl::Notification done;
  absl::StatusOr<Reply> result;
  start([&](absl::StatusOr<Reply> r) {
    result = std::move(r);
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

absl::Status CalledFromCallback() {
  return absl::FailedPreconditionError(
      "a synchronous redis call from a redis callback would deadlock");
}

}  // namespace

absl::StatusOr<Reply> RedisClusterClient::ExecuteSync(absl::string_view routing_key,
                                                      std::vector<std::string> args) {
  if (OnIoThread()) return CalledFromCallback();
  return Wait([&](Callback cb) { Execute(routing_key, std::move(args), std::move(cb)); });
}

absl::StatusOr<Reply> RedisClusterClient::ExecuteOnNodeSync(std::string address,
                                                            std::vector<std::string> args) {
  if (OnIoThread()) return CalledFromCallback();
  return Wait(
      [&](Callback cb) { ExecuteOnNode(std::move(address), std::move(args), std::move(cb)); });
}

absl::StatusOr<std::vector<NodeReply>> RedisClusterClient::ExecuteOnEachPrimarySync(
    std::vector<std::string> args) {
  if (OnIoThread()) return CalledFromCallback();
  absl::Notification done;
  std::vector<NodeReply> result;
  ExecuteOnEachPrimary(std::move(args), [&](std::vector<NodeReply> r) {
    result = std::move(r);
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

std::vector<std::string> RedisClusterClient::Primaries() const {
  absl::MutexLock l(&mu_);
  return primaries_;
}

std::string RedisClusterClient::PrimaryForSlot(int slot) const {
  absl::MutexLock l(&mu_);
  if (slot < 0 || slot >= static_cast<int>(slot_owner_.size()) || slot_owner_[slot] < 0) return "";
  return primaries_[slot_owner_[slot]];
}

RedisClientMetrics RedisClusterClient::Metrics() const {
  absl::MutexLock l(&mu_);
  return metrics_;
}

}  // namespace ratelimit::redis
