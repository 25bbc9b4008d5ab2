#ifndef RATELIMIT_SERVER_SERVER_H_
#define RATELIMIT_SERVER_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "server/admin_auth.h"
#include "server/limit_registry.h"
#include "server/rate_limit_service.h"
#include "storage/clock.h"
#include "storage/limiter.h"
#include "storage/rocksdb_state_store.h"
#include "storage/state_store.h"

namespace ratelimit {

struct ServerOptions {
  // host:port to listen on; port 0 picks a free port (see RateLimitServer::port()).
  std::string listen_address = "127.0.0.1:8081";
  // RocksDB data directory (ignored when a store is injected).
  std::string data_dir = "./data";
  // The limits YAML file; empty: only inline configs.
  std::string limits_file;
  // How often the limits file is checked for changes.
  absl::Duration limits_reload_interval = absl::Seconds(1);
  // Bearer token for Reset; empty disables Reset.
  std::string admin_token;
  FailurePolicy failure_policy = FailurePolicy::kClosed;
  // fsync the WAL on every write group (power-loss durability).
  bool sync = false;
  // How long Shutdown() lets in-flight calls finish before cancelling them.
  absl::Duration shutdown_grace = absl::Seconds(5);
};

// The composition root: builds the store, limiter, registry, services and the gRPC server,
// owns them, and tears them down in order.
//
// Thread safety: Shutdown() may be called from any thread, once the server is started.
class RateLimitServer {
 public:
  // Starts a server. `clock` is not owned and must outlive the server. `store`, when given,
  // replaces the RocksDB store opened at options.data_dir (tests inject fakes this way).
  // Fails when the store cannot be opened, the limits file is invalid or the address cannot
  // be bound.
  static absl::StatusOr<std::unique_ptr<RateLimitServer>> Start(
      const ServerOptions& options, const Clock& clock = SystemClock::Default(),
      std::unique_ptr<StateStore> store = nullptr);

  RateLimitServer(const RateLimitServer&) = delete;
  RateLimitServer& operator=(const RateLimitServer&) = delete;
  ~RateLimitServer();  // calls Shutdown()

  // The port the server listens on.
  int port() const { return port_; }

  // Reports NOT_SERVING, stops accepting calls, lets in-flight ones finish (up to
  // shutdown_grace), stops the reloader, then flushes and closes the store. Idempotent.
  void Shutdown();

  // Blocks until Shutdown() has completed.
  void Wait();

  // The store, for tools that inspect it (benchmarks, tests).
  StateStore& store() { return *store_; }

 private:
  explicit RateLimitServer(const ServerOptions& options) : options_(options) {}

  const ServerOptions options_;
  std::unique_ptr<StateStore> store_;
  RocksDbStateStore* rocks_ = nullptr;  // store_ when the server opened RocksDB itself
  std::unique_ptr<Limiter> limiter_;
  LimitRegistry registry_;
  std::unique_ptr<LimitsFileWatcher> watcher_;
  std::unique_ptr<AdminAuthenticator> admin_;
  std::unique_ptr<RateLimitServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;

  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_SERVER_H_
