#include "server/observability/log.h"

#include <unistd.h>

#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ratelimit {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::atomic<int> g_format{static_cast<int>(LogFormat::kText)};

const char* LevelName(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kWarning:
      return "WARNING";
    case LogLevel::kError:
      return "ERROR";
  }
  return "INFO";
}

void AppendJsonString(std::string* out, absl::string_view s) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (c < 0x20) {
          static const char kHex[] = "0123456789abcdef";
          out->append("\\u00");
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 15]);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

// Text values with spaces, quotes or control characters are quoted (JSON rules).
void AppendTextValue(std::string* out, absl::string_view s) {
  bool plain = !s.empty();
  for (unsigned char c : s) {
    if (c <= 0x20 || c == '"' || c == '\\' || c == 0x7f) plain = false;
  }
  if (plain) {
    out->append(s.data(), s.size());
  } else {
    AppendJsonString(out, s);
  }
}

}  // namespace

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }
void SetLogFormat(LogFormat format) { g_format.store(static_cast<int>(format)); }

void Log(LogLevel level, absl::string_view message, std::initializer_list<LogField> fields) {
  if (static_cast<int>(level) < g_level.load(std::memory_order_relaxed)) return;
  const std::string ts = absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", absl::Now(), absl::UTCTimeZone());
  std::string line;
  if (g_format.load(std::memory_order_relaxed) == static_cast<int>(LogFormat::kJson)) {
    absl::StrAppend(&line, "{\"ts\":\"", ts, "\",\"level\":\"", LevelName(level), "\",\"msg\":");
    AppendJsonString(&line, message);
    for (const LogField& f : fields) {
      if (f.second.empty()) continue;
      line.push_back(',');
      AppendJsonString(&line, f.first);
      line.push_back(':');
      AppendJsonString(&line, f.second);
    }
    line.append("}\n");
  } else {
    absl::StrAppend(&line, ts, " ", LevelName(level), " ", message);
    for (const LogField& f : fields) {
      if (f.second.empty()) continue;
      absl::StrAppend(&line, " ", f.first, "=");
      AppendTextValue(&line, f.second);
    }
    line.push_back('\n');
  }
  size_t off = 0;
  while (off < line.size()) {
    ssize_t n = ::write(STDERR_FILENO, line.data() + off, line.size() - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
}

bool ParseLogLevel(absl::string_view t, LogLevel* level) {
  if (t == "debug")
    *level = LogLevel::kDebug;
  else if (t == "info")
    *level = LogLevel::kInfo;
  else if (t == "warning")
    *level = LogLevel::kWarning;
  else if (t == "error")
    *level = LogLevel::kError;
  else
    return false;
  return true;
}

bool ParseLogFormat(absl::string_view t, LogFormat* format) {
  if (t == "text")
    *format = LogFormat::kText;
  else if (t == "json")
    *format = LogFormat::kJson;
  else
    return false;
  return true;
}

}  // namespace ratelimit
