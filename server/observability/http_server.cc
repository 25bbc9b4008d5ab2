#include "server/observability/http_server.h"

#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "server/observability/health.h"
#include "server/observability/metrics.h"

namespace ratelimit {

HttpServer::HttpServer() : server_(std::make_unique<httplib::Server>()) {}

HttpServer::~HttpServer() { Stop(); }

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& host, int port,
                                                              const MetricsRegistry& metrics,
                                                              const HealthReporter& health) {
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->server_->Get("/metrics", [&metrics](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  s->server_->Get("/healthz", [&health](const httplib::Request&, httplib::Response& res) {
    const ServingState state = health.state();
    res.status = state == ServingState::kServing ? 200 : 503;
    res.set_content(absl::StrCat(ServingStateName(state), "\n"), "text/plain");
  });
  s->port_ = port == 0 ? s->server_->bind_to_any_port(host)
                       : (s->server_->bind_to_port(host, port) ? port : -1);
  if (s->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen for HTTP on ", host, ":", port));
  }
  httplib::Server* raw = s->server_.get();
  s->thread_ = std::thread([raw] { raw->listen_after_bind(); });
  return s;
}

void HttpServer::Stop() {
  if (!thread_.joinable()) return;
  server_->stop();
  thread_.join();
}

}  // namespace ratelimit
