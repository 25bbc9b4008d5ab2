// ratelimit_lease_loadgen: closed-loop load generator for concurrency limits: acquire+release
// pairs (ratelimit.v1.RateLimitService/Acquire, then /Release of the lease it got).
//
// Keeps --concurrency slots busy, spread over --channels channels (each its own HTTP/2
// connection) and --threads threads (each draining its own CompletionQueue). A slot calls
// Acquire for one slot of one concurrency limit, --name, on key "hot" (--keys=1) or one of
// "key-0".."key-<N-1>" (--keys=N, visited in a scattered order); when it is allowed, the slot
// calls Release of that lease on the same key, then starts its next Acquire. So every slot has
// one call in flight at any time, as a slot of ratelimit_loadgen does, and a pair is two
// decisions. With --inline_config (the default) each request carries a CONCURRENCY config of
// capacity --capacity (default 1e9: nothing is refused) and lease_ttl --ttl; without it the
// server must define --name as a concurrency limit.
//
// Pairs whose Release completes during --duration (after the --warmup) are counted: pairs per
// second, decisions per second (twice that), the latency of a pair (from the start of its Acquire
// to the end of its Release) and of each call. A refused Acquire counts as "denied", a Release
// answering NOT_HELD as "not_held" (neither happens when the capacity is large enough and the
// TTL longer than a pair). A lease acquired as the window closes is still released.
//
// Usage: ratelimit_lease_loadgen --target=127.0.0.1:PORT [--keys=1] [--concurrency=64]
//        [--duration=10s] [--json] ...
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "bench/grpc_channels.h"
#include "bench/latency.h"
#include "bench/load_flags.h"
#include "google/protobuf/duration.pb.h"
#include "grpcpp/grpcpp.h"
#include "ratelimit/v1/ratelimit.grpc.pb.h"

ABSL_FLAG(std::string, name, "leases", "the concurrency limit's name");
ABSL_FLAG(bool, inline_config, true,
          "send an inline CONCURRENCY config (capacity --capacity, lease_ttl --ttl); false: the "
          "server must define --name as a concurrency limit");
ABSL_FLAG(int64_t, capacity, 1000000000, "slots of the inline config (1..1e9)");
ABSL_FLAG(absl::Duration, ttl, absl::Seconds(60), "lease_ttl of the inline config (1ms..1h)");

namespace ratelimit {
namespace {

using Stub = v1::RateLimitService::Stub;

struct Settings {
  absl::Time measure_begin;
  absl::Time measure_end;
  absl::Duration deadline;
  int64_t keys = 1;
};

// What one thread saw in the measured window (and the errors outside it, for the record).
struct Tally {
  int64_t pairs = 0;
  int64_t denied = 0;
  int64_t not_held = 0;
  int64_t errors = 0;
  int64_t errors_outside_window = 0;
  std::string first_error;
  std::vector<int64_t> pair_ns;
  std::vector<int64_t> acquire_ns;
  std::vector<int64_t> release_ns;

  void Add(Tally& t) {
    pairs += t.pairs;
    denied += t.denied;
    not_held += t.not_held;
    errors += t.errors;
    errors_outside_window += t.errors_outside_window;
    if (first_error.empty()) first_error = t.first_error;
    pair_ns.insert(pair_ns.end(), t.pair_ns.begin(), t.pair_ns.end());
    acquire_ns.insert(acquire_ns.end(), t.acquire_ns.begin(), t.acquire_ns.end());
    release_ns.insert(release_ns.end(), t.release_ns.begin(), t.release_ns.end());
  }
};

// One call in flight: the Acquire of a pair, or its Release.
struct Call {
  grpc::ClientContext context;
  bool release = false;
  v1::AcquireResponse acquired;
  v1::ReleaseResponse released;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::AcquireResponse>> acquire_reader;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::ReleaseResponse>> release_reader;
  int slot = 0;
  std::string key;
  int64_t pair_start_ns = 0;
  int64_t start_ns = 0;
};

v1::LimitConfig InlineConfig() {
  v1::LimitConfig config;
  config.set_kind(v1::CONCURRENCY);
  config.set_capacity(static_cast<double>(absl::GetFlag(FLAGS_capacity)));
  const absl::Duration ttl = absl::GetFlag(FLAGS_ttl);
  const int64_t seconds = absl::ToInt64Seconds(ttl);
  config.mutable_lease_ttl()->set_seconds(seconds);
  config.mutable_lease_ttl()->set_nanos(
      static_cast<int32_t>(absl::ToInt64Nanoseconds(ttl - absl::Seconds(seconds))));
  return config;
}

// Drives the slots of one thread on its own CompletionQueue until the measured window ends and
// every lease it acquired is released.
class Worker {
 public:
  Worker(const Settings& settings, std::vector<Stub*> slot_stubs, uint64_t key_seed)
      : settings_(settings), stubs_(std::move(slot_stubs)), key_counter_(key_seed) {
    v1::LimitRequest* limit = acquire_prototype_.add_limits();
    limit->set_name(absl::GetFlag(FLAGS_name));
    release_prototype_.set_name(absl::GetFlag(FLAGS_name));
    if (absl::GetFlag(FLAGS_inline_config)) {
      *limit->mutable_config() = InlineConfig();
      *release_prototype_.mutable_config() = InlineConfig();
    }
  }

  void Run() {
    const double seconds = absl::ToDoubleSeconds(settings_.measure_end - settings_.measure_begin);
    const size_t reserve = static_cast<size_t>(std::min(20e6, 100000.0 * seconds + 1024));
    tally_.pair_ns.reserve(reserve);
    tally_.acquire_ns.reserve(reserve);
    tally_.release_ns.reserve(reserve);
    int in_flight = 0;
    for (int slot = 0; slot < static_cast<int>(stubs_.size()); ++slot) {
      StartAcquire(slot);
      ++in_flight;
    }
    void* tag = nullptr;
    bool ok = false;
    while (in_flight > 0 && cq_.Next(&tag, &ok)) {
      std::unique_ptr<Call> call(static_cast<Call*>(tag));
      const int64_t end_ns = MonotonicNanos();
      const absl::Time now = absl::Now();
      const bool in_window = now >= settings_.measure_begin && now < settings_.measure_end;
      if (!call->status.ok()) {
        RecordError(*call, in_window);
      } else if (!call->release) {
        if (in_window) tally_.acquire_ns.push_back(end_ns - call->start_ns);
        if (call->acquired.allowed()) {
          StartRelease(*call);
          continue;
        }
        if (in_window) ++tally_.denied;
      } else if (in_window) {
        tally_.release_ns.push_back(end_ns - call->start_ns);
        if (call->released.state() == v1::NOT_HELD) ++tally_.not_held;
        ++tally_.pairs;
        tally_.pair_ns.push_back(end_ns - call->pair_start_ns);
      }
      if (now < settings_.measure_end) {
        StartAcquire(call->slot);
      } else {
        --in_flight;
      }
    }
    cq_.Shutdown();
    while (cq_.Next(&tag, &ok)) delete static_cast<Call*>(tag);
  }

  Tally& tally() { return tally_; }

 private:
  void StartAcquire(int slot) {
    auto call = std::make_unique<Call>();
    call->slot = slot;
    call->key = settings_.keys > 1 ? absl::StrCat("key-", (key_counter_++ * 0x9E3779B97F4A7C15ull) %
                                                              static_cast<uint64_t>(settings_.keys))
                                   : "hot";
    acquire_prototype_.mutable_limits(0)->set_key(call->key);
    call->context.set_deadline(absl::ToChronoTime(absl::Now() + settings_.deadline));
    call->start_ns = call->pair_start_ns = MonotonicNanos();
    call->acquire_reader =
        stubs_[slot]->PrepareAsyncAcquire(&call->context, acquire_prototype_, &cq_);
    call->acquire_reader->StartCall();
    // The completion queue holds the call until Run() takes it back from the tag.
    Call* tag = call.release();
    tag->acquire_reader->Finish(&tag->acquired, &tag->status, tag);
  }

  void StartRelease(const Call& acquire) {
    auto call = std::make_unique<Call>();
    call->release = true;
    call->slot = acquire.slot;
    call->key = acquire.key;
    call->pair_start_ns = acquire.pair_start_ns;
    release_prototype_.set_key(acquire.key);
    release_prototype_.set_lease_id(acquire.acquired.lease().id());
    call->context.set_deadline(absl::ToChronoTime(absl::Now() + settings_.deadline));
    call->start_ns = MonotonicNanos();
    call->release_reader =
        stubs_[call->slot]->PrepareAsyncRelease(&call->context, release_prototype_, &cq_);
    call->release_reader->StartCall();
    Call* tag = call.release();
    tag->release_reader->Finish(&tag->released, &tag->status, tag);
  }

  void RecordError(const Call& call, bool in_window) {
    if (tally_.first_error.empty()) {
      tally_.first_error =
          absl::StrCat(call.release ? "Release " : "Acquire ", call.status.error_code(), ": ",
                       call.status.error_message());
    }
    ++(in_window ? tally_.errors : tally_.errors_outside_window);
  }

  const Settings settings_;
  std::vector<Stub*> stubs_;  // per slot
  v1::AcquireRequest acquire_prototype_;
  v1::ReleaseRequest release_prototype_;
  grpc::CompletionQueue cq_;
  uint64_t key_counter_;
  Tally tally_;
};

int Run() {
  const std::string target = absl::GetFlag(FLAGS_target);
  const int concurrency = absl::GetFlag(FLAGS_concurrency);
  const int num_channels = absl::GetFlag(FLAGS_channels);
  const int num_threads = absl::GetFlag(FLAGS_threads);
  const absl::Duration duration = absl::GetFlag(FLAGS_duration);
  const absl::Duration warmup = absl::GetFlag(FLAGS_warmup);
  const int64_t keys = absl::GetFlag(FLAGS_keys);
  const int64_t capacity = absl::GetFlag(FLAGS_capacity);
  const absl::Duration ttl = absl::GetFlag(FLAGS_ttl);
  if (concurrency < 1) return std::fprintf(stderr, "--concurrency must be >= 1\n"), 2;
  if (num_channels < 1) return std::fprintf(stderr, "--channels must be >= 1\n"), 2;
  if (num_threads < 1 || num_threads > concurrency) {
    return std::fprintf(stderr, "--threads must be 1..--concurrency\n"), 2;
  }
  if (duration <= absl::ZeroDuration()) return std::fprintf(stderr, "--duration must be > 0\n"), 2;
  if (warmup < absl::ZeroDuration()) return std::fprintf(stderr, "--warmup must be >= 0\n"), 2;
  if (keys < 1) return std::fprintf(stderr, "--keys must be >= 1\n"), 2;
  if (capacity < 1 || capacity > 1000000000) {
    return std::fprintf(stderr, "--capacity must be 1..1000000000\n"), 2;
  }
  if (ttl < absl::Milliseconds(1) || ttl > absl::Hours(1)) {
    return std::fprintf(stderr, "--ttl must be 1ms..1h\n"), 2;
  }

  std::vector<std::shared_ptr<grpc::Channel>> channels;
  if (!bench::ConnectChannels(target, num_channels, &channels)) return 1;
  std::vector<std::unique_ptr<Stub>> stubs;
  for (const auto& channel : channels) stubs.push_back(v1::RateLimitService::NewStub(channel));

  Settings settings;
  settings.measure_begin = absl::Now() + warmup;
  settings.measure_end = settings.measure_begin + duration;
  settings.deadline = absl::GetFlag(FLAGS_deadline);
  settings.keys = keys;
  auto workers =
      bench::RunWorkers(stubs, concurrency, num_threads, [&](int t, std::vector<Stub*> slot_stubs) {
        return std::make_unique<Worker>(settings, std::move(slot_stubs), uint64_t{1000003} * t);
      });
  Tally total;
  for (auto& w : workers) total.Add(w->tally());

  const LatencySummary pair = Summarize(total.pair_ns);
  const LatencySummary acquire = Summarize(total.acquire_ns);
  const LatencySummary release = Summarize(total.release_ns);
  const double seconds = absl::ToDoubleSeconds(duration);
  const double pairs_per_s = static_cast<double>(total.pairs) / seconds;
  if (absl::GetFlag(FLAGS_json)) {
    std::printf(
        "{\"target\": \"%s\", \"concurrency\": %d, \"channels\": %d, \"threads\": %d, "
        "\"keys\": %lld, \"seconds\": %.1f, \"pairs\": %lld, \"pairs_per_s\": %.1f, "
        "\"decisions_per_s\": %.1f, \"denied\": %lld, \"not_held\": %lld, \"errors\": %lld, "
        "\"errors_outside_window\": %lld, \"mean_us\": %.1f, \"p50_us\": %.1f, \"p90_us\": %.1f, "
        "\"p99_us\": %.1f, \"p999_us\": %.1f, \"max_us\": %.1f, \"acquire_p50_us\": %.1f, "
        "\"acquire_p99_us\": %.1f, \"release_p50_us\": %.1f, \"release_p99_us\": %.1f}\n",
        target.c_str(), concurrency, num_channels, num_threads, static_cast<long long>(keys),
        seconds, static_cast<long long>(total.pairs), pairs_per_s, 2 * pairs_per_s,
        static_cast<long long>(total.denied), static_cast<long long>(total.not_held),
        static_cast<long long>(total.errors), static_cast<long long>(total.errors_outside_window),
        pair.mean_us, pair.p50_us, pair.p90_us, pair.p99_us, pair.p999_us, pair.max_us,
        acquire.p50_us, acquire.p99_us, release.p50_us, release.p99_us);
  } else {
    std::printf(
        "target %s, %lld keys: %d slots over %d channels, %d threads; %.1f s after %.1f s "
        "warm-up\n",
        target.c_str(), static_cast<long long>(keys), concurrency, num_channels, num_threads,
        seconds, absl::ToDoubleSeconds(warmup));
    std::printf(
        "pairs %lld  pairs/s %.1f  decisions/s %.1f  denied %lld  not held %lld  errors %lld "
        "(+%lld outside window)\n",
        static_cast<long long>(total.pairs), pairs_per_s, 2 * pairs_per_s,
        static_cast<long long>(total.denied), static_cast<long long>(total.not_held),
        static_cast<long long>(total.errors), static_cast<long long>(total.errors_outside_window));
    std::printf("pair latency us: mean %.1f  p50 %.1f  p90 %.1f  p99 %.1f  p99.9 %.1f  max %.1f\n",
                pair.mean_us, pair.p50_us, pair.p90_us, pair.p99_us, pair.p999_us, pair.max_us);
    std::printf("acquire us: p50 %.1f  p99 %.1f; release us: p50 %.1f  p99 %.1f\n", acquire.p50_us,
                acquire.p99_us, release.p50_us, release.p99_us);
  }
  if (!total.first_error.empty()) {
    std::fprintf(stderr, "first error: %s\n", total.first_error.c_str());
  }
  return total.pairs > 0 ? 0 : 1;
}

}  // namespace
}  // namespace ratelimit

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "ratelimit_lease_loadgen --target=HOST:PORT [--keys=N] [flags]: closed-loop acquire+release "
      "pairs on one concurrency limit of ratelimit.v1.RateLimitService");
  absl::ParseCommandLine(argc, argv);
  return ratelimit::Run();
}
