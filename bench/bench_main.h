#ifndef RATELIMIT_BENCH_BENCH_MAIN_H_
#define RATELIMIT_BENCH_BENCH_MAIN_H_

// The main of an in-process Google Benchmark whose stores live on disk: Google Benchmark's flags,
// absl's deadlock detection off (as the server runs), and a scratch directory for the stores, new
// under $TMPDIR (default /tmp) and removed at exit.

#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "benchmark/benchmark.h"

namespace ratelimit::bench {

// Runs the benchmarks selected by the command line: `start` gets the scratch directory
// ("<$TMPDIR or /tmp>/<stem>-XXXXXX") before the first, `finish` closes the stores after the
// last, before the directory is removed. Returns the process's exit code.
inline int RunStoreBenchmarks(int argc, char** argv, const std::string& stem,
                              absl::FunctionRef<void(const std::string& dir)> start,
                              absl::FunctionRef<void()> finish) {
  benchmark::Initialize(&argc, argv);
  // As the server does: absl's lock-order graph would otherwise cost every decision.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const char* tmp = getenv("TMPDIR");
  std::string dir =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/" + stem + "-XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  start(dir);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  finish();
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return 0;
}

}  // namespace ratelimit::bench

#endif  // RATELIMIT_BENCH_BENCH_MAIN_H_
