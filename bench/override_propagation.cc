// ratelimit_override_propagation: how long a runtime override set on one server takes to decide
// on another server sharing its store.
//
// For each of --changes changes: sets an override on server --a (SetOverride of limit --name,
// key "prop-<i>", a capacity no earlier run used), then asks server --b to Check that key every
// --poll_interval until its answer names the override (LimitResult.override) with that capacity.
// B is polled from the moment the SetOverride is sent (from a thread of its own). The sample is
// the time from A's answer to the arrival of B's first answer that applied the change (its
// resolution: one poll interval plus one Check); negative when B applied it before A answered
// (A reloads its overrides before it answers). Also reported: from the SetOverride's sending to
// that answer, and the most Checks any change needed after A's answer. Before each change the tool
// waits a random time up to --max_gap, so that the changes fall at every point of B's refresh
// period rather than in step with it. With --a equal to --b it measures how soon the server that
// made a change decides with it.
//
// --load_rps adds a background stream of Consume calls on B (limit --name, key "load"), paced at
// that rate from --load_threads threads (each one call at a time), so that the propagation is
// measured on a server that is deciding.
//
// Prints p50/p90/p99/max (ms) of the samples, and of SetOverride's own latency on A; one JSON
// object with --json. Exits 2 on a bad flag, 1 when a call fails or a change is not applied
// within --timeout.
//
// Usage: ratelimit_override_propagation --a=HOST:PORT --b=HOST:PORT --name=LIMIT
//          [--admin_token_file=FILE (else $RATELIMIT_ADMIN_TOKEN)] [--changes=100]
//          [--poll_interval=2ms] [--max_gap=250ms] [--timeout=5s] [--load_rps=0]
//          [--load_threads=8] [--json]
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/latency.h"
#include "grpcpp/grpcpp.h"
#include "ratelimit/v1/ratelimit.grpc.pb.h"
#include "storage/admin_token.h"

ABSL_FLAG(std::string, a, "", "the server the changes are made on (host:port); required");
ABSL_FLAG(std::string, b, "", "the server polled for them (host:port); required");
ABSL_FLAG(std::string, name, "", "a limit of both servers' limits file; required");
ABSL_FLAG(std::string, admin_token_file, "",
          "file holding the admin token (first line); default: $RATELIMIT_ADMIN_TOKEN");
ABSL_FLAG(int, changes, 100, "changes to make, one at a time");
ABSL_FLAG(absl::Duration, poll_interval, absl::Milliseconds(2), "time between Checks on B");
ABSL_FLAG(absl::Duration, max_gap, absl::Milliseconds(250),
          "before each change, a random pause of up to this long");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(5),
          "how long a change may take to reach B, from its sending");
ABSL_FLAG(double, load_rps, 0, "background Consume calls per second on B; 0: none");
ABSL_FLAG(int, load_threads, 8, "threads making the background calls, each one call at a time");
ABSL_FLAG(bool, json, false, "print one JSON object instead of text");

namespace ratelimit {
namespace {

using v1::OverrideService;
using v1::RateLimitService;

constexpr absl::Duration kCallDeadline = absl::Seconds(5);

void SetDeadline(grpc::ClientContext& context) {
  context.set_deadline(absl::ToChronoTime(absl::Now() + kCallDeadline));
}

// Consume calls on `stub` at `rps` in total from `threads` threads, each one call at a time at
// its share of the rate, until Stop(); a thread whose call is late starts the next at once (the
// pace is kept on average, never by bursts beyond one call per thread).
class BackgroundLoad {
 public:
  BackgroundLoad(RateLimitService::Stub& stub, std::string name, double rps, int threads)
      : stub_(stub), name_(std::move(name)), interval_(absl::Seconds(threads) / rps) {
    start_ = absl::Now();
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
  }
  BackgroundLoad(const BackgroundLoad&) = delete;
  BackgroundLoad& operator=(const BackgroundLoad&) = delete;
  ~BackgroundLoad() { Stop(); }

  void Stop() {
    stop_.store(true);
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
    if (end_ == absl::InfinitePast()) end_ = absl::Now();
  }
  // After Stop: calls answered per second from the start to Stop, and the calls that failed.
  double achieved_rps() const {
    return static_cast<double>(calls_.load()) / absl::ToDoubleSeconds(end_ - start_);
  }
  int64_t errors() const { return errors_.load(); }

 private:
  void Loop() {
    v1::RateLimitRequest request;
    v1::LimitRequest* limit = request.add_limits();
    limit->set_name(name_);
    limit->set_key("load");
    request.set_omit_receipts(true);
    absl::Time due = absl::Now();
    while (!stop_.load()) {
      const absl::Time now = absl::Now();
      if (due > now) absl::SleepFor(due - now);
      due = std::max(due + interval_, absl::Now() - interval_);
      grpc::ClientContext context;
      SetDeadline(context);
      v1::RateLimitResponse response;
      if (!stub_.Consume(&context, request, &response).ok()) errors_.fetch_add(1);
      calls_.fetch_add(1);
    }
  }

  RateLimitService::Stub& stub_;
  const std::string name_;
  const absl::Duration interval_;
  absl::Time start_;
  absl::Time end_ = absl::InfinitePast();
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> calls_{0};
  std::atomic<int64_t> errors_{0};
  std::vector<std::thread> threads_;
};

// Sets the override of `key` on A: capacity `capacity`. Fails with the call's error.
absl::Status SetOverride(OverrideService::Stub& a, const std::string& token,
                         const std::string& name, const std::string& key, double capacity) {
  v1::SetOverrideRequest request;
  v1::Override* o = request.mutable_override();
  o->mutable_target()->set_name(name);
  o->mutable_target()->set_key(key);
  o->mutable_limit()->set_capacity(capacity);
  o->set_reason("propagation benchmark");
  request.set_actor("ratelimit_override_propagation");
  grpc::ClientContext context;
  SetDeadline(context);
  context.AddMetadata("authorization", "Bearer " + token);
  v1::SetOverrideResponse response;
  const grpc::Status s = a.SetOverride(&context, request, &response);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat("SetOverride on --a: ", s.error_message()));
  }
  return absl::OkStatus();
}

// Whether B's Check of (`name`, `key`) decides with the override of `key` at `capacity`.
absl::StatusOr<bool> Applied(RateLimitService::Stub& b, const std::string& name,
                             const std::string& key, double capacity) {
  v1::RateLimitRequest request;
  v1::LimitRequest* limit = request.add_limits();
  limit->set_name(name);
  limit->set_key(key);
  grpc::ClientContext context;
  SetDeadline(context);
  v1::RateLimitResponse response;
  const grpc::Status s = b.Check(&context, request, &response);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat("Check on --b: ", s.error_message()));
  }
  if (response.results_size() != 1) return absl::InternalError("Check on --b: no result");
  const v1::LimitResult& r = response.results(0);
  return r.override() == key && r.capacity() == capacity;
}

void PrintMs(const char* what, const LatencySummary& s) {
  std::printf("%s: p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms (%zu samples)\n", what,
              s.p50_us / 1000, s.p90_us / 1000, s.p99_us / 1000, s.max_us / 1000, s.count);
}

std::string JsonMs(const LatencySummary& s) {
  return absl::StrCat("{\"count\": ", s.count, ", \"mean_ms\": ", s.mean_us / 1000,
                      ", \"p50_ms\": ", s.p50_us / 1000, ", \"p90_ms\": ", s.p90_us / 1000,
                      ", \"p99_ms\": ", s.p99_us / 1000, ", \"max_ms\": ", s.max_us / 1000, "}");
}

int Run() {
  const std::string a_target = absl::GetFlag(FLAGS_a);
  const std::string b_target = absl::GetFlag(FLAGS_b);
  const std::string name = absl::GetFlag(FLAGS_name);
  const int changes = absl::GetFlag(FLAGS_changes);
  const absl::Duration poll = absl::GetFlag(FLAGS_poll_interval);
  const absl::Duration max_gap = absl::GetFlag(FLAGS_max_gap);
  const absl::Duration timeout = absl::GetFlag(FLAGS_timeout);
  const double load_rps = absl::GetFlag(FLAGS_load_rps);
  const int load_threads = absl::GetFlag(FLAGS_load_threads);
  const auto bad = [](const char* flag, const char* rule) {
    std::fprintf(stderr, "%s %s\n", flag, rule);
    return 2;
  };
  if (a_target.empty()) return bad("--a", "is required");
  if (b_target.empty()) return bad("--b", "is required");
  if (name.empty()) return bad("--name", "is required");
  if (changes <= 0) return bad("--changes", "must be > 0");
  if (poll <= absl::ZeroDuration()) return bad("--poll_interval", "must be > 0");
  if (max_gap < absl::ZeroDuration()) return bad("--max_gap", "must be >= 0");
  if (timeout <= absl::ZeroDuration()) return bad("--timeout", "must be > 0");
  if (!(load_rps >= 0 && load_rps <= 1e6)) return bad("--load_rps", "must be in [0, 1e6]");
  if (load_threads < 1 || load_threads > 64) return bad("--load_threads", "must be in [1, 64]");
  absl::StatusOr<AdminTokenSource> token =
      ReadAdminToken(absl::GetFlag(FLAGS_admin_token_file), "RATELIMIT_ADMIN_TOKEN");
  if (!token.ok()) return bad("--admin_token_file", token.status().ToString().c_str());
  if (token->token.empty()) {
    return bad("--admin_token_file", "is required (or $RATELIMIT_ADMIN_TOKEN)");
  }

  auto a =
      OverrideService::NewStub(grpc::CreateChannel(a_target, grpc::InsecureChannelCredentials()));
  auto b =
      RateLimitService::NewStub(grpc::CreateChannel(b_target, grpc::InsecureChannelCredentials()));
  std::unique_ptr<RateLimitService::Stub> load_stub;
  std::unique_ptr<BackgroundLoad> load;
  if (load_rps > 0) {
    // A connection of its own (an argument the other channel lacks keeps gRPC from sharing
    // one), so that the load's calls do not queue the polls.
    grpc::ChannelArguments args;
    args.SetInt("ratelimit.background_load", 1);
    load_stub = RateLimitService::NewStub(
        grpc::CreateCustomChannel(b_target, grpc::InsecureChannelCredentials(), args));
    load = std::make_unique<BackgroundLoad>(*load_stub, name, load_rps, load_threads);
  }

  // Capacities no earlier run against the same store used: a run's base from the clock.
  const double base = 1e6 + static_cast<double>(absl::ToUnixSeconds(absl::Now()) % 1000000) * 1e3;
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<int64_t> gap_us(0, absl::ToInt64Microseconds(max_gap));
  std::vector<int64_t> propagation_ns, from_send_ns, set_ns;
  int64_t polls = 0;
  int max_checks_after_answer = 0;
  for (int i = 0; i < changes; ++i) {
    absl::SleepFor(absl::Microseconds(gap_us(rng)));
    const std::string key = absl::StrCat("prop-", i);
    const double capacity = base + i;
    // SetOverride from a thread of its own, B polled from the moment it is sent: a server that
    // takes long to answer (it reloads its overrides first) may be answering after B applied.
    const int64_t sent = MonotonicNanos();
    std::atomic<int64_t> answered{0};
    absl::Status set_status;
    std::thread set_thread([&] {
      set_status = SetOverride(*a, token->token, name, key, capacity);
      answered.store(MonotonicNanos());
    });
    const int64_t give_up = sent + absl::ToInt64Nanoseconds(timeout);
    int64_t applied_at = 0;
    int checks_after_answer = 0;
    while (applied_at == 0) {
      const int64_t poll_start = MonotonicNanos();
      const bool after_answer = answered.load() != 0;
      absl::StatusOr<bool> applied = Applied(*b, name, key, capacity);
      ++polls;
      if (after_answer) ++checks_after_answer;
      const int64_t now = MonotonicNanos();
      if (!applied.ok() || now > give_up) {
        set_thread.join();
        std::fprintf(
            stderr, "%s\n",
            !applied.ok()
                ? applied.status().ToString().c_str()
                : absl::StrCat("change ", i, " (key ", key, ") did not reach --b").c_str());
        return 1;
      }
      if (*applied) {
        applied_at = now;
        break;
      }
      const int64_t next = poll_start + absl::ToInt64Nanoseconds(poll);
      if (next > now) absl::SleepFor(absl::Nanoseconds(next - now));
    }
    set_thread.join();
    if (!set_status.ok()) {
      std::fprintf(stderr, "%s\n", set_status.ToString().c_str());
      return 1;
    }
    set_ns.push_back(answered.load() - sent);
    propagation_ns.push_back(applied_at - answered.load());
    from_send_ns.push_back(applied_at - sent);
    max_checks_after_answer = std::max(max_checks_after_answer, checks_after_answer);
  }
  double achieved = 0;
  int64_t load_errors = 0;
  if (load) {
    load->Stop();
    achieved = load->achieved_rps();
    load_errors = load->errors();
  }

  const LatencySummary propagation = Summarize(propagation_ns);
  const LatencySummary set = Summarize(set_ns);
  const LatencySummary from_send = Summarize(from_send_ns);
  const double polls_per_change = static_cast<double>(polls) / changes;
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("%s\n",
                absl::StrCat("{\"changes\": ", changes,
                             ", \"same_server\": ", a_target == b_target ? "true" : "false",
                             ", \"poll_interval_ms\": ", absl::ToDoubleMilliseconds(poll),
                             ", \"propagation\": ", JsonMs(propagation), ", \"set_override\": ",
                             JsonMs(set), ", \"from_send\": ", JsonMs(from_send),
                             ", \"polls_per_change\": ", polls_per_change,
                             ", \"max_checks_after_answer\": ", max_checks_after_answer,
                             ", \"load_rps_requested\": ", load_rps, ", \"load_rps\": ", achieved,
                             ", \"load_errors\": ", load_errors, "}")
                    .c_str());
  } else {
    PrintMs("A's answer to B's first decision with the change", propagation);
    PrintMs("SetOverride on A", set);
    PrintMs("SetOverride sent on A to B's first decision with the change", from_send);
    std::printf("%.1f Checks on B per change", polls_per_change);
    if (load)
      std::printf("; background load %.0f Consume/s (%lld errors)", achieved,
                  static_cast<long long>(load_errors));
    std::printf("\n");
  }
  return 0;
}

}  // namespace
}  // namespace ratelimit

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "the time for a runtime override set on one server to decide on another");
  absl::ParseCommandLine(argc, argv);
  return ratelimit::Run();
}
