#include "tests/support/redis_standalone.h"

#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ratelimit::testing {
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

// A port that was free a moment ago (the kernel's pick for port 0).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

void Stop(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  int status = 0;
  while (absl::Now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid) return;
    absl::SleepFor(absl::Milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
}

}  // namespace

bool RedisServerInstalled() { return std::system("command -v redis-server >/dev/null 2>&1") == 0; }

absl::StatusOr<std::unique_ptr<HiredisConnection>> HiredisConnection::Connect(
    const std::string& host, int port) {
  const timeval timeout{5, 0};
  redisContext* c = redisConnectWithTimeout(host.c_str(), port, timeout);
  if (c == nullptr || c->err != 0) {
    const std::string why = c != nullptr ? c->errstr : "out of memory";
    if (c != nullptr) redisFree(c);
    return absl::UnavailableError(absl::StrCat("redis ", host, ":", port, ": ", why));
  }
  redisSetTimeout(c, timeout);
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

absl::StatusOr<std::unique_ptr<RedisStandalone>> RedisStandalone::Start(const std::string& dir) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    const int port = FreePort();
    if (port <= 0) return absl::InternalError("no free port");
    std::vector<std::string> args = {"redis-server",
                                     "--port",
                                     absl::StrCat(port),
                                     "--bind",
                                     "127.0.0.1",
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--dir",
                                     dir,
                                     "--logfile",
                                     dir + "/redis.log",
                                     "--daemonize",
                                     "no"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = fork();
    if (pid < 0) return absl::InternalError("fork failed");
    if (pid == 0) {
      execvp("redis-server", argv.data());
      _exit(127);
    }
    std::unique_ptr<RedisStandalone> server(new RedisStandalone());
    server->pid_ = pid;
    server->port_ = port;
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline) {
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        server->pid_ = -1;  // exited (the port was taken?): try another
        break;
      }
      auto connection = server->Connect();
      if (connection.ok()) {
        const std::string ping[] = {"PING"};
        auto pong = (*connection)->Command(ping);
        if (pong.ok() && pong->str == "PONG") return server;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    if (server->pid_ > 0) return absl::DeadlineExceededError("redis-server did not answer PING");
  }
  return absl::UnavailableError("redis-server did not start (see redis.log)");
}

RedisStandalone::~RedisStandalone() { Stop(pid_); }

}  // namespace ratelimit::testing
