// ratelimit_rlqs_bench: one global limit held two ways against a running ratelimit-server, in one
// run: a fleet of simulated Envoys on the Rate Limit Quota Service (RLQS: each Envoy enforces the
// token bucket it is assigned and reports its usage every interval), then the same number of
// clients calling RLS v3 ShouldRateLimit once per request (--rls_in_flight calls at a time each).
// Both offer the same unequal demands, --demand times the limit in total. For each way: requests
// offered, admitted and denied per second, and the server's CPU per admitted request
// (/proc/<--server_pid>/stat, user + system, over the measured window); then the ratio RLQS /
// RLS v3 of that CPU, and RLQS's over-assignment: how far the requests admitted exceeded
// --limit × the window, in percent (bound 5%). With --idle_duration, first the server's CPU with
// no client of ours: the background work both ways' figures include.
//
// The server must serve RLQS (--rlqs) with an Envoy domain file holding both a descriptor
// {--key: --value} whose rule is --limit requests per second, and a quota_buckets rule matching
// {--key: --value} with the same rate (scripts/bench.sh writes one). Demands: client i of N
// offers --demand × --limit × (i + 1) / (1 + 2 + ... + N) requests per second.
//
// Usage: ratelimit_rlqs_bench --target=127.0.0.1:PORT --server_pid=PID --limit=L [flags]
#include <sys/types.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/process_cpu.h"
#include "bench/rlqs_fleet.h"
#include "grpcpp/grpcpp.h"

ABSL_FLAG(std::string, target, "127.0.0.1:8081", "server address");
ABSL_FLAG(int, server_pid, 0, "the server's process id, whose CPU time is measured (required)");
ABSL_FLAG(double, limit, 0,
          "the global limit in requests per second: the rate of the descriptor's rule and of the "
          "quota_buckets rule in the server's domain file (required)");
ABSL_FLAG(std::string, domain, "rlqs_bench", "the Envoy domain of the bucket and the descriptor");
ABSL_FLAG(std::string, key, "tenant", "the BucketId key and the descriptor entry's key");
ABSL_FLAG(std::string, value, "bench", "the BucketId value and the descriptor entry's value");
ABSL_FLAG(int, clients, 10, "simulated Envoys (RLQS) and ShouldRateLimit callers (RLS v3)");
ABSL_FLAG(int, rls_in_flight, 4,
          "RLS v3: calls in flight per client (threads sharing its channel, each paced at a "
          "share of the client's demand)");
ABSL_FLAG(double, demand, 2.0, "the demand of all clients together, as a multiple of --limit");
ABSL_FLAG(absl::Duration, reporting_interval, absl::Seconds(1),
          "RLQS: how often each Envoy reports, whole seconds");
ABSL_FLAG(absl::Duration, rlqs_warmup, absl::Seconds(3),
          "RLQS: time before measuring (the server learns the demands), at least one reporting "
          "interval");
ABSL_FLAG(absl::Duration, rlqs_duration, absl::Seconds(10), "RLQS: measured time");
ABSL_FLAG(absl::Duration, rls_warmup, absl::Seconds(1), "RLS v3: time before measuring");
ABSL_FLAG(absl::Duration, rls_duration, absl::Seconds(10), "RLS v3: measured time");
ABSL_FLAG(absl::Duration, idle_duration, absl::ZeroDuration(),
          "first, the server's CPU over this long with no client of ours (its own background "
          "work, part of both ways' figures); 0: not measured");
ABSL_FLAG(bool, json, false, "print one JSON object instead of text");

namespace ratelimit::bench {
namespace {

// The over-assignment the issue allows: admitted at most 5% above the limit.
constexpr double kBoundPercent = 5;

// A way's figures over its measured window.
struct WayResult {
  FleetTally tally;
  double seconds = 0;
  int64_t server_cpu_us = 0;

  double PerSecond(uint64_t n) const { return static_cast<double>(n) / seconds; }
  // Server CPU microseconds per admitted request; 0 when nothing was admitted.
  double CpuPerAdmittedUs() const {
    return tally.admitted > 0
               ? static_cast<double>(server_cpu_us) / static_cast<double>(tally.admitted)
               : 0;
  }
};

// Runs `way` from now until `end`, measuring the server's CPU over [begin, end).
template <typename Way>
absl::StatusOr<WayResult> Measure(pid_t pid, absl::Time begin, absl::Time end, Way way) {
  absl::StatusOr<int64_t> cpu_begin, cpu_end;
  std::thread meter([&] {
    absl::SleepFor(begin - absl::Now());
    cpu_begin = ProcessCpuMicros(pid);
    absl::SleepFor(end - absl::Now());
    cpu_end = ProcessCpuMicros(pid);
  });
  WayResult result;
  result.tally = way(begin, end);
  meter.join();
  if (!cpu_begin.ok()) return cpu_begin.status();
  if (!cpu_end.ok()) return cpu_end.status();
  result.seconds = absl::ToDoubleSeconds(end - begin);
  result.server_cpu_us = *cpu_end - *cpu_begin;
  return result;
}

std::string WayJson(const WayResult& r) {
  return absl::StrFormat(
      "{\"seconds\": %.3f, \"offered_per_s\": %.1f, \"admitted_per_s\": %.1f, "
      "\"denied_per_s\": %.1f, \"admitted\": %d, \"errors\": %d, \"server_cpu_s\": %.3f, "
      "\"cpu_us_per_admitted\": %.4f}",
      r.seconds, r.PerSecond(r.tally.offered), r.PerSecond(r.tally.admitted),
      r.PerSecond(r.tally.denied), r.tally.admitted, r.tally.errors, r.server_cpu_us / 1e6,
      r.CpuPerAdmittedUs());
}

void PrintRow(const char* way, const WayResult& r, double limit) {
  std::printf("%-24s %11.1f %11.1f %11.1f %9.1f%% %12.3f %14.4f\n", way,
              r.PerSecond(r.tally.offered), r.PerSecond(r.tally.admitted),
              r.PerSecond(r.tally.denied), 100 * r.PerSecond(r.tally.admitted) / limit,
              r.server_cpu_us / 1e6, r.CpuPerAdmittedUs());
}

int Run() {
  const pid_t pid = absl::GetFlag(FLAGS_server_pid);
  const double limit = absl::GetFlag(FLAGS_limit);
  const int clients = absl::GetFlag(FLAGS_clients);
  const double demand = absl::GetFlag(FLAGS_demand);
  const absl::Duration interval = absl::GetFlag(FLAGS_reporting_interval);
  const absl::Duration rlqs_warmup = absl::GetFlag(FLAGS_rlqs_warmup);
  const absl::Duration rlqs_duration = absl::GetFlag(FLAGS_rlqs_duration);
  const absl::Duration rls_warmup = absl::GetFlag(FLAGS_rls_warmup);
  const absl::Duration rls_duration = absl::GetFlag(FLAGS_rls_duration);
  FleetSettings settings;
  if (pid <= 0) {
    std::fprintf(stderr, "--server_pid: required, the server's process id\n");
    return 2;
  }
  if (!(limit > 0) || limit > 4e9) {
    std::fprintf(stderr, "--limit: required, requests per second in (0, 4e9]\n");
    return 2;
  }
  if (clients < 1 || clients > 1000) {
    std::fprintf(stderr, "--clients: 1..1000\n");
    return 2;
  }
  settings.calls_in_flight = absl::GetFlag(FLAGS_rls_in_flight);
  if (settings.calls_in_flight < 1 || settings.calls_in_flight > 64) {
    std::fprintf(stderr, "--rls_in_flight: 1..64\n");
    return 2;
  }
  if (!(demand > 0) || demand > 1000) {
    std::fprintf(stderr, "--demand: a multiple of --limit in (0, 1000]\n");
    return 2;
  }
  if (interval < absl::Seconds(1) || interval % absl::Seconds(1) != absl::ZeroDuration()) {
    std::fprintf(stderr, "--reporting_interval: whole seconds, at least 1s\n");
    return 2;
  }
  if (rlqs_warmup < interval) {
    std::fprintf(stderr, "--rlqs_warmup: at least one --reporting_interval\n");
    return 2;
  }
  if (rlqs_duration <= absl::ZeroDuration() || rls_duration <= absl::ZeroDuration() ||
      rls_warmup < absl::ZeroDuration() ||
      absl::GetFlag(FLAGS_idle_duration) < absl::ZeroDuration()) {
    std::fprintf(
        stderr,
        "--rlqs_duration and --rls_duration: > 0; --rls_warmup and --idle_duration: >= 0\n");
    return 2;
  }
  if (absl::StatusOr<int64_t> cpu = ProcessCpuMicros(pid); !cpu.ok()) {
    std::fprintf(stderr, "--server_pid: %s\n", std::string(cpu.status().message()).c_str());
    return 2;
  }

  settings.target = absl::GetFlag(FLAGS_target);
  settings.domain = absl::GetFlag(FLAGS_domain);
  settings.key = absl::GetFlag(FLAGS_key);
  settings.value = absl::GetFlag(FLAGS_value);
  settings.reporting_interval = interval;
  const double weights = clients * (clients + 1) / 2.0;
  for (int i = 0; i < clients; ++i) {
    settings.demands.push_back(demand * limit * (i + 1) / weights);
  }
  if (!grpc::CreateChannel(settings.target, grpc::InsecureChannelCredentials())
           ->WaitForConnected(absl::ToChronoTime(absl::Now() + absl::Seconds(5)))) {
    std::fprintf(stderr, "cannot connect to %s\n", settings.target.c_str());
    return 1;
  }

  // The server's own background work, with no client of ours.
  const absl::Duration idle_duration = absl::GetFlag(FLAGS_idle_duration);
  absl::StatusOr<WayResult> idle = WayResult{};
  if (idle_duration > absl::ZeroDuration()) {
    idle = Measure(pid, absl::Now(), absl::Now() + idle_duration, [](absl::Time, absl::Time e) {
      absl::SleepFor(e - absl::Now());
      return FleetTally{};
    });
    if (!idle.ok()) {
      std::fprintf(stderr, "server CPU: %s\n", std::string(idle.status().message()).c_str());
      return 1;
    }
  }
  absl::Time begin = absl::Now() + rlqs_warmup;
  absl::StatusOr<WayResult> rlqs =
      Measure(pid, begin, begin + rlqs_duration,
              [&](absl::Time b, absl::Time e) { return RunRlqsFleet(settings, b, e); });
  if (!rlqs.ok()) {
    std::fprintf(stderr, "server CPU: %s\n", std::string(rlqs.status().message()).c_str());
    return 1;
  }
  begin = absl::Now() + rls_warmup;
  absl::StatusOr<WayResult> rls =
      Measure(pid, begin, begin + rls_duration,
              [&](absl::Time b, absl::Time e) { return RunRlsCallers(settings, b, e); });
  if (!rls.ok()) {
    std::fprintf(stderr, "server CPU: %s\n", std::string(rls.status().message()).c_str());
    return 1;
  }

  const double over_percent = std::max(
      0.0, 100 * (static_cast<double>(rlqs->tally.admitted) / (limit * rlqs->seconds) - 1));
  const double ratio =
      rls->CpuPerAdmittedUs() > 0 ? rlqs->CpuPerAdmittedUs() / rls->CpuPerAdmittedUs() : 0;
  if (absl::GetFlag(FLAGS_json)) {
    absl::PrintF(
        "{\"target\": \"%s\", \"limit\": %.1f, \"clients\": %d, \"demand\": %.2f, "
        "\"reporting_interval_s\": %d, \"rlqs\": %s, \"rls\": %s, "
        "\"rlqs_over_assignment_percent\": %.3f, \"rlqs_within_bound\": %s, "
        "\"rlqs_admitted_without_assignment\": %d, \"rlqs_assigned_rate\": %.1f, "
        "\"rlqs_reports\": %d, \"rlqs_actions\": %d, \"cpu_per_admitted_ratio\": %.6f, "
        "\"idle_seconds\": %.3f, \"idle_server_cpu_s\": %.3f, \"rls_in_flight\": %d}\n",
        settings.target, limit, clients, demand, absl::ToInt64Seconds(interval), WayJson(*rlqs),
        WayJson(*rls), over_percent, over_percent <= kBoundPercent ? "true" : "false",
        rlqs->tally.admitted_without_assignment, rlqs->tally.assigned_rate, rlqs->tally.reports,
        rlqs->tally.actions, ratio, idle->seconds, idle->server_cpu_us / 1e6,
        settings.calls_in_flight);
  } else {
    std::printf(
        "target %s, domain %s, {%s: %s}, limit %.0f/s; %d clients offering %.0f/s in total "
        "(%.2fx the limit, %.0f to %.0f/s each)\n",
        settings.target.c_str(), settings.domain.c_str(), settings.key.c_str(),
        settings.value.c_str(), limit, clients, demand * limit, demand, settings.demands.front(),
        settings.demands.back());
    std::printf(
        "RLQS: reports every %lld s, %.1f s measured after %.1f s; RLS v3: %.1f s after %.1f s\n",
        static_cast<long long>(absl::ToInt64Seconds(interval)), rlqs->seconds,
        absl::ToDoubleSeconds(rlqs_warmup), rls->seconds, absl::ToDoubleSeconds(rls_warmup));
    std::printf("%-24s %11s %11s %11s %10s %12s %14s\n", "way", "offered/s", "admitted/s",
                "denied/s", "of limit", "server CPU s", "CPU us/admit");
    PrintRow("RLQS (Envoy enforces)", *rlqs, limit);
    PrintRow("RLS v3 ShouldRateLimit", *rls, limit);
    std::printf("server CPU per admitted request, RLQS / RLS v3: %.3g (%.3g%%)\n", ratio,
                100 * ratio);
    if (idle->seconds > 0) {
      std::printf("the server idle (no client of ours): %.3f s of CPU over %.1f s\n",
                  idle->server_cpu_us / 1e6, idle->seconds);
    }
    std::printf(
        "RLQS over-assignment: %.2f%% above the limit (bound %.0f%%: %s); admitted without an "
        "assignment: %llu; assigned at the end: %.0f/s in total; %llu reports, %llu actions\n",
        over_percent, kBoundPercent, over_percent <= kBoundPercent ? "within" : "EXCEEDED",
        static_cast<unsigned long long>(rlqs->tally.admitted_without_assignment),
        rlqs->tally.assigned_rate, static_cast<unsigned long long>(rlqs->tally.reports),
        static_cast<unsigned long long>(rlqs->tally.actions));
  }
  for (const WayResult* r : {&*rlqs, &*rls}) {
    if (r->tally.errors > 0) {
      std::fprintf(stderr, "%llu errors, the first: %s\n",
                   static_cast<unsigned long long>(r->tally.errors), r->tally.first_error.c_str());
    }
  }
  const bool ok = rlqs->tally.errors == 0 && rls->tally.errors == 0 && rlqs->tally.admitted > 0 &&
                  rls->tally.admitted > 0;
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace ratelimit::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "ratelimit_rlqs_bench --target=HOST:PORT --server_pid=PID --limit=L [flags]: one global "
      "limit held by simulated Envoys on RLQS and by RLS v3 ShouldRateLimit callers, the "
      "server's CPU per admitted request both ways");
  absl::ParseCommandLine(argc, argv);
  return ratelimit::bench::Run();
}
