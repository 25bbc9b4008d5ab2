// ratelimit-server: the rate-limit service. See README.md for the flags.
#include <signal.h>

#include <cstdio>
#include <fstream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "server/log.h"
#include "server/server.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:8081",
          "host:port to serve gRPC on; port 0 picks a free port");
ABSL_FLAG(std::string, data_dir, "./data", "RocksDB data directory (created if missing)");
ABSL_FLAG(std::string, limits_file, "", "YAML file of named limits, hot-reloaded");
ABSL_FLAG(absl::Duration, limits_reload_interval, absl::Seconds(1),
          "how often the limits file is checked for changes");
ABSL_FLAG(std::string, admin_token_file, "",
          "file holding the admin bearer token for Reset (else $RATELIMIT_ADMIN_TOKEN; "
          "neither: Reset is disabled)");
ABSL_FLAG(std::string, failure_policy, "closed",
          "when the store fails: closed (answer UNAVAILABLE) or open (allow, marked failed_open)");
ABSL_FLAG(bool, sync, false, "fsync the WAL on every write (survives power loss; slower)");
ABSL_FLAG(std::string, port_file, "", "write the chosen port to this file once listening");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(5),
          "how long in-flight calls may take to finish on SIGTERM");
ABSL_FLAG(std::string, log_level, "info", "debug, info, warning or error");
ABSL_FLAG(std::string, log_format, "text", "text or json");

namespace {

int Fail(const std::string& message) {
  ratelimit::Log(ratelimit::LogLevel::kError, "start-up failed", {{"error", message}});
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("ratelimit-server [flags]: serves ratelimit.v1.RateLimitService");
  absl::ParseCommandLine(argc, argv);

  ratelimit::LogLevel level;
  if (!ratelimit::ParseLogLevel(absl::GetFlag(FLAGS_log_level), &level)) {
    return Fail("--log_level must be debug, info, warning or error");
  }
  ratelimit::SetLogLevel(level);
  ratelimit::LogFormat format;
  if (!ratelimit::ParseLogFormat(absl::GetFlag(FLAGS_log_format), &format)) {
    return Fail("--log_format must be text or json");
  }
  ratelimit::SetLogFormat(format);

  ratelimit::ServerOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.data_dir = absl::GetFlag(FLAGS_data_dir);
  options.limits_file = absl::GetFlag(FLAGS_limits_file);
  options.limits_reload_interval = absl::GetFlag(FLAGS_limits_reload_interval);
  options.sync = absl::GetFlag(FLAGS_sync);
  options.shutdown_grace = absl::GetFlag(FLAGS_shutdown_grace);
  const std::string policy = absl::GetFlag(FLAGS_failure_policy);
  if (policy == "closed") {
    options.failure_policy = ratelimit::FailurePolicy::kClosed;
  } else if (policy == "open") {
    options.failure_policy = ratelimit::FailurePolicy::kOpen;
  } else {
    return Fail("--failure_policy must be closed or open");
  }
  absl::StatusOr<std::string> token =
      ratelimit::LoadAdminToken(absl::GetFlag(FLAGS_admin_token_file), "RATELIMIT_ADMIN_TOKEN");
  if (!token.ok()) return Fail(std::string(token.status().message()));
  options.admin_token = *token;

  // Signals are taken by sigwait below, not by handlers: block them before any thread starts
  // so that every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<std::unique_ptr<ratelimit::RateLimitServer>> server =
      ratelimit::RateLimitServer::Start(options);
  if (!server.ok()) return Fail(server.status().ToString());

  if (const std::string port_file = absl::GetFlag(FLAGS_port_file); !port_file.empty()) {
    const std::string tmp = port_file + ".tmp";
    {
      std::ofstream out(tmp);
      out << (*server)->port() << "\n";
    }
    if (std::rename(tmp.c_str(), port_file.c_str()) != 0) {
      return Fail(absl::StrCat("cannot write --port_file ", port_file));
    }
  }

  int sig = 0;
  sigwait(&signals, &sig);
  ratelimit::Log(ratelimit::LogLevel::kInfo, "signal received",
                 {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}});
  (*server)->Shutdown();
  return 0;
}
