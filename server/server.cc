#include "server/server.h"

#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/log.h"
#include "storage/limit_config.h"
#include "storage/rocksdb_state_store.h"

namespace ratelimit {
namespace {
constexpr char kServiceName[] = "ratelimit.v1.RateLimitService";
}  // namespace

absl::StatusOr<std::unique_ptr<RateLimitServer>> RateLimitServer::Start(
    const ServerOptions& options, const Clock& clock, std::unique_ptr<StateStore> store) {
  std::unique_ptr<RateLimitServer> s(new RateLimitServer(options));
  const bool injected = store != nullptr;
  if (injected) {
    s->store_ = std::move(store);
  } else {
    RocksDbStateStoreOptions ro;
    ro.path = options.data_dir;
    ro.sync = options.sync;
    ro.clock = &clock;
    absl::StatusOr<std::unique_ptr<RocksDbStateStore>> opened = RocksDbStateStore::Open(ro);
    if (!opened.ok()) return opened.status();
    s->rocks_ = opened->get();
    s->store_ = *std::move(opened);
  }
  s->limiter_ = std::make_unique<Limiter>(*s->store_, clock);
  if (!options.limits_file.empty()) {
    s->watcher_ = std::make_unique<LimitsFileWatcher>(options.limits_file, s->registry_,
                                                      options.limits_reload_interval);
    if (absl::Status st = s->watcher_->Load(); !st.ok()) return st;
  }
  s->admin_ = std::make_unique<AdminAuthenticator>(options.admin_token);
  s->service_ = std::make_unique<RateLimitServiceImpl>(*s->limiter_, s->registry_, *s->admin_,
                                                       options.failure_policy);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen_address, grpc::InsecureServerCredentials(), &s->port_);
  builder.RegisterService(s->service_.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(kMaxRequestBytes));
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || s->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen_address));
  }
  grpc::HealthCheckServiceInterface* health = s->server_->GetHealthCheckService();
  health->SetServingStatus(kServiceName, true);
  health->SetServingStatus(true);
  if (s->watcher_) s->watcher_->Start();
  Log(LogLevel::kInfo, "listening",
      {{"address", options.listen_address},
       {"port", std::to_string(s->port_)},
       {"data_dir", injected ? std::string("(injected)") : options.data_dir},
       {"admin", s->admin_->enabled() ? "enabled" : "disabled"},
       {"failure_policy", options.failure_policy == FailurePolicy::kOpen ? "open" : "closed"}});
  return s;
}

RateLimitServer::~RateLimitServer() { Shutdown(); }

void RateLimitServer::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  Log(LogLevel::kInfo, "shutting down: draining in-flight calls");
  if (server_) {
    server_->GetHealthCheckService()->SetServingStatus(false);
    server_->Shutdown(std::chrono::system_clock::now() +
                      absl::ToChronoMicroseconds(options_.shutdown_grace));
  }
  if (watcher_) watcher_->Stop();
  if (rocks_ != nullptr) {
    if (absl::Status s = rocks_->Close(); !s.ok()) {
      Log(LogLevel::kError, "closing the store failed", {{"error", std::string(s.message())}});
    }
  }
  Log(LogLevel::kInfo, "stopped");
  absl::MutexLock lock(&mu_);
  stopped_ = true;
}

void RateLimitServer::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&stopped_));
}

}  // namespace ratelimit
