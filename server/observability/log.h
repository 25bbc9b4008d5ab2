#ifndef RATELIMIT_SERVER_OBSERVABILITY_LOG_H_
#define RATELIMIT_SERVER_OBSERVABILITY_LOG_H_

#include <initializer_list>
#include <string>
#include <utility>
#include "absl/strings/string_view.h"

namespace ratelimit {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };
enum class LogFormat { kText, kJson };

// Process-wide logging settings. Defaults: kInfo, kText, standard error.
void SetLogLevel(LogLevel level);
void SetLogFormat(LogFormat format);

using LogField = std::pair<absl::string_view, std::string>;

// Writes one line for one event: time, level, message and fields. Text:
//   2026-11-21T10:00:00.123456Z INFO reset limit=api key=u1 peer=ipv4:127.0.0.1:5555
// JSON: {"ts":"...","level":"INFO","msg":"reset","limit":"api",...}
// Fields with an empty value are left out. Thread-safe; each line is written with one write(2),
// so lines never interleave.
void Log(LogLevel level, absl::string_view message, std::initializer_list<LogField> fields = {});

// Parses "debug", "info", "warning", "error" / "text", "json"; false when unknown.
bool ParseLogLevel(absl::string_view text, LogLevel* level);
bool ParseLogFormat(absl::string_view text, LogFormat* format);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_OBSERVABILITY_LOG_H_
