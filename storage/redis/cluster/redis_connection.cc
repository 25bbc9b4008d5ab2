#include "storage/redis/cluster/redis_connection.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include <hiredis/hiredis.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ratelimit::redis {
namespace {

Reply Convert(const redisReply* r) {
  switch (r->type) {
    case REDIS_REPLY_STRING:
      return Reply::String(std::string(r->str, r->len));
    case REDIS_REPLY_STATUS:
      return Reply::Status(std::string(r->str, r->len));
    case REDIS_REPLY_ERROR:
      return Reply::Error(std::string(r->str, r->len));
    case REDIS_REPLY_INTEGER:
      return Reply::Integer(r->integer);
    case REDIS_REPLY_ARRAY: {
      std::vector<Reply> elements;
      elements.reserve(r->elements);
      for (size_t i = 0; i < r->elements; ++i) elements.push_back(Convert(r->element[i]));
      return Reply::Array(std::move(elements));
    }
    default:
      return Reply::Nil();
  }
}

}  // namespace

absl::Status ParseAddress(absl::string_view address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  int p = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &p) || p < 1 || p > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("redis address \"", address, "\": expected host:port"));
  }
  *host = std::string(address.substr(0, colon));
  *port = p;
  return absl::OkStatus();
}

std::string FormatCommand(const std::vector<std::string>& args) {
  // RESP: "*<count>\r\n", then "$<length>\r\n<bytes>\r\n" per argument. Reserved for the
  // longest headers (20 digits), so the command costs one allocation: it is built for every
  // decision sent to Redis.
  constexpr size_t kMaxHeader = 1 + 20 + 2;
  size_t size = kMaxHeader;
  for (const std::string& a : args) size += kMaxHeader + a.size() + 2;
  std::string wire;
  wire.reserve(size);
  absl::StrAppend(&wire, "*", args.size(), "\r\n");
  for (const std::string& a : args) absl::StrAppend(&wire, "$", a.size(), "\r\n", a, "\r\n");
  return wire;
}

RedisConnection::RedisConnection(std::string address, Limits limits, Observer observer)
    : address_(std::move(address)), limits_(limits), observer_(std::move(observer)) {}

RedisConnection::~RedisConnection() {
  if (fd_ >= 0) ::close(fd_);
  if (reader_ != nullptr) redisReaderFree(reader_);
}

absl::Status RedisConnection::Unavailable(absl::string_view what) const {
  return absl::UnavailableError(absl::StrCat("redis ", address_, ": ", what));
}

void RedisConnection::Start(const std::string& password, SteadyTime connect_deadline) {
  connect_deadline_ = connect_deadline;
  std::string host;
  int port = 0;
  if (absl::Status s = ParseAddress(address_, &host, &port); !s.ok()) {
    closed_ = true;
    error_ = Unavailable(s.message());
    return;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port_str = std::to_string(port);
  if (const int rc = getaddrinfo(host.c_str(), port_str.c_str(), &hints, &res); rc != 0) {
    closed_ = true;
    error_ = Unavailable(absl::StrCat("cannot resolve host: ", gai_strerror(rc)));
    return;
  }
  fd_ = ::socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) {
    freeaddrinfo(res);
    closed_ = true;
    error_ = Unavailable(absl::StrCat("socket: ", std::strerror(errno)));
    return;
  }
  const int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const int rc = ::connect(fd_, res->ai_addr, res->ai_addrlen);
  const int err = errno;
  freeaddrinfo(res);
  if (rc != 0 && err != EINPROGRESS) {
    closed_ = true;
    error_ = Unavailable(absl::StrCat("connect: ", std::strerror(err)));
    return;
  }
  connected_ = (rc == 0);
  reader_ = redisReaderCreate();
  if (!password.empty()) {
    unsent_.push_front(Command{FormatCommand({"AUTH", password}), nullptr, connect_deadline, false,
                               nullptr, nullptr});
    auth_pending_ = true;
  }
}

uint32_t RedisConnection::WantedEvents() const {
  if (closed_) return 0;
  uint32_t events = EPOLLIN;
  if (!connected_ || out_offset_ < out_.size() || !unsent_.empty()) events |= EPOLLOUT;
  return events;
}

std::optional<SteadyTime> RedisConnection::NextDeadline() const {
  if (closed_) return std::nullopt;
  std::optional<SteadyTime> next;
  if (!connected_) next = connect_deadline_;
  for (const Command& c : unsent_) {
    if (!next || c.deadline < *next) next = c.deadline;
  }
  for (const InFlight& c : inflight_) {
    if (!next || c.deadline < *next) next = c.deadline;
  }
  return next;
}

void RedisConnection::Enqueue(Command command) { unsent_.push_back(std::move(command)); }

void RedisConnection::OnEvents(uint32_t events, SteadyTime now, std::vector<Completion>* done) {
  if (closed_) return;
  if (!connected_) {
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0) {
      Fail(Unavailable(absl::StrCat("connect: ", std::strerror(err))), now, done);
      return;
    }
    if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0) return;
    connected_ = true;
  }
  if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) ReadAvailable(now, done);
  if (!closed_ && (events & EPOLLOUT)) WriteAvailable(now, done);
}

void RedisConnection::ReadAvailable(SteadyTime now, std::vector<Completion>* done) {
  char buf[64 * 1024];
  bool eof = false;
  while (true) {
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n > 0) {
      redisReaderFeed(reader_, buf, static_cast<size_t>(n));
      if (static_cast<size_t>(n) < sizeof buf) break;
      continue;
    }
    if (n == 0) {
      eof = true;
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    Fail(Unavailable(absl::StrCat("read: ", std::strerror(errno))), now, done);
    return;
  }
  while (true) {
    void* raw = nullptr;
    if (redisReaderGetReply(reader_, &raw) != REDIS_OK) {
      Fail(Unavailable(absl::StrCat("protocol error: ", reader_->errstr)), now, done);
      return;
    }
    if (raw == nullptr) break;
    redisReply* r = static_cast<redisReply*>(raw);
    Reply reply = Convert(r);
    freeReplyObject(r);
    if (inflight_.empty()) {
      Fail(Unavailable("reply without a command"), now, done);
      return;
    }
    InFlight entry = std::move(inflight_.front());
    inflight_.pop_front();
    if (entry.ends_batch) --batches_in_flight_;
    if (observer_.on_latency) {
      observer_.on_latency(
          std::chrono::duration_cast<std::chrono::microseconds>(now - entry.sent).count());
    }
    if (entry.is_wait) {
      const bool enough =
          reply.type == Reply::Type::kInteger && reply.integer >= limits_.wait_replicas;
      if (observer_.on_wait) observer_.on_wait(enough);
      for (Completion& c : held_) {
        if (!enough) {
          c.result = Unavailable(absl::StrCat(
              "write acknowledged by ",
              reply.type == Reply::Type::kInteger ? absl::StrCat(reply.integer) : reply.str,
              " replicas, ", limits_.wait_replicas, " required (WAIT); it may be lost"));
        }
        done->push_back(std::move(c));
      }
      held_.clear();
      continue;
    }
    if (entry.auth) {
      if (reply.is_error()) {
        Fail(absl::UnauthenticatedError(
                 absl::StrCat("redis ", address_, ": authentication failed: ", reply.str)),
             now, done);
        return;
      }
      continue;
    }
    if (!entry.handler) continue;
    if (entry.wait && !reply.is_error()) {
      held_.push_back(Completion{std::move(entry.handler), std::move(reply)});
    } else {
      done->push_back(Completion{std::move(entry.handler), std::move(reply)});
    }
  }
  if (eof) Fail(Unavailable("connection closed by the server"), now, done);
}

void RedisConnection::Flush(SteadyTime now, std::vector<Completion>* done) {
  if (closed_ || !connected_) return;
  WriteAvailable(now, done);
}

void RedisConnection::WriteAvailable(SteadyTime now, std::vector<Completion>* done) {
  if (out_offset_ == out_.size() && !unsent_.empty()) {
    out_.clear();
    out_offset_ = 0;
    int depth = 0;
    std::optional<SteadyTime> wait_deadline;
    while (!unsent_.empty() && depth < limits_.max_batch_commands &&
           (depth == 0 || out_.size() + unsent_.front().wire.size() <= limits_.max_batch_bytes)) {
      Command c = std::move(unsent_.front());
      unsent_.pop_front();
      out_ += c.wire;
      const bool auth = auth_pending_;
      auth_pending_ = false;
      const bool wait = c.wait && limits_.wait_replicas > 0 && c.handler != nullptr;
      if (wait && (!wait_deadline || c.deadline < *wait_deadline)) wait_deadline = c.deadline;
      InFlight entry{std::move(c.handler), c.deadline, now, auth};
      entry.wait = wait;
      entry.batch_depth = c.batch_depth;
      inflight_.push_back(std::move(entry));
      ++depth;
    }
    for (auto it = inflight_.end() - depth; it != inflight_.end(); ++it) {
      if (it->batch_depth != nullptr) *it->batch_depth = depth;
    }
    if (wait_deadline) {
      const int64_t left_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(*wait_deadline - now).count();
      const int64_t timeout_ms = std::max<int64_t>(1, left_ms * 3 / 4);
      out_ += FormatCommand(
          {"WAIT", std::to_string(limits_.wait_replicas), std::to_string(timeout_ms)});
      InFlight entry{nullptr, *wait_deadline, now, false};
      entry.is_wait = true;
      inflight_.push_back(std::move(entry));
    }
    inflight_.back().ends_batch = true;
    ++batches_in_flight_;
    if (observer_.on_batch) observer_.on_batch(depth);
  }
  while (out_offset_ < out_.size()) {
    const ssize_t n =
        ::send(fd_, out_.data() + out_offset_, out_.size() - out_offset_, MSG_NOSIGNAL);
    if (n > 0) {
      out_offset_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    Fail(Unavailable(absl::StrCat("write: ", std::strerror(errno))), now, done);
    return;
  }
}

void RedisConnection::CheckDeadlines(SteadyTime now, std::vector<Completion>* done) {
  if (closed_) return;
  if (!connected_ && now >= connect_deadline_) {
    Fail(Unavailable("connect timed out"), now, done);
    return;
  }
  for (const InFlight& c : inflight_) {
    if (now >= c.deadline) {
      Fail(
          absl::DeadlineExceededError(absl::StrCat(
              "redis ", address_, ": ", c.auth ? "authentication timed out" : "command timed out")),
          now, done);
      return;
    }
  }
  for (auto it = unsent_.begin(); it != unsent_.end();) {
    if (now >= it->deadline) {
      if (it == unsent_.begin() && auth_pending_) {
        Fail(absl::DeadlineExceededError(
                 absl::StrCat("redis ", address_, ": authentication timed out")),
             now, done);
        return;
      }
      if (it->handler) {
        done->push_back(
            Completion{std::move(it->handler),
                       absl::DeadlineExceededError(absl::StrCat(
                           "redis ", address_, ": command timed out before it was sent"))});
      }
      it = unsent_.erase(it);
    } else {
      ++it;
    }
  }
}

void RedisConnection::Fail(absl::Status error, SteadyTime now, std::vector<Completion>* done) {
  if (closed_) return;
  closed_ = true;
  error_ = error;
  // The socket stays open until destruction so that its number is not reused while the owner
  // still maps it to this connection.
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  if (auth_pending_) {
    unsent_.pop_front();
    auth_pending_ = false;
  }
  // Replies held for a WAIT that will not answer: the writes ran, their replication is unknown.
  for (Completion& c : held_) {
    done->push_back(
        Completion{std::move(c.handler),
                   Unavailable("connection closed before WAIT answered; the write may be lost")});
  }
  held_.clear();
  for (InFlight& c : inflight_) {
    if (c.auth || !c.handler) continue;
    absl::Status status = error;
    if (now >= c.deadline) {
      status = absl::DeadlineExceededError(absl::StrCat("redis ", address_, ": command timed out"));
    } else if (error.code() == absl::StatusCode::kDeadlineExceeded) {
      status = Unavailable(
          "connection closed after another command timed out; this command's outcome is unknown");
    }
    done->push_back(Completion{std::move(c.handler), std::move(status)});
  }
  inflight_.clear();
  batches_in_flight_ = 0;
  out_.clear();
  out_offset_ = 0;
}

std::deque<RedisConnection::Command> RedisConnection::TakeUnsent() {
  std::deque<Command> out;
  out.swap(unsent_);
  return out;
}

}  // namespace ratelimit::redis
