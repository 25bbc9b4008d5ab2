#include "tests/support/redis_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

}  // namespace

absl::StatusOr<std::unique_ptr<RedisServer>> RedisServer::Start(
    std::vector<std::string> extra_args) {
  std::string last_log;
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto server = std::unique_ptr<RedisServer>(new RedisServer());
    server->port_ = FreeRedisPort();
    if (server->port_ < 0) return absl::UnavailableError("no free loopback port");
    std::vector<std::string> args = {"redis-server",
                                     "--port",
                                     std::to_string(server->port_),
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
          absl::StatusOr<std::string> pong = server->Cli({"PING"});
          // A server started with --requirepass answers NOAUTH: it is up all the same.
          return pong.ok() && (*pong == "PONG" || absl::StrContains(*pong, "NOAUTH"));
        },
        absl::Seconds(20));
    if (up && !exited) return server;
    last_log = server->Log();
    // Lost a race for the port, or a real failure: try another port, a few times.
  }
  return absl::InternalError(absl::StrCat("redis-server did not start: ", last_log));
}

RedisServer::~RedisServer() {
  if (pid_ > 0) Kill9();
}

absl::StatusOr<std::string> RedisServer::Cli(const std::vector<std::string>& args,
                                             const std::string& password) const {
  std::string command = absl::StrCat("redis-cli -h 127.0.0.1 -p ", port_,
                                     password.empty() ? "" : " --no-auth-warning -a ",
                                     password.empty() ? "" : ShellQuote(password));
  for (const std::string& a : args) absl::StrAppend(&command, " ", ShellQuote(a));
  auto [code, out] = RunCommand("timeout 10 " + command);
  if (code != 0) {
    return absl::UnavailableError(absl::StrCat("redis-cli exited with ", code, ": ", out));
  }
  return std::string(absl::StripSuffix(out, "\n"));
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
  std::vector<std::string> addresses;
  for (int i = 0; i < primaries * (1 + replicas); ++i) {
    absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start(
        {"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
         "--cluster-node-timeout", std::to_string(absl::ToInt64Milliseconds(kClusterNodeTimeout)),
         "--repl-diskless-sync-delay", "0"});
    if (!server.ok()) return server.status();
    addresses.push_back((*server)->address());
    cluster->servers_.push_back(std::move(*server));
  }
  std::string command = "timeout 60 redis-cli --cluster create";
  for (const std::string& a : addresses) absl::StrAppend(&command, " ", a);
  absl::StrAppend(&command, " --cluster-replicas ", replicas, " --cluster-yes");
  auto [code, out] = RunCommand(command);
  if (code != 0) {
    return absl::InternalError(absl::StrCat("redis-cli --cluster create failed: ", out));
  }
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

}  // namespace ratelimit::testing
