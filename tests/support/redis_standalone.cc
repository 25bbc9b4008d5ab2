#include "tests/support/redis_standalone.h"

#include <hiredis/hiredis.h>

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

absl::StatusOr<std::unique_ptr<RedisStandalone>> RedisStandalone::Start() {
  absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start();
  if (!server.ok()) return server.status();
  return std::unique_ptr<RedisStandalone>(new RedisStandalone(*std::move(server)));
}

}  // namespace ratelimit::testing
