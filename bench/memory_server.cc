// ratelimit_memory_server: the real server (RateLimitServer, every handler, conversion and
// metric) on the in-memory store instead of RocksDB. Between the null server and
// ratelimit-server, it splits the end-to-end cost of a decision into "the service minus storage"
// and "RocksDB". A diagnostic for benchmarks only: nothing survives the process.
//
// Usage: ratelimit_memory_server [--listen=127.0.0.1:0] [--port_file=FILE]
// Runs until SIGTERM or SIGINT.
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/synchronization/mutex.h"
#include "bench/tool_util.h"
#include "server/observability/log.h"
#include "server/server.h"
#include "storage/memory/memory_state_store.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0", "host:port to serve on; port 0 picks a free port");
ABSL_FLAG(std::string, port_file, "", "write the chosen port to this file once listening");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "ratelimit_memory_server [--listen=HOST:PORT] [--port_file=FILE]: the rate-limit server "
      "on the in-memory store, for benchmarks");
  absl::ParseCommandLine(argc, argv);
  // As ratelimit-server's main.cc: Debian builds absl with its Mutex deadlock detector on.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  ratelimit::SetLogLevel(ratelimit::LogLevel::kWarning);

  // Signals are taken by sigwait below: block them before any thread starts.
  sigset_t signals = ratelimit::bench::BlockTerminationSignals();

  ratelimit::ServerOptions options;
  options.listen.address = absl::GetFlag(FLAGS_listen);
  absl::StatusOr<std::unique_ptr<ratelimit::RateLimitServer>> server =
      ratelimit::RateLimitServer::Start(options, ratelimit::SystemClock::Default(),
                                        std::make_unique<ratelimit::MemoryStateStore>());
  if (!server.ok()) {
    std::fprintf(stderr, "start: %s\n", server.status().ToString().c_str());
    return 1;
  }
  if (!ratelimit::bench::AnnouncePort("memory-store server", options.listen.address,
                                      (*server)->port(), absl::GetFlag(FLAGS_port_file))) {
    return 1;
  }
  ratelimit::bench::WaitForSignal(signals);
  (*server)->Shutdown();
  return 0;
}
