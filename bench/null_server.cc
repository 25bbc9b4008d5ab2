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

int Run() {
  const std::string address = absl::GetFlag(FLAGS_listen);
  // Signals are taken by sigwait below: block them before gRPC starts any thread.
  sigset_t signals = bench::BlockTerminationSignals();

  NullRateLimitService service;
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(static_cast<int>(kMaxRequestBytes));
  int port = 0;
  std::unique_ptr<grpc::Server> server = bench::ListenAndStart(builder, address, &port);
  if (!server) return 1;
  server->GetHealthCheckService()->SetServingStatus(kServiceName, true);
  if (!bench::AnnouncePort("null server", address, port, absl::GetFlag(FLAGS_port_file))) {
    return 1;
  }

  bench::WaitForSignal(signals);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
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
