#include "server/observability/library_log.h"

#include <google/protobuf/stubs/logging.h>
#include <grpc/support/log.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/observability/log.h"

namespace ratelimit {
namespace {

struct KeptLine {
  LogLevel level;
  std::string detail;
  std::string source;
};

// What a hold keeps. Leaked: gRPC may log from its threads while the process exits.
struct Held {
  absl::Mutex mu;
  bool holding ABSL_GUARDED_BY(mu) = false;
  std::vector<KeptLine> lines ABSL_GUARDED_BY(mu);
};

Held& TheHeld() {
  static Held* const held = new Held();
  return *held;
}

LogLevel LevelOf(gpr_log_severity severity) {
  switch (severity) {
    case GPR_LOG_SEVERITY_DEBUG:
      return LogLevel::kDebug;
    case GPR_LOG_SEVERITY_INFO:
      return LogLevel::kInfo;
    case GPR_LOG_SEVERITY_ERROR:
      return LogLevel::kError;
  }
  return LogLevel::kError;
}

void Write(const KeptLine& line) {
  Log(line.level, "grpc", {{"detail", line.detail}, {"source", line.source}});
}

void FromGrpc(gpr_log_func_args* args) {
  KeptLine line{LevelOf(args->severity), args->message != nullptr ? args->message : "",
                absl::StrCat(args->file != nullptr ? args->file : "?", ":", args->line)};
  Held& held = TheHeld();
  {
    absl::MutexLock lock(&held.mu);
    if (held.holding) {
      held.lines.push_back(std::move(line));
      return;
    }
  }
  Write(line);
}

void FromProtobuf(google::protobuf::LogLevel level, const char* filename, int line,
                  const std::string& message) {
  Log(level == google::protobuf::LOGLEVEL_FATAL ? LogLevel::kError : LogLevel::kDebug, "protobuf",
      {{"detail", message},
       {"source", absl::StrCat(filename != nullptr ? filename : "?", ":", line)}});
}

}  // namespace

void RouteGrpcLogs() { gpr_set_log_function(&FromGrpc); }

void RouteProtobufLogs() { google::protobuf::SetLogHandler(&FromProtobuf); }

GrpcLogHold::GrpcLogHold() {
  Held& held = TheHeld();
  absl::MutexLock lock(&held.mu);
  held.holding = true;
}

GrpcLogHold::~GrpcLogHold() {
  Held& held = TheHeld();
  std::vector<KeptLine> lines;
  {
    absl::MutexLock lock(&held.mu);
    held.holding = false;
    lines.swap(held.lines);
  }
  for (const KeptLine& line : lines) Write(line);
}

std::vector<std::string> GrpcLogHold::Take() {
  Held& held = TheHeld();
  std::vector<KeptLine> lines;
  {
    absl::MutexLock lock(&held.mu);
    lines.swap(held.lines);
  }
  std::vector<std::string> texts;
  texts.reserve(lines.size());
  for (KeptLine& line : lines) texts.push_back(std::move(line.detail));
  return texts;
}

}  // namespace ratelimit
