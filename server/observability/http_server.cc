#include "server/observability/http_server.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "server/observability/health.h"
#include "server/observability/metrics.h"
#include "server/observability/reloading_key_pair.h"

namespace ratelimit {

HttpServer::HttpServer() = default;

HttpServer::~HttpServer() { Stop(); }

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& host, int port,
                                                              const MetricsRegistry& metrics,
                                                              const HealthReporter& health,
                                                              const HttpServerTls& tls) {
  std::unique_ptr<HttpServer> s(new HttpServer());
  if (tls.enabled()) {
    s->key_pair_ = std::make_unique<ReloadingKeyPair>(tls.cert_file, tls.key_file);
    if (absl::Status st = s->key_pair_->Load(); !st.ok()) return st;
    ReloadingKeyPair* key_pair = s->key_pair_.get();
    auto https = std::make_unique<httplib::SSLServer>([key_pair](SSL_CTX& ctx) {
      SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
      SSL_CTX_set_options(&ctx, SSL_OP_NO_COMPRESSION);
      key_pair->Install(&ctx);
      return true;
    });
    if (!https->is_valid()) return absl::InternalError("cannot set up TLS for the HTTP endpoint");
    s->server_ = std::move(https);
  } else {
    s->server_ = std::make_unique<httplib::Server>();
  }
  s->server_->Get("/metrics", [&metrics](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  s->server_->Get("/healthz", [&health](const httplib::Request&, httplib::Response& res) {
    const ServingState state = health.state();
    res.status = state == ServingState::kServing ? 200 : 503;
    res.set_content(absl::StrCat(ServingStateName(state), "\n"), "text/plain");
  });
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, which would let a second instance
  // share the port instead of failing to start.
  s->server_->set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  errno = 0;
  s->port_ = port == 0 ? s->server_->bind_to_any_port(host)
                       : (s->server_->bind_to_port(host, port) ? port : -1);
  if (s->port_ <= 0) {
    const int error = errno;
    return absl::UnavailableError(absl::StrCat("cannot listen for HTTP on ", host, ":", port,
                                               error != 0 ? ": " : "",
                                               error != 0 ? std::strerror(error) : ""));
  }
  // httplib's stop() only acts on a server whose loop is running: a stop() that comes before the
  // loop has started is lost, and the loop then runs (and a join waits) forever. The loop creates
  // its task queue after it is marked running and before it accepts, so that is the moment Start
  // waits for; from then on Stop() always ends the loop.
  HttpServer* self = s.get();
  s->server_->new_task_queue = [self] {
    {
      absl::MutexLock lock(&self->mu_);
      self->running_ = true;
    }
    return new httplib::ThreadPool(CPPHTTPLIB_THREAD_POOL_COUNT);
  };
  httplib::Server* raw = s->server_.get();
  s->thread_ = std::thread([raw] { raw->listen_after_bind(); });
  absl::MutexLock lock(&s->mu_);
  s->mu_.Await(absl::Condition(&s->running_));
  return s;
}

void HttpServer::Stop() {
  if (!thread_.joinable()) return;
  server_->stop();
  thread_.join();
}

}  // namespace ratelimit
