#include "server/rlqs/rlqs_horizon.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/observability/log.h"
#include "storage/file_util.h"

namespace ratelimit {

RlqsHorizon::RlqsHorizon(std::string path) : path_(std::move(path)) {}

int64_t RlqsHorizon::Load() {
  if (path_.empty()) return 0;
  absl::StatusOr<std::string> text = ReadFileToString(path_);
  if (!text.ok()) return 0;  // never written: no assignment was sent
  int64_t until = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &until) || until < 0) {
    Log(LogLevel::kWarning, "rlqs: the record of the assignments sent is malformed; ignored",
        {{"file", path_}});
    return 0;
  }
  recorded_us_ = until;
  return until;
}

bool RlqsHorizon::Write(int64_t until_us) {
  if (absl::Status s = WriteFileAtomically(path_, absl::StrCat(until_us, "\n")); !s.ok()) {
    write_failed_.Log({{"file", path_}, {"error", std::string(s.message())}});
    return false;
  }
  recorded_us_ = until_us;
  return true;
}

void RlqsHorizon::Cover(int64_t until_us) {
  if (path_.empty() || closed_ || until_us <= recorded_us_) return;
  Write(until_us + kSlackMicros);
}

void RlqsHorizon::Close(int64_t until_us) {
  if (path_.empty()) return;
  closed_ = true;
  Write(until_us);
}

}  // namespace ratelimit
