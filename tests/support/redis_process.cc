#include "tests/support/redis_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "storage/file_util.h"

namespace ratelimit::testing {
namespace {

// A socket bound to 127.0.0.1:`port` (0: any), or -1.
int BindLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

int FreeRedisPort() {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = BindLoopback(0);
    if (fd < 0) continue;
    sockaddr_in addr{};
    socklen_t len = sizeof addr;
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    const int port = ntohs(addr.sin_port);
    close(fd);
    if (port + 10000 > 65535) continue;
    const int bus = BindLoopback(port + 10000);
    if (bus < 0) continue;
    close(bus);
    return port;
  }
  return -1;
}

namespace {

redis::Reply Convert(const redisReply& r) {
  redis::Reply out;
  switch (r.type) {
    case REDIS_REPLY_STRING:
      out.type = redis::Reply::Type::kString;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = redis::Reply::Type::kStatus;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = redis::Reply::Type::kError;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = redis::Reply::Type::kInteger;
      out.integer = r.integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = redis::Reply::Type::kArray;
      for (size_t i = 0; i < r.elements; ++i) out.elements.push_back(Convert(*r.element[i]));
      break;
    default:
      out.type = redis::Reply::Type::kNil;
  }
  return out;
}

// A reply as redis-cli prints it when its output is not a terminal: a string, status or error as
// its text, an integer in decimal, nil as nothing, an array's elements one per line.
void AppendAsCliPrints(const redis::Reply& reply, std::string* out) {
  switch (reply.type) {
    case redis::Reply::Type::kString:
    case redis::Reply::Type::kStatus:
    case redis::Reply::Type::kError:
      out->append(reply.str);
      break;
    case redis::Reply::Type::kInteger:
      absl::StrAppend(out, reply.integer);
      break;
    case redis::Reply::Type::kArray:
      for (size_t i = 0; i < reply.elements.size(); ++i) {
        if (i > 0) out->push_back('\n');
        AppendAsCliPrints(reply.elements[i], out);
      }
      break;
    case redis::Reply::Type::kNil:
      break;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<HiredisConnection>> HiredisConnection::Connect(
    const std::string& host, int port, absl::Duration timeout) {
  const timeval tv = absl::ToTimeval(timeout);
  redisContext* c = redisConnectWithTimeout(host.c_str(), port, tv);
  if (c == nullptr || c->err != 0) {
    const std::string why = c != nullptr ? c->errstr : "out of memory";
    if (c != nullptr) redisFree(c);
    return absl::UnavailableError(absl::StrCat("redis ", host, ":", port, ": ", why));
  }
  redisSetTimeout(c, tv);
  return std::unique_ptr<HiredisConnection>(new HiredisConnection(c));
}

HiredisConnection::~HiredisConnection() { redisFree(context_); }

absl::StatusOr<redis::Reply> HiredisConnection::Command(absl::Span<const std::string> argv) {
  std::vector<const char*> args;
  std::vector<size_t> lens;
  for (const std::string& a : argv) {
    args.push_back(a.data());
    lens.push_back(a.size());
  }
  absl::MutexLock lock(&mu_);
  auto* reply = static_cast<redisReply*>(
      redisCommandArgv(context_, static_cast<int>(args.size()), args.data(), lens.data()));
  if (reply == nullptr) {
    return absl::UnavailableError(absl::StrCat("redis: ", context_->errstr));
  }
  redis::Reply out = Convert(*reply);
  freeReplyObject(reply);
  return out;
}

absl::StatusOr<std::unique_ptr<RedisServer>> RedisServer::Start(
    std::vector<std::string> extra_args) {
  absl::Status last = absl::UnavailableError("no free loopback port");
  for (int attempt = 0; attempt < 5; ++attempt) {
    const int port = FreeRedisPort();
    if (port < 0) return absl::UnavailableError("no free loopback port");
    absl::StatusOr<std::unique_ptr<RedisServer>> server = StartOn(port, extra_args);
    if (server.ok() || !absl::IsAlreadyExists(server.status())) return server;
    last = server.status();  // lost a race for the port: try another
  }
  return last;
}

absl::StatusOr<std::unique_ptr<RedisServer>> RedisServer::StartOn(
    int port, const std::vector<std::string>& extra_args) {
  auto server = std::unique_ptr<RedisServer>(new RedisServer());
  server->port_ = port;
  std::vector<std::string> args = {"redis-server",
                                   "--port",
                                   std::to_string(port),
                                   "--bind",
                                   "127.0.0.1",
                                   "--dir",
                                   server->dir(),
                                   "--logfile",
                                   server->dir() + "/redis.log",
                                   "--save",
                                   "",
                                   "--appendonly",
                                   "no",
                                   "--daemonize",
                                   "no"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  // Everything the child needs is prepared before fork: only exec-safe calls after it.
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  server->pid_ = fork();
  if (server->pid_ < 0) return absl::InternalError("fork failed");
  if (server->pid_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    const int null_fd = open("/dev/null", O_RDWR);
    if (null_fd >= 0) {
      dup2(null_fd, 0);
      dup2(null_fd, 1);
    }
    execvp("redis-server", argv.data());
    _exit(127);
  }
  bool exited = false;
  const bool up = Eventually(
      [&] {
        int status;
        if (waitpid(server->pid_, &status, WNOHANG) == server->pid_) {
          server->pid_ = -1;
          exited = true;
          return true;
        }
        // Redis logs this line once it listens on its port (and, in cluster mode, its bus port).
        if (!absl::StrContains(server->Log(), "Ready to accept connections")) return false;
        absl::StatusOr<std::string> pong = server->Cli({"PING"});
        // A server started with --requirepass answers NOAUTH: it is up all the same.
        return pong.ok() && (*pong == "PONG" || absl::StrContains(*pong, "NOAUTH"));
      },
      absl::Seconds(20));
  if (up && !exited) return server;
  const std::string log = server->Log();
  if (absl::StrContains(log, "Address already in use")) {
    return absl::AlreadyExistsError(absl::StrCat("port ", port, " is taken: ", log));
  }
  return absl::InternalError(absl::StrCat("redis-server did not start: ", log));
}

RedisServer::~RedisServer() {
  if (pid_ > 0) Kill9();
}

absl::StatusOr<std::string> RedisServer::Cli(const std::vector<std::string>& args,
                                             const std::string& password) const {
  // A connection per call, as a redis-cli run would be, but without the process: a test polls
  // a cluster through dozens of these while it forms.
  absl::StatusOr<std::unique_ptr<HiredisConnection>> c =
      HiredisConnection::Connect("127.0.0.1", port_, absl::Seconds(10));
  if (!c.ok()) return c.status();
  if (!password.empty()) {
    // As with redis-cli -a: a refused AUTH shows in the command's own answer (NOAUTH).
    absl::StatusOr<redis::Reply> auth = (*c)->Command({"AUTH", password});
    if (!auth.ok()) return auth.status();
  }
  absl::StatusOr<redis::Reply> reply = (*c)->Command(args);
  if (!reply.ok()) return reply.status();
  std::string out;
  AppendAsCliPrints(*reply, &out);
  return out;
}

void RedisServer::Pause() {
  if (pid_ <= 0) return;
  kill(pid_, SIGSTOP);
  paused_ = true;
}

void RedisServer::Resume() {
  if (pid_ <= 0) return;
  kill(pid_, SIGCONT);
  paused_ = false;
}

void RedisServer::Kill9() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  if (paused_) kill(pid_, SIGCONT);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  paused_ = false;
}

std::string RedisServer::Log() const {
  return ReadFileToString(dir_.File("redis.log")).value_or("");
}

absl::StatusOr<std::unique_ptr<RedisCluster>> RedisCluster::Start(int primaries, int replicas) {
  auto cluster = std::unique_ptr<RedisCluster>(new RedisCluster());
  for (int i = 0; i < primaries * (1 + replicas); ++i) {
    absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start(
        {"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
         "--cluster-node-timeout", std::to_string(absl::ToInt64Milliseconds(kClusterNodeTimeout)),
         "--repl-diskless-sync-delay", "0"});
    if (!server.ok()) return server.status();
    cluster->servers_.push_back(std::move(*server));
  }
  if (absl::Status s = cluster->Form(primaries); !s.ok()) return s;
  if (absl::Status s = cluster->WaitHealthy(); !s.ok()) return s;
  if (absl::Status s = cluster->WaitReplicasInSync(); !s.ok()) return s;
  return cluster;
}

std::string RedisCluster::seeds() const {
  std::vector<std::string> out;
  for (const auto& s : servers_) out.push_back(s->address());
  return absl::StrJoin(out, ",");
}

int RedisCluster::IndexOf(const std::string& address) const {
  for (int i = 0; i < size(); ++i) {
    if (servers_[i]->address() == address) return i;
  }
  return -1;
}

namespace {

absl::StatusOr<std::vector<RedisCluster::Node>> ParseNodes(const std::string& text) {
  std::vector<RedisCluster::Node> nodes;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() < 8) return absl::InternalError(absl::StrCat("bad CLUSTER NODES line: ", line));
    RedisCluster::Node n;
    n.id = f[0];
    n.address = f[1].substr(0, f[1].find('@'));
    n.primary = absl::StrContains(f[2], "master");
    n.failed = absl::StrContains(f[2], "fail");
    n.myself = absl::StrContains(f[2], "myself");
    if (f[3] != "-") n.primary_id = f[3];
    for (size_t i = 8; i < f.size(); ++i) {
      if (absl::StartsWith(f[i], "[")) continue;  // a slot being migrated or imported
      std::vector<std::string> range = absl::StrSplit(f[i], '-');
      int lo = 0, hi = 0;
      if (!absl::SimpleAtoi(range[0], &lo)) continue;
      hi = lo;
      if (range.size() == 2 && !absl::SimpleAtoi(range[1], &hi)) continue;
      n.slots.emplace_back(lo, hi);
    }
    nodes.push_back(std::move(n));
  }
  return nodes;
}

}  // namespace

absl::StatusOr<std::vector<RedisCluster::Node>> RedisCluster::Nodes() const {
  for (const auto& s : servers_) {
    if (!s->running()) continue;
    absl::StatusOr<std::string> out = s->Cli({"CLUSTER", "NODES"});
    if (!out.ok()) return out.status();
    return ParseNodes(*out);
  }
  return absl::UnavailableError("no running node");
}

absl::StatusOr<int> RedisCluster::PrimaryOf(int slot) const {
  absl::StatusOr<std::vector<Node>> nodes = Nodes();
  if (!nodes.ok()) return nodes.status();
  for (const Node& n : *nodes) {
    if (!n.primary || n.failed) continue;
    for (auto [lo, hi] : n.slots) {
      if (slot >= lo && slot <= hi) return IndexOf(n.address);
    }
  }
  return absl::NotFoundError(absl::StrCat("no primary serves slot ", slot));
}

absl::StatusOr<int> RedisCluster::ReplicaOf(int primary_index) const {
  absl::StatusOr<std::string> id = IdOf(primary_index);
  if (!id.ok()) return id.status();
  for (int i = 0; i < size(); ++i) {
    if (i == primary_index || !servers_[i]->running()) continue;
    absl::StatusOr<std::string> text = servers_[i]->Cli({"CLUSTER", "NODES"});
    if (!text.ok()) return text.status();
    absl::StatusOr<std::vector<Node>> nodes = ParseNodes(*text);
    if (!nodes.ok()) return nodes.status();
    for (const Node& n : *nodes) {
      if (n.myself && !n.primary && n.primary_id == *id) return i;
    }
  }
  return absl::NotFoundError(absl::StrCat("no replica of ", servers_[primary_index]->address()));
}

absl::StatusOr<std::string> RedisCluster::IdOf(int index) const {
  absl::StatusOr<std::string> id = servers_[index]->Cli({"CLUSTER", "MYID"});
  if (!id.ok()) return id.status();
  return *id;
}

absl::Status RedisCluster::WaitReplicasInSync(absl::Duration timeout) const {
  std::string last;
  const bool ok = Eventually(
      [&] {
        for (const auto& s : servers_) {
          if (!s->running()) continue;
          absl::StatusOr<std::string> info = s->Cli({"INFO", "replication"});
          if (!info.ok()) {
            last = absl::StrCat(s->address(), ": ", info.status().ToString());
            return false;
          }
          if (absl::StrContains(*info, "role:slave") &&
              !absl::StrContains(*info, "master_link_status:up")) {
            last = absl::StrCat(s->address(), " not in sync: ", *info);
            return false;
          }
        }
        return true;
      },
      timeout);
  if (!ok) return absl::DeadlineExceededError("replicas not in sync: " + last);
  return absl::OkStatus();
}

absl::Status RedisCluster::WaitHealthy(absl::Duration timeout) const {
  std::string last;
  const bool ok = Eventually(
      [&] {
        std::set<std::string> views;
        for (const auto& s : servers_) {
          if (!s->running()) continue;
          absl::StatusOr<std::string> info = s->Cli({"CLUSTER", "INFO"});
          if (!info.ok() || !absl::StrContains(*info, "cluster_state:ok")) {
            last = absl::StrCat(s->address(),
                                " not ok: ", info.ok() ? *info : info.status().ToString());
            return false;
          }
          absl::StatusOr<std::string> text = s->Cli({"CLUSTER", "NODES"});
          if (!text.ok()) return false;
          absl::StatusOr<std::vector<Node>> nodes = ParseNodes(*text);
          if (!nodes.ok()) return false;
          std::vector<std::string> view;
          for (const Node& n : *nodes) {
            if (!n.primary || n.slots.empty() || n.failed) continue;
            std::string entry = n.address;
            for (auto [lo, hi] : n.slots) absl::StrAppend(&entry, " ", lo, "-", hi);
            view.push_back(entry);
          }
          std::sort(view.begin(), view.end());
          views.insert(absl::StrJoin(view, ","));
        }
        if (views.size() != 1) {
          last = absl::StrCat("nodes disagree: ", absl::StrJoin(views, " | "));
          return false;
        }
        return true;
      },
      timeout);
  if (!ok) return absl::DeadlineExceededError("cluster not healthy: " + last);
  return absl::OkStatus();
}

namespace {

// Sends `args` to `server`; an error unless it answers OK (the answer named in the error).
absl::Status CommandOk(const RedisServer& server, const std::vector<std::string>& args) {
  absl::StatusOr<std::string> answer = server.Cli(args);
  if (!answer.ok()) return answer.status();
  if (*answer != "OK") {
    return absl::InternalError(absl::StrCat(absl::StrJoin(args, " "), ": ", *answer));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RedisCluster::Form(int primaries) {
  // The slots split among the primaries as redis-cli --cluster create splits them, each
  // primary's range given with CLUSTER ADDSLOTSRANGE, and a distinct config epoch per node.
  const double per_primary = 16384.0 / primaries;
  double cursor = 0;
  int first = 0;
  for (int i = 0; i < primaries; ++i) {
    int last = static_cast<int>(std::lround(cursor + per_primary - 1));
    if (last > 16383 || i == primaries - 1) last = 16383;
    if (last < first) last = first;
    if (absl::Status s = CommandOk(*servers_[i], {"CLUSTER", "ADDSLOTSRANGE", std::to_string(first),
                                                  std::to_string(last)});
        !s.ok()) {
      return s;
    }
    first = last + 1;
    cursor += per_primary;
  }
  for (int i = 0; i < size(); ++i) {
    if (absl::Status s =
            CommandOk(*servers_[i], {"CLUSTER", "SET-CONFIG-EPOCH", std::to_string(i + 1)});
        !s.ok()) {
      return s;
    }
  }
  // The first node meets every other; gossip then introduces them to each other.
  for (int i = 1; i < size(); ++i) {
    if (absl::Status s = CommandOk(
            *servers_[0], {"CLUSTER", "MEET", "127.0.0.1", std::to_string(servers_[i]->port())});
        !s.ok()) {
      return s;
    }
  }
  std::string last_view;
  const bool joined = Eventually(
      [&] {
        for (const auto& s : servers_) {
          absl::StatusOr<std::string> text = s->Cli({"CLUSTER", "NODES"});
          if (!text.ok()) return false;
          absl::StatusOr<std::vector<Node>> nodes = ParseNodes(*text);
          last_view = *text;
          if (!nodes.ok() || static_cast<int>(nodes->size()) != size()) return false;
          if (absl::StrContains(*text, "handshake") || absl::StrContains(*text, "noaddr")) {
            return false;
          }
        }
        return true;
      },
      absl::Seconds(60));
  if (!joined) return absl::DeadlineExceededError("cluster nodes did not meet: " + last_view);
  // Replica j follows primary j mod `primaries`.
  for (int i = primaries; i < size(); ++i) {
    absl::StatusOr<std::string> primary_id = IdOf((i - primaries) % primaries);
    if (!primary_id.ok()) return primary_id.status();
    if (absl::Status s = CommandOk(*servers_[i], {"CLUSTER", "REPLICATE", *primary_id}); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace ratelimit::testing
