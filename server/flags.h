#ifndef RATELIMIT_SERVER_FLAGS_H_
#define RATELIMIT_SERVER_FLAGS_H_

// The command line of ratelimit-server: every flag is defined in flags.cc (which --help lists)
// and mapped there, and only there, to ServerOptions (server/options.h). What a flag's value
// means is checked once, by ValidateServerOptions; this file only converts (a duration, MiB to
// bytes, a word to an enum) and reads the OTEL_* environment variables the flags fall back to.

#include <string>

#include "absl/status/statusor.h"
#include "server/observability/log.h"
#include "server/options.h"

namespace ratelimit {

// The source file whose flags --help lists.
inline constexpr char kServerFlagsFile[] = "server/flags.cc";

// What the command line says about the process itself rather than the server.
struct ProcessFlags {
  LogLevel log_level = LogLevel::kInfo;
  LogFormat log_format = LogFormat::kText;
  // Files the chosen ports are written to; empty: none.
  std::string port_file;
  std::string metrics_port_file;
};

// The parsed flags (absl::ParseCommandLine has run) as options, validated
// (ValidateServerOptions). INVALID_ARGUMENT naming the flag otherwise.
absl::StatusOr<ServerOptions> ServerOptionsFromFlags();
absl::StatusOr<ProcessFlags> ProcessFlagsFromFlags();

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_FLAGS_H_
