// ratelimit-server: the rate-limit service. The flags are in server/flags.cc (and
// docs/configuration.md); what they configure, in server/options.h.
#include <signal.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cmdline/flags_check.h"
#include "cmdline/help.h"
#include "server/flags.h"
#include "server/observability/library_log.h"
#include "server/observability/log.h"
#include "server/server.h"
#include "storage/file_util.h"

namespace {

int Fail(const std::string& message) {
  ratelimit::Log(ratelimit::LogLevel::kError, "start-up failed", {{"error", message}});
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  // Every file the server creates (RocksDB's WAL and tables, port files) is private to its
  // user: limit keys can be personal data.
  umask(077);
  absl::SetProgramUsageMessage("ratelimit-server [flags]: serves ratelimit.v1.RateLimitService");
  // --help lists the flags of flags.cc (absl's default looks for a file named after the binary).
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, ratelimit::kServerFlagsFile);
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  ratelimit::HandleHelp(argc, argv, ratelimit::kServerFlagsFile);  // exit 0, unlike absl's
  // gRPC's and protobuf's lines are the server's from the first (gRPC starts with the first
  // channel or server).
  ratelimit::RouteGrpcLogs();
  ratelimit::RouteProtobufLogs();
  // A wrong command line is a start-up failure like any other, in one line (absl would print
  // its own text); an argument that is not a flag was dropped unseen.
  if (absl::Status s = ratelimit::CheckFlags(argc, argv); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  if (const std::vector<std::string> extra = ratelimit::PositionalArguments(argc, argv);
      !extra.empty()) {
    return Fail(absl::StrCat("unexpected argument \"", extra.front(),
                             "\": ratelimit-server takes flags only (--help lists them)"));
  }
  absl::ParseCommandLine(argc, argv);
  // Debian builds absl with its Mutex deadlock detector on; it costs ~1.5% of CPU per decision
  // (the lock order is fixed by design and covered by tests).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  absl::StatusOr<ratelimit::ProcessFlags> process = ratelimit::ProcessFlagsFromFlags();
  if (!process.ok()) return Fail(std::string(process.status().message()));
  ratelimit::SetLogLevel(process->log_level);
  ratelimit::SetLogFormat(process->log_format);
  absl::StatusOr<ratelimit::ServerOptions> options = ratelimit::ServerOptionsFromFlags();
  if (!options.ok()) return Fail(std::string(options.status().message()));
  // Written as soon as the HTTP endpoint listens, so that /healthz is reachable while starting.
  bool metrics_port_file_ok = true;
  if (const std::string f = process->metrics_port_file; !f.empty()) {
    options->observability.on_metrics_listening = [f, &metrics_port_file_ok](int port) {
      metrics_port_file_ok = ratelimit::WriteFileAtomically(f, absl::StrCat(port, "\n")).ok();
    };
  }

  // Signals are taken by sigwait below, not by handlers: block them before any thread starts
  // so that every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<std::unique_ptr<ratelimit::RateLimitServer>> server;
  {
    // What gRPC logs while the server starts is part of the one failure line when it fails.
    ratelimit::GrpcLogHold hold;
    server = ratelimit::RateLimitServer::Start(*options);
    if (!server.ok()) {
      std::string message = server.status().ToString();
      for (const std::string& line : hold.Take()) absl::StrAppend(&message, "; grpc: ", line);
      return Fail(message);
    }
  }
  if (!metrics_port_file_ok) return Fail("cannot write --metrics_port_file");

  if (!process->port_file.empty()) {
    if (!ratelimit::WriteFileAtomically(process->port_file, absl::StrCat((*server)->port(), "\n"))
             .ok()) {
      return Fail(absl::StrCat("cannot write --port_file ", process->port_file));
    }
  }

  int sig = 0;
  sigwait(&signals, &sig);
  ratelimit::Log(ratelimit::LogLevel::kInfo, "signal received",
                 {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}});
  (*server)->Shutdown();
  // A store that did not close cleanly was logged; the exit status says so too.
  return (*server)->ShutdownStatus().ok() ? 0 : 1;
}
