#ifndef RATELIMIT_BENCH_TOOL_UTIL_H_
#define RATELIMIT_BENCH_TOOL_UTIL_H_

// Small pieces shared by the benchmark servers (null_server, null_collector, memory_server):
// block the termination signals, listen, announce the port (stdout and --port_file), wait for
// SIGTERM/SIGINT.

#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <cstdio>
#include <memory>
#include <string>

#include "storage/file_util.h"

namespace ratelimit::bench {

// Blocks SIGTERM and SIGINT in this thread and every thread it starts later, and returns the
// set to sigwait() on. Call before gRPC starts any thread.
inline sigset_t BlockTerminationSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// Adds an insecure listening port on `address` to `builder` and starts the server; stores the
// chosen port in `*port`. Null, after saying why on stderr, when it cannot listen.
inline std::unique_ptr<grpc::Server> ListenAndStart(grpc::ServerBuilder& builder,
                                                    const std::string& address, int* port) {
  *port = 0;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), port);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || *port == 0) {
    std::fprintf(stderr, "cannot listen on %s\n", address.c_str());
    return nullptr;
  }
  return server;
}

// Prints "<what> listening on <address>, port <port>" and, when `port_file` is not empty,
// writes the port to it atomically, so that a script polling for the file never reads it
// half-written. False, after saying why on stderr, when the file cannot be written.
inline bool AnnouncePort(const char* what, const std::string& address, int port,
                         const std::string& port_file) {
  std::printf("%s listening on %s, port %d\n", what, address.c_str(), port);
  std::fflush(stdout);
  if (port_file.empty()) return true;
  if (!WriteFileAtomically(port_file, std::to_string(port) + "\n").ok()) {
    std::fprintf(stderr, "cannot write --port_file %s\n", port_file.c_str());
    return false;
  }
  return true;
}

// Waits for one of `signals` (from BlockTerminationSignals) and returns it.
inline int WaitForSignal(const sigset_t& signals) {
  int sig = 0;
  sigwait(&signals, &sig);
  return sig;
}

}  // namespace ratelimit::bench

#endif  // RATELIMIT_BENCH_TOOL_UTIL_H_
