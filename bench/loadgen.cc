// ratelimit_loadgen: closed-loop load generator for ratelimit.v1.RateLimitService/Consume
// (--api=v1), ratelimit.v1.RateLimitService/Batch (--api=v1 --batch=N) or
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit (--api=envoy).
//
// Keeps --concurrency calls in flight, spread over --channels channels (each its own HTTP/2
// connection) and --threads threads (each draining its own CompletionQueue): whenever a call
// completes, the slot it used starts the next one. Calls completing during the --warmup are
// not counted; then calls completing during --duration are counted, and the requests per
// second, latency percentiles (from start of call to completion, as the client sees it) and
// errors are printed.
//
// Each request names one limit, --name, with key "hot" (--keys=1, one hot key) or one of
// "key-0".."key-<N-1>" (--keys=N, visited in a scattered order). With --inline_config (the
// default) it carries a TOKEN_BUCKET config of capacity --capacity refilled at one token per
// hour, so every call is allowed and writes; without it the server must define --name. A call
// whose response says not allowed is counted as "denied".
//
// With --limits=N (N > 1, v1) each request names N limits, "<name>-0".."<name>-<N-1>", every one
// with the same key (and its own inline config): on a Redis Cluster their states live in
// different slots, unless --hash_tag wraps the key in braces ("{hot}", "{key-7}"), which puts
// every state of a request in the slot of that tag.
//
// With --rate=R (open loop) calls start at R per second in total, spread evenly over the
// threads, whatever the latency, as long as a slot (--concurrency) is free; a call's latency is
// measured from the time it was due, so time spent waiting for a free slot counts. Without it
// (closed loop) every slot starts its next call as soon as its previous one completes.
//
// With --batch=N (N >= 1) each call is a Batch of N Consume entries, each the request above;
// with --keys=N > 1 every entry of a call has a key of its own. Decisions are counted per entry
// ("decisions", "decisions_per_s"; a denied entry counts in "denied", an entry with an error in
// "entry_errors"), calls as "requests".
//
// With --api=envoy each request is for domain --domain with --descriptors descriptors; descriptor
// i has one entry {key: "d<i>", value: "hot" or "key-<k>"} (every descriptor of one request has
// the same value). The server's Envoy configuration must define those descriptors (see
// scripts/bench.sh). A response with overall_code OVER_LIMIT is counted as "denied".
//
// Usage: ratelimit_loadgen --target=127.0.0.1:PORT [--api=v1|envoy] [--descriptors=1]
//        [--concurrency=64] [--duration=10s] ...
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "bench/grpc_channels.h"
#include "bench/latency.h"
#include "bench/load_flags.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"
#include "ratelimit/v1/ratelimit.grpc.pb.h"

ABSL_FLAG(std::string, api, "v1",
          "v1: ratelimit.v1.RateLimitService/Consume; envoy: "
          "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit");
ABSL_FLAG(int, descriptors, 1, "--api=envoy: descriptors per request, d0..d<N-1>");
ABSL_FLAG(std::string, domain, "bench", "--api=envoy: the domain of the requests");
ABSL_FLAG(std::string, name, "loadgen", "--api=v1: limit name");
ABSL_FLAG(bool, inline_config, true,
          "--api=v1: send an inline TOKEN_BUCKET config (capacity --capacity, refill 1 "
          "token/hour) so every call is allowed; false: the server must define --name");
ABSL_FLAG(double, capacity, 1e12, "--api=v1: capacity of the inline config");
ABSL_FLAG(bool, omit_receipts, false,
          "--api=v1: set omit_receipts on every request: allowed answers carry no receipts");
ABSL_FLAG(int, batch, 0,
          "--api=v1: 0 = Consume calls; N >= 1 = Batch calls of N Consume entries (1..1000)");
ABSL_FLAG(int, limits, 1,
          "--api=v1: limits per request (1..100); N > 1 names <name>-0..<name>-<N-1>, same key");
ABSL_FLAG(bool, hash_tag, false,
          "--api=v1: wrap the key in braces ({hot}, {key-7}): every limit of a request in one "
          "Redis Cluster slot");
ABSL_FLAG(double, rate, 0,
          "open loop: start calls at this many per second in total (0: closed loop); latency is "
          "measured from when a call was due");
ABSL_FLAG(std::string, write_request, "",
          "write the request of --api and --batch (hot key), gRPC-framed, to this file and exit: "
          "a body for h2load -d, to compare with another client");

namespace ratelimit {
namespace {

namespace rlsv3 = ::envoy::service::ratelimit::v3;

constexpr char kHotKey[] = "hot";

// What the Worker needs to know of an API: its stub, messages and method, where a request's
// keys go, and what a denial looks like.
struct V1Api {
  using Service = v1::RateLimitService;
  using Request = v1::RateLimitRequest;
  using Response = v1::RateLimitResponse;

  static std::unique_ptr<grpc::ClientAsyncResponseReader<Response>> Prepare(
      Service::Stub* stub, grpc::ClientContext* context, const Request& request,
      grpc::CompletionQueue* cq) {
    return stub->PrepareAsyncConsume(context, request, cq);
  }
  template <typename NextKey>
  static void SetKeys(Request& request, NextKey next_key) {
    const std::string key = Key(next_key());
    for (v1::LimitRequest& limit : *request.mutable_limits()) limit.set_key(key);
  }
  static int64_t Decisions(const Response&) { return 1; }
  static int64_t Denied(const Response& response) { return response.allowed() ? 0 : 1; }
  static int64_t EntryErrors(const Response&) { return 0; }

  static std::string Key(const std::string& key) {
    return absl::GetFlag(FLAGS_hash_tag) ? absl::StrCat("{", key, "}") : key;
  }

  static Request Prototype() {
    Request request;
    request.set_omit_receipts(absl::GetFlag(FLAGS_omit_receipts));
    const int n = absl::GetFlag(FLAGS_limits);
    for (int i = 0; i < n; ++i) {
      v1::LimitRequest* limit = request.add_limits();
      limit->set_name(n == 1 ? absl::GetFlag(FLAGS_name)
                             : absl::StrCat(absl::GetFlag(FLAGS_name), "-", i));
      limit->set_key(Key(kHotKey));
      if (absl::GetFlag(FLAGS_inline_config)) {
        v1::LimitConfig* config = limit->mutable_config();
        config->set_kind(v1::TOKEN_BUCKET);
        config->set_rate(1);
        config->mutable_period()->set_seconds(3600);
        config->set_capacity(absl::GetFlag(FLAGS_capacity));
      }
    }
    return request;
  }
};

struct EnvoyApi {
  using Service = rlsv3::RateLimitService;
  using Request = rlsv3::RateLimitRequest;
  using Response = rlsv3::RateLimitResponse;

  static std::unique_ptr<grpc::ClientAsyncResponseReader<Response>> Prepare(
      Service::Stub* stub, grpc::ClientContext* context, const Request& request,
      grpc::CompletionQueue* cq) {
    return stub->PrepareAsyncShouldRateLimit(context, request, cq);
  }
  template <typename NextKey>
  static void SetKeys(Request& request, NextKey next_key) {
    const std::string key = next_key();
    for (auto& descriptor : *request.mutable_descriptors()) {
      descriptor.mutable_entries(0)->set_value(key);
    }
  }
  static int64_t Decisions(const Response&) { return 1; }
  static int64_t Denied(const Response& response) {
    return response.overall_code() == Response::OVER_LIMIT ? 1 : 0;
  }
  static int64_t EntryErrors(const Response&) { return 0; }

  static Request Prototype() {
    Request request;
    request.set_domain(absl::GetFlag(FLAGS_domain));
    const int n = absl::GetFlag(FLAGS_descriptors);
    for (int i = 0; i < n; ++i) {
      auto* entry = request.add_descriptors()->add_entries();
      entry->set_key(absl::StrCat("d", i));
      entry->set_value(kHotKey);
    }
    return request;
  }
};

// Batch calls of --batch Consume entries, each V1Api's request.
struct BatchApi {
  using Service = v1::RateLimitService;
  using Request = v1::BatchRequest;
  using Response = v1::BatchResponse;

  static std::unique_ptr<grpc::ClientAsyncResponseReader<Response>> Prepare(
      Service::Stub* stub, grpc::ClientContext* context, const Request& request,
      grpc::CompletionQueue* cq) {
    return stub->PrepareAsyncBatch(context, request, cq);
  }
  template <typename NextKey>
  static void SetKeys(Request& request, NextKey next_key) {
    for (v1::BatchEntry& entry : *request.mutable_entries()) {
      V1Api::SetKeys(*entry.mutable_request(), next_key);
    }
  }
  static int64_t Decisions(const Response& response) { return response.results_size(); }
  static int64_t Denied(const Response& response) {
    int64_t n = 0;
    for (const v1::BatchResult& r : response.results()) {
      if (r.has_response() && !r.response().allowed()) ++n;
    }
    return n;
  }
  static int64_t EntryErrors(const Response& response) {
    int64_t n = 0;
    for (const v1::BatchResult& r : response.results()) n += r.has_error() ? 1 : 0;
    return n;
  }

  static Request Prototype() {
    Request request;
    const v1::RateLimitRequest one = V1Api::Prototype();
    for (int i = 0; i < absl::GetFlag(FLAGS_batch); ++i) {
      v1::BatchEntry* entry = request.add_entries();
      entry->set_method(v1::BatchEntry::CONSUME);
      *entry->mutable_request() = one;
    }
    return request;
  }
};

struct Settings {
  absl::Time measure_begin;
  absl::Time measure_end;
  absl::Duration deadline;
  int64_t keys = 1;
  double rate_per_thread = 0;  // calls per second each thread starts; 0: closed loop
  int thread_index = 0;        // staggers the open-loop schedules of the threads
  int num_threads = 1;
};

// What one thread saw in the measured window (and the errors outside it, for the record).
struct Tally {
  int64_t ok = 0;
  int64_t decisions = 0;     // one per call, one per entry of a Batch
  int64_t entry_errors = 0;  // Batch entries answered with an error
  int64_t denied = 0;
  int64_t errors = 0;
  int64_t errors_outside_window = 0;
  std::string first_error;
  std::vector<int64_t> latencies_ns;
  // Open loop: how late the pacer woke for each call, and the calls that found every slot busy.
  // Written by the pacer thread only; the fields above by the drainer.
  std::vector<int64_t> pacer_lags_ns;
  int64_t slot_waits = 0;
};

// One call in flight.
template <typename Api>
struct Call {
  grpc::ClientContext context;
  typename Api::Response response;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<typename Api::Response>> reader;
  int64_t start_ns = 0;
  int slot = 0;
};

// Drives the slots of one thread on its own CompletionQueue until the measured window ends.
template <typename Api>
class Worker {
 public:
  using Stub = typename Api::Service::Stub;
  using Request = typename Api::Request;

  Worker(const Settings& settings, const Request& prototype, std::vector<Stub*> slot_stubs,
         uint64_t key_seed)
      : settings_(settings), stubs_(std::move(slot_stubs)), key_counter_(key_seed) {
    requests_.assign(stubs_.size(), prototype);
  }

  void Run() {
    const absl::Duration window = settings_.measure_end - settings_.measure_begin;
    tally_.latencies_ns.reserve(
        static_cast<size_t>(std::min(50e6, 200000.0 * absl::ToDoubleSeconds(window) + 1024)));
    if (settings_.rate_per_thread > 0) {
      RunPaced();
      return;
    }
    int in_flight = 0;
    for (int slot = 0; slot < static_cast<int>(stubs_.size()); ++slot) {
      Start(slot);
      ++in_flight;
    }
    void* tag = nullptr;
    bool ok = false;
    while (in_flight > 0 && cq_.Next(&tag, &ok)) {
      std::unique_ptr<Call<Api>> call(static_cast<Call<Api>*>(tag));
      const int64_t end_ns = MonotonicNanos();
      const absl::Time now = absl::Now();
      Record(*call, end_ns, now);
      if (now < settings_.measure_end) {
        Start(call->slot);
      } else {
        --in_flight;
      }
    }
    cq_.Shutdown();
    while (cq_.Next(&tag, &ok)) delete static_cast<Call<Api>*>(tag);
  }

  Tally& tally() { return tally_; }

 private:
  // Open loop: a call is due every 1/rate_per_thread seconds; it starts when due, or as soon as
  // a slot frees up when every slot is busy (its latency still counts from when it was due).
  //
  // Two threads: this one paces, sleeping until each due time with clock_nanosleep (timer slack
  // 1 ns), and a drainer blocks in the completion queue and records each completion as it
  // arrives. A single thread waiting in CompletionQueue::AsyncNext for the next due time would
  // oversleep: gRPC's poller rounds the wait up to whole milliseconds, and a call started late
  // counts its lateness as latency (it is measured from when it was due). The pacer records how
  // late it woke for each call (the generator's own delay) and how many calls found every slot
  // busy (those wait for the server).
  void RunPaced() {
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    const int64_t interval_ns = static_cast<int64_t>(1e9 / settings_.rate_per_thread);
    int64_t due_ns =
        MonotonicNanos() + interval_ns * settings_.thread_index / settings_.num_threads;
    const int num_slots = static_cast<int>(stubs_.size());
    for (int slot = num_slots - 1; slot >= 0; --slot) free_slots_.push_back(slot);
    std::thread drainer([this] { DrainPaced(); });
    while (absl::Now() < settings_.measure_end) {
      const timespec due{static_cast<time_t>(due_ns / 1000000000),
                         static_cast<long>(due_ns % 1000000000)};
      while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, nullptr) == EINTR) {
      }
      const absl::Time now = absl::Now();
      const bool measured = now >= settings_.measure_begin && now < settings_.measure_end;
      if (measured) tally_.pacer_lags_ns.push_back(MonotonicNanos() - due_ns);
      int slot;
      {
        std::unique_lock<std::mutex> lock(slots_mu_);
        if (free_slots_.empty() && measured) ++tally_.slot_waits;
        slot_freed_.wait(lock, [this] { return !free_slots_.empty(); });
        slot = free_slots_.back();
        free_slots_.pop_back();
      }
      Start(slot, due_ns);
      due_ns += interval_ns;
    }
    {
      std::unique_lock<std::mutex> lock(slots_mu_);
      slot_freed_.wait(lock, [&] { return static_cast<int>(free_slots_.size()) == num_slots; });
    }
    cq_.Shutdown();
    drainer.join();
  }

  // The open loop's completions: recorded when they arrive, their slots handed back to the pacer.
  void DrainPaced() {
    void* tag = nullptr;
    bool ok = false;
    while (cq_.Next(&tag, &ok)) {
      std::unique_ptr<Call<Api>> call(static_cast<Call<Api>*>(tag));
      Record(*call, MonotonicNanos(), absl::Now());
      std::lock_guard<std::mutex> lock(slots_mu_);
      free_slots_.push_back(call->slot);
      slot_freed_.notify_one();
    }
  }

  void Start(int slot, int64_t due_ns = 0) {
    Request& request = requests_[slot];
    if (settings_.keys > 1) {
      // A scattered walk over the keys: consecutive calls (and entries) touch unrelated keys.
      Api::SetKeys(request, [this] {
        const uint64_t index = (key_counter_++ * 0x9E3779B97F4A7C15ull) % settings_.keys;
        return absl::StrCat("key-", index);
      });
    }
    auto call = std::make_unique<Call<Api>>();
    call->slot = slot;
    call->context.set_deadline(absl::ToChronoTime(absl::Now() + settings_.deadline));
    call->start_ns = due_ns > 0 ? due_ns : MonotonicNanos();
    call->reader = Api::Prepare(stubs_[slot], &call->context, request, &cq_);
    call->reader->StartCall();
    // The completion queue holds the call until Run() takes it back from the tag.
    Call<Api>* tag = call.release();
    tag->reader->Finish(&tag->response, &tag->status, tag);
  }

  void Record(const Call<Api>& call, int64_t end_ns, absl::Time now) {
    const bool in_window = now >= settings_.measure_begin && now < settings_.measure_end;
    if (!call.status.ok()) {
      if (tally_.first_error.empty()) {
        tally_.first_error =
            absl::StrCat(call.status.error_code(), ": ", call.status.error_message());
      }
      ++(in_window ? tally_.errors : tally_.errors_outside_window);
      return;
    }
    if (!in_window) return;
    ++tally_.ok;
    tally_.decisions += Api::Decisions(call.response);
    tally_.denied += Api::Denied(call.response);
    tally_.entry_errors += Api::EntryErrors(call.response);
    tally_.latencies_ns.push_back(end_ns - call.start_ns);
  }

  const Settings settings_;
  std::vector<Stub*> stubs_;       // per slot
  std::vector<Request> requests_;  // per slot
  grpc::CompletionQueue cq_;
  uint64_t key_counter_;
  Tally tally_;
  // Open loop only: the slots with no call in flight, shared by the pacer and the drainer.
  std::mutex slots_mu_;
  std::condition_variable slot_freed_;
  std::vector<int> free_slots_;
};

// A gRPC length-prefixed message: flag byte 0 (uncompressed), 4-byte big-endian length, bytes.
bool WriteFramedRequest(const std::string& path, const google::protobuf::Message& request) {
  const std::string body = request.SerializeAsString();
  std::string framed(5, '\0');
  for (int i = 0; i < 4; ++i)
    framed[1 + i] = static_cast<char>((body.size() >> (24 - 8 * i)) & 0xff);
  framed += body;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(framed.data(), 1, framed.size(), f) == framed.size();
  return std::fclose(f) == 0 && ok;
}

// Runs --threads workers of `Api` over `channels` until the measured window ends; returns what
// they saw, merged. Slot s uses channel s % channels and thread s % threads.
template <typename Api>
Tally RunLoad(const std::vector<std::shared_ptr<grpc::Channel>>& channels, const Settings& settings,
              int concurrency, int num_threads) {
  using Stub = typename Api::Service::Stub;
  std::vector<std::unique_ptr<Stub>> stubs;
  for (const auto& channel : channels) stubs.push_back(Api::Service::NewStub(channel));
  const typename Api::Request prototype = Api::Prototype();

  auto workers =
      bench::RunWorkers(stubs, concurrency, num_threads, [&](int t, std::vector<Stub*> slot_stubs) {
        Settings own = settings;
        own.thread_index = t;
        own.num_threads = num_threads;
        return std::make_unique<Worker<Api>>(own, prototype, std::move(slot_stubs),
                                             uint64_t{1000003} * t);
      });

  Tally total;
  for (auto& w : workers) {
    Tally& t = w->tally();
    total.ok += t.ok;
    total.decisions += t.decisions;
    total.entry_errors += t.entry_errors;
    total.denied += t.denied;
    total.errors += t.errors;
    total.errors_outside_window += t.errors_outside_window;
    if (total.first_error.empty()) total.first_error = t.first_error;
    total.latencies_ns.insert(total.latencies_ns.end(), t.latencies_ns.begin(),
                              t.latencies_ns.end());
    total.pacer_lags_ns.insert(total.pacer_lags_ns.end(), t.pacer_lags_ns.begin(),
                               t.pacer_lags_ns.end());
    total.slot_waits += t.slot_waits;
  }
  return total;
}

int Run() {
  const std::string api = absl::GetFlag(FLAGS_api);
  const bool envoy = api == "envoy";
  const int descriptors = absl::GetFlag(FLAGS_descriptors);
  if (!envoy && api != "v1") {
    std::fprintf(stderr, "--api must be v1 or envoy, got \"%s\"\n", api.c_str());
    return 2;
  }
  if (descriptors < 1 || (!envoy && descriptors != 1)) {
    std::fprintf(stderr, "--descriptors must be >= 1, and 1 unless --api=envoy\n");
    return 2;
  }
  const int limits = absl::GetFlag(FLAGS_limits);
  if (limits < 1 || limits > 100 || (envoy && (limits != 1 || absl::GetFlag(FLAGS_hash_tag)))) {
    std::fprintf(stderr, "--limits must be 1..100, and 1 (without --hash_tag) with --api=envoy\n");
    return 2;
  }
  const double rate = absl::GetFlag(FLAGS_rate);
  if (!(rate >= 0) || rate > 1e7) {
    std::fprintf(stderr, "--rate must be 0 (closed loop) or a rate up to 1e7 per second\n");
    return 2;
  }
  const int batch = absl::GetFlag(FLAGS_batch);
  if (batch < 0 || batch > 1000 || (envoy && batch != 0)) {
    std::fprintf(stderr, "--batch must be 0..1000, and 0 with --api=envoy\n");
    return 2;
  }
  if (const std::string path = absl::GetFlag(FLAGS_write_request); !path.empty()) {
    const bool written = envoy       ? WriteFramedRequest(path, EnvoyApi::Prototype())
                         : batch > 0 ? WriteFramedRequest(path, BatchApi::Prototype())
                                     : WriteFramedRequest(path, V1Api::Prototype());
    if (written) return 0;
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return 1;
  }
  const std::string target = absl::GetFlag(FLAGS_target);
  const int concurrency = absl::GetFlag(FLAGS_concurrency);
  const int num_channels = absl::GetFlag(FLAGS_channels);
  const int num_threads = absl::GetFlag(FLAGS_threads);
  const absl::Duration duration = absl::GetFlag(FLAGS_duration);
  const absl::Duration warmup = absl::GetFlag(FLAGS_warmup);
  if (concurrency < 1 || num_channels < 1 || num_threads < 1 || num_threads > concurrency ||
      duration <= absl::ZeroDuration() || warmup < absl::ZeroDuration() ||
      absl::GetFlag(FLAGS_keys) < 1) {
    std::fprintf(stderr,
                 "need --concurrency >= --threads >= 1, --channels >= 1, --keys >= 1, "
                 "--duration > 0, --warmup >= 0\n");
    return 2;
  }

  std::vector<std::shared_ptr<grpc::Channel>> channels;
  if (!bench::ConnectChannels(target, num_channels, &channels)) return 1;

  Settings settings;
  settings.measure_begin = absl::Now() + warmup;
  settings.measure_end = settings.measure_begin + duration;
  settings.deadline = absl::GetFlag(FLAGS_deadline);
  settings.keys = absl::GetFlag(FLAGS_keys);
  settings.rate_per_thread = rate / num_threads;
  Tally total = envoy       ? RunLoad<EnvoyApi>(channels, settings, concurrency, num_threads)
                : batch > 0 ? RunLoad<BatchApi>(channels, settings, concurrency, num_threads)
                            : RunLoad<V1Api>(channels, settings, concurrency, num_threads);

  const LatencySummary latency = Summarize(total.latencies_ns);
  const LatencySummary pacer_lag = Summarize(total.pacer_lags_ns);
  const double seconds = absl::ToDoubleSeconds(duration);
  const double rps = static_cast<double>(total.ok) / seconds;
  const double dps = static_cast<double>(total.decisions) / seconds;

  if (absl::GetFlag(FLAGS_json)) {
    std::printf(
        "{\"target\": \"%s\", \"api\": \"%s\", \"descriptors\": %d, \"concurrency\": %d, "
        "\"channels\": %d, \"threads\": %d, "
        "\"seconds\": %.1f, \"requests\": %lld, \"rps\": %.1f, \"denied\": %lld, "
        "\"errors\": %lld, \"errors_outside_window\": %lld, \"mean_us\": %.1f, "
        "\"p50_us\": %.1f, \"p90_us\": %.1f, \"p99_us\": %.1f, \"p999_us\": %.1f, "
        "\"max_us\": %.1f, \"batch\": %d, \"decisions\": %lld, \"decisions_per_s\": %.1f, "
        "\"entry_errors\": %lld, \"limits\": %d, \"hash_tag\": %s, \"rate\": %.1f, "
        "\"pacer_late_p50_us\": %.1f, \"pacer_late_p99_us\": %.1f, \"slot_waits\": %lld}\n",
        target.c_str(), api.c_str(), descriptors, concurrency, num_channels, num_threads, seconds,
        static_cast<long long>(total.ok), rps, static_cast<long long>(total.denied),
        static_cast<long long>(total.errors), static_cast<long long>(total.errors_outside_window),
        latency.mean_us, latency.p50_us, latency.p90_us, latency.p99_us, latency.p999_us,
        latency.max_us, batch, static_cast<long long>(total.decisions), dps,
        static_cast<long long>(total.entry_errors), limits,
        absl::GetFlag(FLAGS_hash_tag) ? "true" : "false", rate, pacer_lag.p50_us, pacer_lag.p99_us,
        static_cast<long long>(total.slot_waits));
  } else {
    std::printf(
        "target %s, api %s (%d descriptors): %d in flight over %d channels, %d threads; %.1f s "
        "after %.1f s warm-up\n",
        target.c_str(), api.c_str(), descriptors, concurrency, num_channels, num_threads, seconds,
        absl::ToDoubleSeconds(warmup));
    std::printf("requests %lld  rps %.1f  denied %lld  errors %lld (+%lld outside window)\n",
                static_cast<long long>(total.ok), rps, static_cast<long long>(total.denied),
                static_cast<long long>(total.errors),
                static_cast<long long>(total.errors_outside_window));
    if (batch > 0) {
      std::printf("batch %d: decisions %lld  decisions/s %.1f  entry errors %lld\n", batch,
                  static_cast<long long>(total.decisions), dps,
                  static_cast<long long>(total.entry_errors));
    }
    std::printf("latency us: mean %.1f  p50 %.1f  p90 %.1f  p99 %.1f  p99.9 %.1f  max %.1f\n",
                latency.mean_us, latency.p50_us, latency.p90_us, latency.p99_us, latency.p999_us,
                latency.max_us);
    if (rate > 0) {
      std::printf(
          "pacer woke late by (us): p50 %.1f  p99 %.1f  max %.1f; calls that found every "
          "slot busy: %lld\n",
          pacer_lag.p50_us, pacer_lag.p99_us, pacer_lag.max_us,
          static_cast<long long>(total.slot_waits));
    }
  }
  if (!total.first_error.empty()) {
    std::fprintf(stderr, "first error: %s\n", total.first_error.c_str());
  }
  return total.ok > 0 ? 0 : 1;
}

}  // namespace
}  // namespace ratelimit

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "ratelimit_loadgen --target=HOST:PORT [--api=v1|envoy] [--batch=N] [flags]: closed-loop "
      "load on ratelimit.v1.RateLimitService/Consume, .../Batch (--batch=N) or "
      "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit");
  absl::ParseCommandLine(argc, argv);
  return ratelimit::Run();
}
