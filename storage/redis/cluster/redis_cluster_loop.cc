#include "storage/redis/cluster/redis_cluster_loop.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "storage/redis/cluster/redis_slot.h"
#include "storage/worker_thread.h"

namespace ratelimit::redis {
namespace {

// Commands for a primary with this many writes awaiting their replies do not wake the I/O
// thread: they wait for its next reply and go out together then. Two keeps the next write queued
// at the node while it answers one, so batching never leaves it idle.
constexpr int kBatchesAhead = 2;
// How long the slot map is left alone after a refresh, however many commands ask for another.
constexpr auto kMinRefreshInterval = std::chrono::milliseconds(100);

bool ParseRedirect(const std::string& error, const std::string& from, int* slot,
                   std::string* address) {
  std::vector<std::string> parts = absl::StrSplit(error, ' ', absl::SkipEmpty());
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[1], slot) || *slot < 0 || *slot >= kSlotCount) {
    return false;
  }
  *address = parts[2];
  if (absl::StartsWith(*address, ":")) {
    *address = absl::StrCat(from.substr(0, from.rfind(':')), *address);
  }
  std::string host;
  int port = 0;
  return ParseAddress(*address, &host, &port).ok();
}

}  // namespace

RedisClusterClient::Loop::Loop(RedisClusterClient& owner, std::vector<std::string> seeds)
    : owner_(owner), options_(owner.options_), seeds_(std::move(seeds)) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  slot_owner_.assign(kSlotCount, -1);
}

RedisClusterClient::Loop::~Loop() {
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
}

void RedisClusterClient::Loop::SetStandalone(const std::string& address) {
  cluster_mode_ = false;
  primaries_ = {address};
  slot_owner_.assign(kSlotCount, 0);
  Publish();
}

bool RedisClusterClient::Loop::ApplySlots(const Reply& reply, const std::string& from) {
  if (reply.type != Reply::Type::kArray) return false;
  struct Range {
    int64_t start, end;
    std::string address;
  };
  std::vector<Range> ranges;
  std::set<std::string> addresses;
  for (const Reply& r : reply.elements) {
    if (r.type != Reply::Type::kArray || r.elements.size() < 3) return false;
    const Reply& node = r.elements[2];
    if (r.elements[0].type != Reply::Type::kInteger ||
        r.elements[1].type != Reply::Type::kInteger || node.type != Reply::Type::kArray ||
        node.elements.size() < 2 || node.elements[1].type != Reply::Type::kInteger) {
      return false;
    }
    const int64_t start = r.elements[0].integer, end = r.elements[1].integer;
    if (start < 0 || end >= kSlotCount || start > end) return false;
    std::string host = node.elements[0].str;
    if (host.empty() || host == "?") host = from.substr(0, from.rfind(':'));
    std::string address = absl::StrCat(host, ":", node.elements[1].integer);
    addresses.insert(address);
    ranges.push_back(Range{start, end, std::move(address)});
  }
  primaries_.assign(addresses.begin(), addresses.end());
  slot_owner_.assign(kSlotCount, -1);
  for (const Range& r : ranges) {
    const int index = static_cast<int>(
        std::lower_bound(primaries_.begin(), primaries_.end(), r.address) - primaries_.begin());
    for (int64_t s = r.start; s <= r.end; ++s) slot_owner_[s] = index;
  }
  ++metrics_.slot_map_refreshes;
  Publish();
  return true;
}

void RedisClusterClient::Loop::Publish() {
  absl::MutexLock l(&owner_.mu_);
  owner_.primaries_ = primaries_;
  owner_.slot_owner_ = slot_owner_;
}

void RedisClusterClient::Loop::Route(std::shared_ptr<Request> req) {
  if (!req->node.empty()) {
    const std::string node = req->node;
    Dispatch(std::move(req), node, false);
    return;
  }
  const int owner = slot_owner_[req->slot];
  if (owner < 0) {
    RequestRefresh();
    const int slot = req->slot;
    Finish(req, absl::UnavailableError(
                    absl::StrCat("redis: slot ", slot, " is not served by any primary")));
    return;
  }
  const std::string address = primaries_[owner];
  Dispatch(std::move(req), address, false);
}

void RedisClusterClient::Loop::Dispatch(std::shared_ptr<Request> req, const std::string& address,
                                        bool asking) {
  if (shutting_down_) {
    Finish(req, absl::CancelledError("redis client shut down"));
    return;
  }
  if (Now() >= req->deadline) {
    Finish(req,
           absl::DeadlineExceededError(absl::StrCat("redis ", address, ": command timed out after ",
                                                    req->attempts, " redirections or retries")));
    return;
  }
  absl::StatusOr<RedisConnection*> conn = ConnectionTo(address);
  if (!conn.ok()) {
    OnNotSent(req, conn.status());
    return;
  }
  if (asking) {
    (*conn)->Enqueue({FormatCommand({"ASKING"}), nullptr, req->deadline, false, nullptr, nullptr});
  }
  const SteadyTime deadline = req->deadline;
  std::string wire = req->wire;
  int* depth = nullptr;
  if (req->info) {
    req->info->address = address;
    req->info->redirects = req->attempts;
    depth = &req->info->pipeline_depth;
  }
  (*conn)->Enqueue(
      {std::move(wire),
       [this, req, address](absl::StatusOr<Reply> r) { OnReply(req, address, std::move(r)); },
       deadline, req->wait, depth,
       [this, req](absl::StatusOr<Reply> r) { OnNotSent(req, r.status()); }});
}

void RedisClusterClient::Loop::OnNotSent(const std::shared_ptr<Request>& req, absl::Status error) {
  if (cluster_mode_) {
    RequestRefresh();
    // Nothing was written, so a slot-routed command can safely go again, to whichever node the
    // refreshed map names: after a failover the map may still name the dead primary (read before
    // the promotion, or from a node that had not heard of it yet). Not sooner than the next
    // refresh can run; Dispatch ends it at its deadline.
    if (req->node.empty() && ++req->attempts <= options_.max_redirects) {
      ++metrics_.unreachable_retries;
      metrics_dirty_ = true;
      timers_.emplace(Now() + ToChrono(std::max(options_.retry_backoff * req->attempts,
                                                absl::FromChrono(kMinRefreshInterval))),
                      [this, req]() { Route(req); });
      return;
    }
  }
  Finish(req, std::move(error));
}

void RedisClusterClient::Loop::OnReply(const std::shared_ptr<Request>& req,
                                       const std::string& address, absl::StatusOr<Reply> result) {
  if (!result.ok()) {
    if (cluster_mode_) RequestRefresh();
    Finish(req, std::move(result));
    return;
  }
  backoff_.erase(address);
  const Reply& reply = *result;
  if (!reply.is_error() || !req->node.empty() || !cluster_mode_) {
    Finish(req, std::move(result));
    return;
  }
  const bool moved = absl::StartsWith(reply.str, "MOVED ");
  const bool ask = absl::StartsWith(reply.str, "ASK ");
  const bool tryagain = absl::StartsWith(reply.str, "TRYAGAIN");
  const bool clusterdown = absl::StartsWith(reply.str, "CLUSTERDOWN");
  if (!moved && !ask && !tryagain && !clusterdown) {
    Finish(req, std::move(result));
    return;
  }
  if (moved) ++metrics_.moved;
  if (ask) ++metrics_.ask;
  if (tryagain) ++metrics_.tryagain;
  if (clusterdown) ++metrics_.clusterdown;
  metrics_dirty_ = true;
  if (++req->attempts > options_.max_redirects) {
    Finish(req, absl::UnavailableError(
                    absl::StrCat("redis ", address, ": gave up after ", options_.max_redirects,
                                 " redirections or retries; last answer: ", reply.str)));
    return;
  }
  if (moved || ask) {
    int slot = 0;
    std::string target;
    if (!ParseRedirect(reply.str, address, &slot, &target)) {
      Finish(req, std::move(result));
      return;
    }
    if (moved) {
      auto it = std::lower_bound(primaries_.begin(), primaries_.end(), target);
      if (it == primaries_.end() || *it != target) {
        // A node the map does not know yet: add it, keeping the list sorted.
        const int index = static_cast<int>(it - primaries_.begin());
        primaries_.insert(it, target);
        for (int& o : slot_owner_) {
          if (o >= index) ++o;
        }
      }
      slot_owner_[slot] = static_cast<int>(
          std::lower_bound(primaries_.begin(), primaries_.end(), target) - primaries_.begin());
      Publish();
      RequestRefresh();
    }
    Dispatch(req, target, ask);
    return;
  }
  if (clusterdown) RequestRefresh();
  timers_.emplace(Now() + ToChrono(options_.retry_backoff * req->attempts),
                  [this, req]() { Route(req); });
}

void RedisClusterClient::Loop::Finish(const std::shared_ptr<Request>& req,
                                      absl::StatusOr<Reply> result) {
  if (!req->internal) {
    ++metrics_.commands;
    if (!result.ok()) ++metrics_.errors;
    if (result.status().code() == absl::StatusCode::kDeadlineExceeded) ++metrics_.timeouts;
    // Published before the callback runs, so that a caller who saw its reply sees it counted.
    PublishMetrics();
  }
  RedisClusterClient::Callback done = std::move(req->done);
  req->done = nullptr;
  if (done) done(std::move(result));
}

absl::StatusOr<RedisConnection*> RedisClusterClient::Loop::ConnectionTo(
    const std::string& address) {
  const SteadyTime now = Now();
  auto it = connections_.find(address);
  if (it != connections_.end()) {
    if (!it->second->closed()) return it->second.get();
    Retire(it, now);  // closed earlier in this turn of the loop
  }
  if (auto b = backoff_.find(address); b != backoff_.end() && now < b->second.next_attempt) {
    const auto wait =
        std::chrono::duration_cast<std::chrono::milliseconds>(b->second.next_attempt - now);
    return absl::UnavailableError(absl::StrCat(
        b->second.last_error.message(), " (next connection attempt in ", wait.count(), " ms)"));
  }
  RedisConnection::Observer observer;
  observer.on_batch = [this](int depth) {
    ++metrics_.round_trips;
    metrics_.max_pipeline_depth =
        std::max<uint64_t>(metrics_.max_pipeline_depth, static_cast<uint64_t>(depth));
    int bucket = 0;
    while (bucket < 8 && (2 << bucket) <= depth) ++bucket;
    ++metrics_.pipeline_depth_histogram[bucket];
    metrics_dirty_ = true;
  };
  observer.on_latency = [this, address](int64_t micros) {
    RedisClientMetrics::Latency& l = metrics_.latency_by_node[address];
    ++l.count;
    l.total_micros += static_cast<uint64_t>(micros);
    l.max_micros = std::max<uint64_t>(l.max_micros, static_cast<uint64_t>(micros));
    metrics_dirty_ = true;
  };
  observer.on_wait = [this](bool enough) {
    ++metrics_.waits;
    if (!enough) ++metrics_.wait_shortfalls;
    metrics_dirty_ = true;
  };
  auto conn = std::make_unique<RedisConnection>(
      address,
      RedisConnection::Limits{options_.max_batch_commands, options_.max_batch_bytes,
                              options_.wait_replicas},
      std::move(observer));
  conn->Start(options_.password, now + ToChrono(options_.connect_timeout));
  ++metrics_.connects;
  metrics_dirty_ = true;
  if (conn->closed()) {
    ++metrics_.connect_failures;
    Backoff& b = backoff_[address];
    b.delay = ToChrono(options_.reconnect_backoff_min);
    b.next_attempt = now + b.delay;
    b.last_error = conn->error();
    return conn->error();
  }
  RedisConnection* raw = conn.get();
  connections_.emplace(address, std::move(conn));
  by_fd_[raw->fd()] = raw;
  return raw;
}

void RedisClusterClient::Loop::MaybeStartRefresh(SteadyTime now) {
  if (!refresh_wanted_ || refresh_in_flight_ || !cluster_mode_ || shutting_down_) return;
  if (now < last_refresh_ + kMinRefreshInterval) return;
  refresh_wanted_ = false;
  refresh_in_flight_ = true;
  // Ask the nodes we hold an open connection to first, then the other primaries, then the seeds.
  auto candidates = std::make_shared<std::vector<std::string>>();
  std::set<std::string> seen;
  for (const auto& [address, conn] : connections_) {
    if (conn->ready() && seen.insert(address).second) candidates->push_back(address);
  }
  for (const std::string& a : primaries_) {
    if (seen.insert(a).second) candidates->push_back(a);
  }
  for (const std::string& a : seeds_) {
    if (seen.insert(a).second) candidates->push_back(a);
  }
  TryRefresh(std::move(candidates), 0);
}

void RedisClusterClient::Loop::TryRefresh(std::shared_ptr<std::vector<std::string>> candidates,
                                          size_t index) {
  if (index >= candidates->size() || shutting_down_) {
    refresh_in_flight_ = false;
    last_refresh_ = Now();
    return;
  }
  auto req = std::make_shared<Request>();
  req->wire = FormatCommand({"CLUSTER", "SLOTS"});
  req->node = (*candidates)[index];
  req->deadline = Now() + ToChrono(options_.command_timeout);
  req->internal = true;
  req->done = [this, candidates, index](absl::StatusOr<Reply> r) {
    if (r.ok() && ApplySlots(*r, (*candidates)[index])) {
      refresh_in_flight_ = false;
      last_refresh_ = Now();
      return;
    }
    TryRefresh(candidates, index + 1);
  };
  Route(std::move(req));
}

void RedisClusterClient::Loop::EachPrimary(std::vector<std::string> args,
                                           std::function<void(std::vector<NodeReply>)> done) {
  struct Gather {
    std::vector<NodeReply> replies;
    size_t remaining = 0;
    std::function<void(std::vector<NodeReply>)> done;
  };
  auto gather = std::make_shared<Gather>();
  gather->remaining = primaries_.size();
  gather->done = std::move(done);
  if (primaries_.empty()) {
    gather->done({});
    return;
  }
  const std::string wire = FormatCommand(args);
  for (size_t i = 0; i < primaries_.size(); ++i) {
    gather->replies.push_back(NodeReply{primaries_[i], absl::UnknownError("")});
  }
  const std::vector<std::string> primaries = primaries_;
  for (size_t i = 0; i < primaries.size(); ++i) {
    auto req = std::make_shared<Request>();
    req->wire = wire;
    req->node = primaries[i];
    req->deadline = Now() + ToChrono(options_.command_timeout);
    req->done = [gather, i](absl::StatusOr<Reply> r) {
      gather->replies[i].reply = std::move(r);
      if (--gather->remaining == 0) gather->done(std::move(gather->replies));
    };
    Route(std::move(req));
  }
}

void RedisClusterClient::Loop::RunCompletions() {
  while (!completions_.empty()) {
    std::vector<RedisConnection::Completion> batch;
    batch.swap(completions_);
    for (RedisConnection::Completion& c : batch) c.handler(std::move(c.result));
  }
}

void RedisClusterClient::Loop::SweepClosed(SteadyTime now) {
  for (auto it = connections_.begin(); it != connections_.end();) {
    it = it->second->closed() ? Retire(it, now) : std::next(it);
  }
}

std::map<std::string, std::unique_ptr<RedisConnection>>::iterator RedisClusterClient::Loop::Retire(
    std::map<std::string, std::unique_ptr<RedisConnection>>::iterator it, SteadyTime now) {
  RedisConnection& conn = *it->second;
  absl::Status error = conn.error();
  if (error.code() == absl::StatusCode::kDeadlineExceeded) {
    error = absl::UnavailableError(
        absl::StrCat("redis ", conn.address(), ": connection closed after a command timed out"));
  }
  for (RedisConnection::Command& c : conn.TakeUnsent()) {
    if (c.not_sent) {
      completions_.push_back({std::move(c.not_sent), error});
    } else if (c.handler) {
      completions_.push_back({std::move(c.handler), error});
    }
  }
  if (!conn.connected()) ++metrics_.connect_failures;
  metrics_dirty_ = true;
  Backoff& b = backoff_[it->first];
  b.delay = b.delay.count() == 0 ? ToChrono(options_.reconnect_backoff_min)
                                 : std::min(b.delay * 2, ToChrono(options_.reconnect_backoff_max));
  b.next_attempt = now + b.delay;
  b.last_error = conn.error();
  if (conn.fd() >= 0) {
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, conn.fd(), nullptr);
    by_fd_.erase(conn.fd());
    interest_.erase(conn.fd());
  }
  if (cluster_mode_) RequestRefresh();
  return connections_.erase(it);
}

void RedisClusterClient::Loop::UpdateInterest() {
  for (const auto& [address, conn] : connections_) {
    if (conn->closed() || conn->fd() < 0) continue;
    const uint32_t want = conn->WantedEvents();
    auto it = interest_.find(conn->fd());
    if (it != interest_.end() && it->second == want) continue;
    epoll_event ev{};
    ev.events = want;
    ev.data.fd = conn->fd();
    epoll_ctl(epoll_fd_, it == interest_.end() ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, conn->fd(), &ev);
    interest_[conn->fd()] = want;
  }
}

int RedisClusterClient::Loop::TimeoutMillis(SteadyTime now) const {
  std::optional<SteadyTime> next;
  auto consider = [&](SteadyTime t) {
    if (!next || t < *next) next = t;
  };
  for (const auto& [address, conn] : connections_) {
    if (auto d = conn->NextDeadline()) consider(*d);
  }
  if (!timers_.empty()) consider(timers_.begin()->first);
  if (refresh_wanted_ && !refresh_in_flight_) consider(last_refresh_ + kMinRefreshInterval);
  if (!next) return 1000;
  if (*next <= now) return 0;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*next - now).count() + 1;
  return static_cast<int>(std::min<int64_t>(ms, 1000));
}

void RedisClusterClient::Loop::Run() {
  // A policy refused here was refused to the serving threads too, which say so in the log.
  (void)SetUpWorkerThread("rl-redis-io", options_.io_thread_scheduling);
  epoll_event wake{};
  wake.events = EPOLLIN;
  wake.data.fd = owner_.wake_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, owner_.wake_fd_, &wake);
  epoll_event events[64];
  while (true) {
    int timeout = TimeoutMillis(Now());
    {
      // Before sleeping: tell Submit which primaries' replies will wake this thread, and do not
      // sleep on tasks queued since the last turn (their Submit may have counted on a reply that
      // has come since).
      absl::MutexLock l(&owner_.mu_);
      owner_.awaiting_reply_.assign(primaries_.size(), false);
      for (size_t i = 0; i < primaries_.size(); ++i) {
        auto it = connections_.find(primaries_[i]);
        if (it != connections_.end() && it->second->awaiting_replies(kBatchesAhead)) {
          owner_.awaiting_reply_[i] = true;
        }
      }
      if (!owner_.tasks_.empty()) timeout = 0;
    }
    const int n = epoll_wait(epoll_fd_, events, 64, timeout);
    SteadyTime now = Now();
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == owner_.wake_fd_) {
        uint64_t value;
        while (::read(fd, &value, sizeof value) > 0) {
        }
        continue;
      }
      auto it = by_fd_.find(fd);
      if (it != by_fd_.end()) it->second->OnEvents(events[i].events, now, &completions_);
    }
    RunCompletions();
    std::vector<std::function<void(Loop&)>> tasks;
    bool stopping;
    {
      absl::MutexLock l(&owner_.mu_);
      tasks.swap(owner_.tasks_);
      owner_.wake_pending_ = false;
      stopping = owner_.stopping_;
    }
    for (auto& task : tasks) task(*this);
    now = Now();
    while (!timers_.empty() && timers_.begin()->first <= now) {
      std::function<void()> timer = std::move(timers_.begin()->second);
      timers_.erase(timers_.begin());
      timer();
    }
    MaybeStartRefresh(now);
    // Write what the steps above queued; handlers that ran may queue more, so repeat until quiet.
    do {
      now = Now();
      for (auto& [address, conn] : connections_) {
        conn->CheckDeadlines(now, &completions_);
        conn->Flush(now, &completions_);
      }
      SweepClosed(now);
      RunCompletions();
      MaybeStartRefresh(now);
    } while (!completions_.empty());
    UpdateInterest();
    PublishMetrics();
    if (stopping) {
      Shutdown();
      return;
    }
  }
}

void RedisClusterClient::Loop::Shutdown() {
  shutting_down_ = true;
  const SteadyTime now = Now();
  std::vector<std::function<void(Loop&)>> tasks;
  {
    absl::MutexLock l(&owner_.mu_);
    tasks.swap(owner_.tasks_);
  }
  for (auto& task : tasks) task(*this);
  while (!timers_.empty()) {
    std::function<void()> timer = std::move(timers_.begin()->second);
    timers_.erase(timers_.begin());
    timer();
  }
  for (auto& [address, conn] : connections_) {
    conn->Fail(absl::CancelledError("redis client shut down"), now, &completions_);
    for (RedisConnection::Command& c : conn->TakeUnsent()) {
      if (c.handler) completions_.push_back({std::move(c.handler), conn->error()});
    }
  }
  RunCompletions();
  connections_.clear();
  absl::MutexLock l(&owner_.mu_);
  owner_.metrics_ = metrics_;
}

}  // namespace ratelimit::redis
