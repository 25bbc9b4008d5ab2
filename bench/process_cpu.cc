#include "bench/process_cpu.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ratelimit::bench {

absl::StatusOr<uint64_t> ParseProcStatCpuTicks(absl::string_view stat) {
  const size_t paren = stat.rfind(')');
  if (paren == absl::string_view::npos) {
    return absl::InvalidArgumentError("stat: no ')' after the command name");
  }
  // Fields from the third (state) on; utime and stime are the 14th and 15th.
  const std::vector<absl::string_view> fields =
      absl::StrSplit(stat.substr(paren + 1), ' ', absl::SkipWhitespace());
  constexpr size_t kUtime = 14 - 3;
  constexpr size_t kStime = 15 - 3;
  uint64_t utime = 0, stime = 0;
  if (fields.size() <= kStime || !absl::SimpleAtoi(fields[kUtime], &utime) ||
      !absl::SimpleAtoi(fields[kStime], &stime)) {
    return absl::InvalidArgumentError("stat: no utime and stime (fields 14 and 15)");
  }
  return utime + stime;
}

absl::StatusOr<int64_t> ProcessCpuMicros(pid_t pid) {
  const std::string path = absl::StrCat("/proc/", pid, "/stat");
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("no process ", pid, " (", path, ")"));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<uint64_t> ticks = ParseProcStatCpuTicks(text.str());
  if (!ticks.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", ticks.status().message()));
  const long hz = sysconf(_SC_CLK_TCK);
  return static_cast<int64_t>(*ticks) * 1000000 / (hz > 0 ? hz : 100);
}

}  // namespace ratelimit::bench
