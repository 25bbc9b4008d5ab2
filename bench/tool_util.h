#ifndef RATELIMIT_BENCH_TOOL_UTIL_H_
#define RATELIMIT_BENCH_TOOL_UTIL_H_

// Small pieces shared by the benchmark servers (null_server, null_collector, memory_server).

#include <signal.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace ratelimit::bench {

// Writes `text` to `path` atomically (a temporary file renamed over it), so that a script polling
// for the file never reads it half-written.
inline bool WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << text;
    if (!out) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

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

}  // namespace ratelimit::bench

#endif  // RATELIMIT_BENCH_TOOL_UTIL_H_
