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
// With --stream the slots send their Acquire and Release as ops of
// ratelimit.v1.RateLimitService/LeaseStream streams instead of unary calls: one stream per
// channel, the slots of a channel multiplexed on it (bench/lease_stream_slots.h), each op with an
// id of its own by which its result finds its slot. A slot still sends its Release only once its
// Acquire's result has come, so a pair is still two decisions in sequence; slots, keys, inline
// config, counts and latencies are as above (an op's latency runs from the moment its slot sends
// it, time queued behind the stream's write in flight included, to its result). A result with a
// code other than 0 counts as an error. A channel's stream and its slots are driven by one thread
// (channel c's by thread c % --threads), so min(--threads, --channels) threads run. Once every
// slot has stopped, each stream is half-closed (WritesDone) and finished. The JSON's "transport"
// is "stream" ("unary" without --stream).
//
// Usage: ratelimit_lease_loadgen --target=127.0.0.1:PORT [--keys=1] [--concurrency=64]
//        [--duration=10s] [--stream] [--json] ...
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "bench/grpc_channels.h"
#include "bench/latency.h"
#include "bench/lease_stream_slots.h"
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
ABSL_FLAG(bool, stream, false,
          "send each slot's Acquire and Release as ops of LeaseStream streams instead of unary "
          "calls: one stream per channel, the channel's slots multiplexed on it, each channel's "
          "stream and slots on one thread (min(--threads, --channels) threads)");

namespace ratelimit {
namespace {

using Stub = v1::RateLimitService::Stub;

struct Settings {
  absl::Time measure_begin;
  absl::Time measure_end;
  absl::Duration deadline;
  int64_t keys = 1;
  bool stream = false;
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

// The pair a slot has in progress.
struct SlotState {
  std::string key;
  bool release = false;  // its Release is in flight (false: its Acquire)
  int64_t pair_start_ns = 0;
  int64_t start_ns = 0;
};

// One unary call in flight: the Acquire of a pair, or its Release.
struct Call {
  grpc::ClientContext context;
  v1::AcquireResponse acquired;
  v1::ReleaseResponse released;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::AcquireResponse>> acquire_reader;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::ReleaseResponse>> release_reader;
  int slot = 0;
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
// every lease it acquired is released: each call a unary one, or with --stream an op of the
// LeaseStream of the slot's channel.
class Worker {
 public:
  Worker(const Settings& settings, std::vector<Stub*> slot_stubs, uint64_t key_seed)
      : settings_(settings),
        stubs_(std::move(slot_stubs)),
        slots_(stubs_.size()),
        key_counter_(key_seed) {
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
    if (settings_.stream) {
      // A stream may last until a call's deadline after the window: its last pairs start then.
      streams_ = std::make_unique<bench::LeaseStreamSlots>(
          &cq_, stubs_, settings_.measure_end + settings_.deadline,
          [this](int slot, const v1::LeaseOpResult& result) { StreamResult(slot, result); },
          [this](const std::string& error) { RecordError(error, InWindow(absl::Now())); });
    }
    active_ = static_cast<int>(stubs_.size());
    for (int slot = 0; slot < static_cast<int>(stubs_.size()); ++slot) {
      if (!StartAcquire(slot)) --active_;
    }
    void* tag = nullptr;
    bool ok = false;
    if (streams_ == nullptr) {
      while (active_ > 0 && cq_.Next(&tag, &ok)) {
        std::unique_ptr<Call> call(static_cast<Call*>(tag));
        const grpc::Status& status = call->status;
        Completed(call->slot,
                  status.ok() ? std::string()
                              : absl::StrCat(status.error_code(), ": ", status.error_message()),
                  call->acquired, call->released);
      }
    } else {
      // Once every slot has stopped, the streams are half-closed; the thread goes on until the
      // server has ended each of them.
      while (!streams_->finished() && cq_.Next(&tag, &ok)) {
        streams_->Proceed(tag, ok);
        if (active_ == 0) streams_->CloseAll();
      }
    }
    cq_.Shutdown();
    while (cq_.Next(&tag, &ok)) {
      if (streams_ == nullptr) delete static_cast<Call*>(tag);
    }
  }

  Tally& tally() { return tally_; }

 private:
  bool InWindow(absl::Time now) const {
    return now >= settings_.measure_begin && now < settings_.measure_end;
  }

  // Accounts for the end of slot's Acquire or Release (`error` empty when it succeeded, else
  // "<code>: <message>"), then starts its Release after an allowed Acquire, or its next Acquire;
  // or stops the slot, once the window has closed or its stream takes no more ops.
  void Completed(int slot, const std::string& error, const v1::AcquireResponse& acquired,
                 const v1::ReleaseResponse& released) {
    const SlotState& state = slots_[slot];
    const int64_t end_ns = MonotonicNanos();
    const absl::Time now = absl::Now();
    const bool in_window = InWindow(now);
    if (!error.empty()) {
      RecordError(absl::StrCat(state.release ? "Release " : "Acquire ", error), in_window);
    } else if (!state.release) {
      if (in_window) tally_.acquire_ns.push_back(end_ns - state.start_ns);
      if (acquired.allowed()) {
        if (!StartRelease(slot, acquired.lease().id())) --active_;
        return;
      }
      if (in_window) ++tally_.denied;
    } else if (in_window) {
      tally_.release_ns.push_back(end_ns - state.start_ns);
      if (released.state() == v1::NOT_HELD) ++tally_.not_held;
      ++tally_.pairs;
      tally_.pair_ns.push_back(end_ns - state.pair_start_ns);
    }
    if (now >= settings_.measure_end || !StartAcquire(slot)) --active_;
  }

  // A LeaseStream result for slot's op: its code and message as a call's status, its answer as
  // the call's response.
  void StreamResult(int slot, const v1::LeaseOpResult& result) {
    const bool release = slots_[slot].release;
    std::string error;
    if (result.code() != 0) {
      error = absl::StrCat(result.code(), ": ", result.message());
    } else if (release ? !result.has_release() : !result.has_acquire()) {
      error =
          absl::StrCat("0: a result without its ", release ? "ReleaseResponse" : "AcquireResponse");
    }
    Completed(slot, error, result.acquire(), result.release());
  }

  // Starts slot's next pair with its Acquire. False when the slot's stream takes no more ops.
  bool StartAcquire(int slot) {
    SlotState& state = slots_[slot];
    state.key = settings_.keys > 1 ? absl::StrCat("key-", (key_counter_++ * 0x9E3779B97F4A7C15ull) %
                                                              static_cast<uint64_t>(settings_.keys))
                                   : "hot";
    state.release = false;
    acquire_prototype_.mutable_limits(0)->set_key(state.key);
    if (streams_ != nullptr) {
      state.start_ns = state.pair_start_ns = MonotonicNanos();
      return streams_->Acquire(slot, acquire_prototype_);
    }
    auto call = std::make_unique<Call>();
    call->slot = slot;
    call->context.set_deadline(absl::ToChronoTime(absl::Now() + settings_.deadline));
    state.start_ns = state.pair_start_ns = MonotonicNanos();
    call->acquire_reader =
        stubs_[slot]->PrepareAsyncAcquire(&call->context, acquire_prototype_, &cq_);
    call->acquire_reader->StartCall();
    // The completion queue holds the call until Run() takes it back from the tag.
    Call* tag = call.release();
    tag->acquire_reader->Finish(&tag->acquired, &tag->status, tag);
    return true;
  }

  // Starts the Release of the lease slot's Acquire got. False when the slot's stream takes no
  // more ops.
  bool StartRelease(int slot, const std::string& lease_id) {
    SlotState& state = slots_[slot];
    state.release = true;
    release_prototype_.set_key(state.key);
    release_prototype_.set_lease_id(lease_id);
    if (streams_ != nullptr) {
      state.start_ns = MonotonicNanos();
      return streams_->Release(slot, release_prototype_);
    }
    auto call = std::make_unique<Call>();
    call->slot = slot;
    call->context.set_deadline(absl::ToChronoTime(absl::Now() + settings_.deadline));
    state.start_ns = MonotonicNanos();
    call->release_reader =
        stubs_[slot]->PrepareAsyncRelease(&call->context, release_prototype_, &cq_);
    call->release_reader->StartCall();
    Call* tag = call.release();
    tag->release_reader->Finish(&tag->released, &tag->status, tag);
    return true;
  }

  void RecordError(const std::string& error, bool in_window) {
    if (tally_.first_error.empty()) tally_.first_error = error;
    ++(in_window ? tally_.errors : tally_.errors_outside_window);
  }

  const Settings settings_;
  std::vector<Stub*> stubs_;      // per slot
  std::vector<SlotState> slots_;  // per slot
  int active_ = 0;                // slots not stopped
  v1::AcquireRequest acquire_prototype_;
  v1::ReleaseRequest release_prototype_;
  grpc::CompletionQueue cq_;
  std::unique_ptr<bench::LeaseStreamSlots> streams_;  // with --stream
  uint64_t key_counter_;
  Tally tally_;
};

// With --stream: the slots of channel c (slot s is on channel s % channels) all on thread
// c % num_threads, which drives that channel's stream; each thread's worker runs on a thread of
// its own, and is joined. REQUIRES: 1 <= num_threads <= min(channels, concurrency).
std::vector<std::unique_ptr<Worker>> RunStreamWorkers(
    const std::vector<std::unique_ptr<Stub>>& stubs, int concurrency, int num_threads,
    const Settings& settings) {
  std::vector<std::vector<Stub*>> slot_stubs(num_threads);
  for (int s = 0; s < concurrency; ++s) {
    const size_t channel = s % stubs.size();
    slot_stubs[channel % num_threads].push_back(stubs[channel].get());
  }
  std::vector<std::unique_ptr<Worker>> workers;
  for (int t = 0; t < num_threads; ++t) {
    workers.push_back(
        std::make_unique<Worker>(settings, std::move(slot_stubs[t]), uint64_t{1000003} * t));
  }
  std::vector<std::thread> threads;
  for (auto& w : workers) threads.emplace_back([&w] { w->Run(); });
  for (std::thread& t : threads) t.join();
  return workers;
}

int Run() {
  const std::string target = absl::GetFlag(FLAGS_target);
  const int concurrency = absl::GetFlag(FLAGS_concurrency);
  const int num_channels = absl::GetFlag(FLAGS_channels);
  int num_threads = absl::GetFlag(FLAGS_threads);
  const bool stream = absl::GetFlag(FLAGS_stream);
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
  settings.stream = stream;
  std::vector<std::unique_ptr<Worker>> workers;
  if (stream) {
    // Each channel's stream on one thread: the threads that run, and that the output reports.
    num_threads = std::min(num_threads, num_channels);
    workers = RunStreamWorkers(stubs, concurrency, num_threads, settings);
  } else {
    workers = bench::RunWorkers(
        stubs, concurrency, num_threads, [&](int t, std::vector<Stub*> slot_stubs) {
          return std::make_unique<Worker>(settings, std::move(slot_stubs), uint64_t{1000003} * t);
        });
  }
  Tally total;
  for (auto& w : workers) total.Add(w->tally());

  const LatencySummary pair = Summarize(total.pair_ns);
  const LatencySummary acquire = Summarize(total.acquire_ns);
  const LatencySummary release = Summarize(total.release_ns);
  const double seconds = absl::ToDoubleSeconds(duration);
  const double pairs_per_s = static_cast<double>(total.pairs) / seconds;
  if (absl::GetFlag(FLAGS_json)) {
    std::printf(
        "{\"target\": \"%s\", \"transport\": \"%s\", \"concurrency\": %d, \"channels\": %d, "
        "\"threads\": %d, "
        "\"keys\": %lld, \"seconds\": %.1f, \"pairs\": %lld, \"pairs_per_s\": %.1f, "
        "\"decisions_per_s\": %.1f, \"denied\": %lld, \"not_held\": %lld, \"errors\": %lld, "
        "\"errors_outside_window\": %lld, \"mean_us\": %.1f, \"p50_us\": %.1f, \"p90_us\": %.1f, "
        "\"p99_us\": %.1f, \"p999_us\": %.1f, \"max_us\": %.1f, \"acquire_p50_us\": %.1f, "
        "\"acquire_p99_us\": %.1f, \"release_p50_us\": %.1f, \"release_p99_us\": %.1f}\n",
        target.c_str(), stream ? "stream" : "unary", concurrency, num_channels, num_threads,
        static_cast<long long>(keys), seconds, static_cast<long long>(total.pairs), pairs_per_s,
        2 * pairs_per_s, static_cast<long long>(total.denied),
        static_cast<long long>(total.not_held), static_cast<long long>(total.errors),
        static_cast<long long>(total.errors_outside_window), pair.mean_us, pair.p50_us, pair.p90_us,
        pair.p99_us, pair.p999_us, pair.max_us, acquire.p50_us, acquire.p99_us, release.p50_us,
        release.p99_us);
  } else {
    std::printf(
        "target %s, %lld keys: %d slots over %d channels%s, %d threads; %.1f s after %.1f s "
        "warm-up\n",
        target.c_str(), static_cast<long long>(keys), concurrency, num_channels,
        stream ? " (one LeaseStream each)" : "", num_threads, seconds,
        absl::ToDoubleSeconds(warmup));
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
      "ratelimit_lease_loadgen --target=HOST:PORT [--keys=N] [--stream] [flags]: closed-loop "
      "acquire+release pairs on one concurrency limit of ratelimit.v1.RateLimitService, as unary "
      "calls or (--stream) as ops of LeaseStream streams");
  absl::ParseCommandLine(argc, argv);
  return ratelimit::Run();
}
