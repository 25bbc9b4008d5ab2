#ifndef RATELIMIT_BENCH_PROCESS_CPU_H_
#define RATELIMIT_BENCH_PROCESS_CPU_H_

// The CPU time another process has used, from /proc/<pid>/stat: user + system time of all its
// threads, those that have exited included, in the kernel's clock ticks (sysconf(_SC_CLK_TCK),
// usually 100 per second: a resolution of 10 ms).

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ratelimit::bench {

// utime + stime in clock ticks from the text of a /proc/<pid>/stat file. The command name (the
// second field) may hold spaces and parentheses: fields are counted after its last ')'.
// INVALID_ARGUMENT when the text is not such a line.
absl::StatusOr<uint64_t> ParseProcStatCpuTicks(absl::string_view stat);

// The CPU time `pid` has used so far, in microseconds (at the clock tick's resolution).
// NOT_FOUND when there is no such process; INVALID_ARGUMENT when its stat cannot be read.
absl::StatusOr<int64_t> ProcessCpuMicros(pid_t pid);

}  // namespace ratelimit::bench

#endif  // RATELIMIT_BENCH_PROCESS_CPU_H_
