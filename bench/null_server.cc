// ratelimit_null_server: ratelimit.v1.RateLimitService with empty handlers, the baseline the
// real server's requests per second are compared against ("the same server with an empty
// handler"). Consume, Check and Reserve answer {allowed: true, denied_by: -1} at once, without
// looking at the request; Reset answers OK.
//
// The ServerBuilder is set up as server/server.cc sets it up (health service, reflection,
// maximum request size, callback API), so that the only difference is the handler.
//
// Usage: ratelimit_null_server [--listen=127.0.0.1:0] [--port_file=FILE]
// Runs until SIGTERM or SIGINT.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "bench/tool_util.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "ratelimit/v1/ratelimit.grpc.pb.h"
#include "storage/limit_config.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0", "host:port to serve on; port 0 picks a free port");
ABSL_FLAG(std::string, port_file, "", "write the chosen port to this file once listening");
ABSL_FLAG(bool, async_cq, false,
          "serve Consume with gRPC's completion-queue API on one thread of ours instead of the "
          "callback API; every other method, health and reflection are then not served (the "
          "default health service is a synchronous one, whose threads slow such a server)");

namespace ratelimit {
namespace {

constexpr char kServiceName[] = "ratelimit.v1.RateLimitService";

class NullRateLimitService final : public v1::RateLimitService::CallbackService {
 public:
  grpc::ServerUnaryReactor* Consume(grpc::CallbackServerContext* context,
                                    const v1::RateLimitRequest* /*request*/,
                                    v1::RateLimitResponse* response) override {
    return Allow(context, response);
  }
  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* context,
                                  const v1::RateLimitRequest* /*request*/,
                                  v1::RateLimitResponse* response) override {
    return Allow(context, response);
  }
  grpc::ServerUnaryReactor* Reserve(grpc::CallbackServerContext* context,
                                    const v1::RateLimitRequest* /*request*/,
                                    v1::RateLimitResponse* response) override {
    return Allow(context, response);
  }
  grpc::ServerUnaryReactor* Reset(grpc::CallbackServerContext* context,
                                  const v1::ResetRequest* /*request*/,
                                  v1::ResetResponse* /*response*/) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  static grpc::ServerUnaryReactor* Allow(grpc::CallbackServerContext* context,
                                         v1::RateLimitResponse* response) {
    response->set_allowed(true);
    response->set_denied_by(-1);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

// Consume through the completion-queue API: one thread runs the queue, answering each call at once.
class AsyncNullConsume {
 public:
  explicit AsyncNullConsume(grpc::ServerBuilder& builder) : cq_(builder.AddCompletionQueue()) {
    builder.RegisterService(&service_);
  }
  // Starts the thread; call after the server has started.
  void Start() {
    for (int i = 0; i < kCallsReady; ++i) RequestOne();
    thread_ = std::thread([this] { Run(); });
  }
  // Call after the server has shut down.
  void Stop() {
    cq_->Shutdown();
    thread_.join();
  }

 private:
  static constexpr int kCallsReady = 512;
  struct Call {
    grpc::ServerContext context;
    v1::RateLimitRequest request;
    v1::RateLimitResponse response;
    grpc::ServerAsyncResponseWriter<v1::RateLimitResponse> writer{&context};
    bool answered = false;
  };
  void RequestOne() {
    auto* call = new Call;
    service_.RequestConsume(&call->context, &call->request, &call->writer, cq_.get(), cq_.get(),
                            call);
  }
  void Run() {
    void* tag = nullptr;
    bool ok = false;
    while (cq_->Next(&tag, &ok)) {
      auto* call = static_cast<Call*>(tag);
      if (!ok || call->answered) {
        delete call;
        continue;
      }
      RequestOne();
      call->response.set_allowed(true);
      call->response.set_denied_by(-1);
      call->answered = true;
      call->writer.Finish(call->response, grpc::Status::OK, call);
    }
  }

  v1::RateLimitService::AsyncService service_;
  std::unique_ptr<grpc::ServerCompletionQueue> cq_;
  std::thread thread_;
};

int Run() {
  const std::string address = absl::GetFlag(FLAGS_listen);
  // Signals are taken by sigwait below: block them before gRPC starts any thread.
  sigset_t signals = bench::BlockTerminationSignals();

  NullRateLimitService service;
  const bool use_async = absl::GetFlag(FLAGS_async_cq);
  grpc::EnableDefaultHealthCheckService(!use_async);
  if (!use_async) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  std::unique_ptr<AsyncNullConsume> async;
  if (use_async) {
    async = std::make_unique<AsyncNullConsume>(builder);
  } else {
    builder.RegisterService(&service);
  }
  builder.SetMaxReceiveMessageSize(static_cast<int>(kMaxRequestBytes));
  int port = 0;
  std::unique_ptr<grpc::Server> server = bench::ListenAndStart(builder, address, &port);
  if (!server) return 1;
  if (async) {
    async->Start();
  } else {
    server->GetHealthCheckService()->SetServingStatus(kServiceName, true);
  }
  if (!bench::AnnouncePort("null server", address, port, absl::GetFlag(FLAGS_port_file))) {
    return 1;
  }

  bench::WaitForSignal(signals);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (async) async->Stop();
  return 0;
}

}  // namespace
}  // namespace ratelimit

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "ratelimit_null_server [--listen=HOST:PORT] [--port_file=FILE]: RateLimitService with "
      "empty handlers, the baseline for end-to-end benchmarks");
  absl::ParseCommandLine(argc, argv);
  return ratelimit::Run();
}
