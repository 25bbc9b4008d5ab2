#ifndef RATELIMIT_SERVER_OBSERVABILITY_HTTP_SERVER_H_
#define RATELIMIT_SERVER_OBSERVABILITY_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace httplib {
class Server;
}

namespace ratelimit {

class HealthReporter;
class MetricsRegistry;
class ReloadingKeyPair;

// HTTPS for the HttpServer: PEM certificate chain and private key, both or neither.
struct HttpServerTls {
  std::string cert_file;
  std::string key_file;
  bool enabled() const { return !cert_file.empty() || !key_file.empty(); }
};

// The operator's HTTP endpoint (cpp-httplib): GET /metrics (Prometheus text format) and
// GET /healthz (200 "SERVING", else 503 with the state). With TLS it serves HTTPS only (TLS 1.2
// or later); the certificate and key are re-read on the first handshake after either file
// changes, and a pair that does not load (a rotation caught half-way) leaves the previous one in
// use.
//
// Ownership: owns the listening socket and its accept thread; the registry and the health
// reporter it serves are not owned and must outlive it.
// Thread safety: Start/Stop from one thread; requests are served on httplib's threads.
class HttpServer {
 public:
  // Listens on `host`:`port` (port 0: any free port) and returns once the server accepts
  // connections, so that Stop() may follow at once. UNAVAILABLE with the system's reason (e.g.
  // "Address already in use") when the port cannot be bound; INVALID_ARGUMENT when `tls` is
  // enabled and its files do not load. The registry and reporter are not owned.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& host, int port,
                                                           const MetricsRegistry& metrics,
                                                           const HealthReporter& health,
                                                           const HttpServerTls& tls = {});
  ~HttpServer();  // Stop()

  int port() const { return port_; }
  void Stop();

 private:
  HttpServer();
  std::unique_ptr<ReloadingKeyPair> key_pair_;  // null without TLS; outlives server_
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  absl::Mutex mu_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;  // the accept loop has started
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_OBSERVABILITY_HTTP_SERVER_H_
