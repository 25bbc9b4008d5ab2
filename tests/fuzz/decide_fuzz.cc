// Fuzz target: a v1 RateLimitRequest through validation (ResolveRequest), then a sequence of
// Check / Consume / Reserve decisions at moving times on BOTH stores, the in-memory reference and
// RocksDB. Properties:
//  - differential: both stores give the same verdicts and hold the same states;
//  - the algebra's invariants: values never exceed the capacity, a reservation never owes more
//    than max_reserved, a denial's retry_at is never before now, a state is equivalent to no
//    state at its full_at;
//  - a Check writes nothing, and a denied request (of any number of limits) changes no state;
//  - the response converts to a valid proto (Timestamps and Durations in range, JSON works);
//  - bad input is INVALID_ARGUMENT or NOT_FOUND naming the field; so is a concurrency limit
//    given to a rate decision (leases decide those), which writes nothing.
//
// The input is decoded twice: as a serialized RateLimitRequest (run through a fixed sequence of
// decisions; seeds are written as text, see tests/fuzz/encode_seeds.sh), and by a small
// structured decoder (FuzzedDataProvider) that also chooses the modes and times.

#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/types/span.h"
#include "google/protobuf/stubs/logging.h"
#include "google/protobuf/util/json_util.h"
#include "ratelimit/v1/ratelimit.pb.h"
#include "server/v1/convert.h"
#include "server/v1/limits_file.h"
#include "storage/limiter.h"
#include "storage/memory/memory_state_store.h"
#include "storage/rocksdb/rocksdb_state_store.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using fuzz::PickDouble;
using fuzz::PickSeconds;
using fuzz::PickString;
using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::TempDir;

// 2026-11-23T00:14:56.789012Z: on no unit boundary, so a window start is never "now".
constexpr int64_t kStartUs = 1795392896789012;

// Server-defined limits a request may name without a config.
constexpr char kLimitsYaml[] = R"(
limits:
  - {name: api, kind: token_bucket, rate: 10, period: 1s, capacity: 20}
  - {name: reserve, kind: token_bucket, rate: 1, period: 1m, max_reserved: 5}
  - {name: window, kind: fixed_window, rate: 100, period: 1h, start: 0s}
  - {name: hashed_window, kind: fixed_window, rate: 3, period: 1d, jitter: 0.5}
)";

const LimitSet& ServerLimits() {
  static const LimitSet* limits = [] {
    absl::StatusOr<LimitSet> parsed = ParseLimitsYaml(kLimitsYaml, "fuzz-limits.yaml");
    FUZZ_CHECK(parsed.ok(), "%s", parsed.status().ToString().c_str());
    return new LimitSet(*std::move(parsed));
  }();
  return *limits;
}

// The RocksDB store, opened once per process in a temporary directory. Its garbage-collection
// clock stays at 0, so compaction never drops a state during a run.
struct RocksDb {
  TempDir dir;
  FakeClock gc_clock{0};
  std::unique_ptr<RocksDbStateStore> store;

  RocksDb() {
    RocksDbStateStoreOptions options;
    options.path = dir.File("db");
    options.clock = &gc_clock;
    options.lock_stripes = 64;
    options.block_cache_bytes = size_t{1} << 20;
    absl::StatusOr<std::unique_ptr<RocksDbStateStore>> opened = RocksDbStateStore::Open(options);
    FUZZ_CHECK(opened.ok(), "%s", opened.status().ToString().c_str());
    store = *std::move(opened);
  }
};

RocksDbStateStore& SharedRocksDb() {
  static RocksDb db;  // closed and its directory removed at exit (not after a crash)
  return *db.store;
}

struct Step {
  Mode mode = Mode::kConsume;
  int64_t advance_us = 0;
  // -1: every limit of the request; otherwise only this one.
  int only = -1;
};

const char* ModeName(Mode m) {
  switch (m) {
    case Mode::kCheck:
      return "Check";
    case Mode::kConsume:
      return "Consume";
    case Mode::kReserve:
      return "Reserve";
  }
  return "?";
}

// Tolerance of comparisons of token amounts: rounding of amounts up to 1e15.
double Slack(double magnitude) { return 1e-9 * std::max(1.0, std::fabs(magnitude)); }

bool ValidTimestamp(const google::protobuf::Timestamp& t) {
  return t.seconds() >= -62135596800 && t.seconds() <= 253402300799 && t.nanos() >= 0 &&
         t.nanos() <= 999999999;
}

bool ValidDuration(const google::protobuf::Duration& d) {
  return d.seconds() >= -315576000000 && d.seconds() <= 315576000000 && d.nanos() > -1000000000 &&
         d.nanos() < 1000000000 && !(d.seconds() > 0 && d.nanos() < 0) &&
         !(d.seconds() < 0 && d.nanos() > 0);
}

void CheckResponse(const v1::RateLimitResponse& r) {
  FUZZ_CHECK(!r.has_retry_at() || ValidTimestamp(r.retry_at()), "retry_at %s",
             r.retry_at().DebugString().c_str());
  FUZZ_CHECK(!r.has_retry_after() || ValidDuration(r.retry_after()), "retry_after %s",
             r.retry_after().DebugString().c_str());
  for (const v1::LimitResult& l : r.results()) {
    FUZZ_CHECK(!l.has_retry_at() || ValidTimestamp(l.retry_at()), "results.retry_at %s",
               l.retry_at().DebugString().c_str());
    FUZZ_CHECK(!l.has_retry_after() || ValidDuration(l.retry_after()), "results.retry_after %s",
               l.retry_after().DebugString().c_str());
  }
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(r, &json);
  FUZZ_CHECK(status.ok(), "the response does not convert to JSON: %s", status.ToString().c_str());
}

using States = std::vector<std::optional<State>>;

States ReadStates(StateStore& store, const std::vector<StateKey>& keys) {
  States out;
  for (const StateKey& k : keys) {
    absl::StatusOr<std::optional<State>> s = store.Get(k);
    FUZZ_CHECK(s.ok(), "Get: %s", s.status().ToString().c_str());
    out.push_back(*s);
  }
  return out;
}

std::string Describe(const std::optional<State>& s) {
  if (!s) return "none";
  return "{value " + std::to_string(s->value) + ", ts " + std::to_string(s->ts_us) + ", full_at " +
         std::to_string(s->full_at_us) + "}";
}

bool SameDecision(const Decision& a, const Decision& b) {
  auto same_double = [](double x, double y) { return x == y || (std::isnan(x) && std::isnan(y)); };
  return a.allowed == b.allowed && a.reason == b.reason && same_double(a.value, b.value) &&
         a.retry_at_us == b.retry_at_us && a.next == b.next;
}

// The algebra's invariants for one decision `d` on limit `l` at `now`.
void CheckDecision(const LimitRequest& l, const Decision& d, Mode mode, int64_t now) {
  const double capacity = l.config.EffectiveCapacity();
  FUZZ_CHECK(!std::isnan(d.value), "%s %s/%s: value is NaN", ModeName(mode), l.name.c_str(),
             l.key.c_str());
  FUZZ_CHECK(d.value <= capacity + Slack(capacity), "%s %s/%s: value %.17g above capacity %.17g",
             ModeName(mode), l.name.c_str(), l.key.c_str(), d.value, capacity);
  if (!d.allowed && d.retry_at_us) {
    FUZZ_CHECK(*d.retry_at_us >= now, "%s %s/%s: denied with retry_at %lld before now %lld",
               ModeName(mode), l.name.c_str(), l.key.c_str(),
               static_cast<long long>(*d.retry_at_us), static_cast<long long>(now));
  }
  if (d.allowed && d.retry_at_us) {
    FUZZ_CHECK(*d.retry_at_us >= now, "%s %s/%s: allowed with retry_at %lld before now %lld",
               ModeName(mode), l.name.c_str(), l.key.c_str(),
               static_cast<long long>(*d.retry_at_us), static_cast<long long>(now));
  }
  if (!d.allowed || mode == Mode::kCheck) return;
  FUZZ_CHECK(d.next.value <= capacity + Slack(capacity), "%s %s/%s: stores %.17g above %.17g",
             ModeName(mode), l.name.c_str(), l.key.c_str(), d.next.value, capacity);
  if (mode == Mode::kReserve && l.config.max_reserved) {
    const double floor = -*l.config.max_reserved;
    FUZZ_CHECK(d.next.value >= floor - Slack(floor), "%s %s/%s: owes %.17g, max_reserved %.17g",
               ModeName(mode), l.name.c_str(), l.key.c_str(), -d.next.value, -floor);
  }
  if (mode == Mode::kConsume) {
    FUZZ_CHECK(d.value >= -Slack(std::max(capacity, l.count)),
               "Consume %s/%s: went into debt (%.17g)", l.name.c_str(), l.key.c_str(), d.value);
  }
  // At full_at the state has refilled: dropping it (what compaction does) changes nothing.
  const State& next = d.next;
  if (next.full_at_us < std::numeric_limits<int64_t>::max() / 2) {
    const int64_t at = std::max(next.full_at_us, now);
    const LimitId id{l.name, l.key};
    const Decision kept = Decide(l.config, id, next, l.count, Mode::kCheck, at);
    const Decision dropped = Decide(l.config, id, std::nullopt, l.count, Mode::kCheck, at);
    FUZZ_CHECK(std::fabs(kept.value - dropped.value) <= Slack(capacity),
               "%s %s/%s: at full_at %lld the state holds %.17g, not %.17g (full)", ModeName(mode),
               l.name.c_str(), l.key.c_str(), static_cast<long long>(next.full_at_us), kept.value,
               dropped.value);
  }
}

// Runs `steps` on `limits` against both stores, checking every property.
void RunScenario(absl::Span<const LimitRequest> limits, const std::vector<Step>& steps) {
  std::vector<StateKey> keys;
  for (const LimitRequest& l : limits) {
    StateKey k{l.name, l.key, l.source};
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(std::move(k));
  }
  // The RocksDB store is shared by all inputs: start from no state for this input's keys.
  RocksDbStateStore& rocks = SharedRocksDb();
  for (const StateKey& k : keys) {
    absl::Status s = rocks.Delete(k).status();
    FUZZ_CHECK(s.ok(), "Delete: %s", s.ToString().c_str());
  }
  MemoryStateStore memory;
  FakeClock clock(kStartUs);
  Limiter on_memory(memory, clock);
  Limiter on_rocks(rocks, clock);

  for (const Step& step : steps) {
    clock.Set(std::clamp<int64_t>(clock.NowMicros() + step.advance_us, 0, int64_t{1} << 62));
    std::vector<LimitRequest> subset;
    if (step.only < 0) {
      subset.assign(limits.begin(), limits.end());
    } else {
      subset.push_back(limits[step.only % limits.size()]);
    }
    const States before = ReadStates(memory, keys);
    const States before_rocks = ReadStates(rocks, keys);
    for (size_t i = 0; i < keys.size(); ++i) {
      FUZZ_CHECK(before[i] == before_rocks[i], "state of %s/%s: memory %s, RocksDB %s",
                 keys[i].name.c_str(), keys[i].key.c_str(), Describe(before[i]).c_str(),
                 Describe(before_rocks[i]).c_str());
    }

    absl::StatusOr<Verdict> a = on_memory.Evaluate(subset, step.mode);
    absl::StatusOr<Verdict> b = on_rocks.Evaluate(subset, step.mode);
    // A concurrency limit is decided by leases: a rate decision refuses it by name, writing
    // nothing.
    if (std::any_of(subset.begin(), subset.end(), [](const LimitRequest& l) {
          return l.config.kind == LimitKind::kConcurrency;
        })) {
      for (const absl::StatusOr<Verdict>* v : {&a, &b}) {
        FUZZ_CHECK(v->status().code() == absl::StatusCode::kInvalidArgument &&
                       absl::StrContains(v->status().message(), "].config.kind"),
                   "%s of a concurrency limit: %s", ModeName(step.mode),
                   v->status().ToString().c_str());
      }
      FUZZ_CHECK(ReadStates(memory, keys) == before && ReadStates(rocks, keys) == before_rocks,
                 "a refused %s of a concurrency limit changed a state", ModeName(step.mode));
      continue;
    }
    FUZZ_CHECK(a.ok() && b.ok(), "Evaluate: memory %s, RocksDB %s", a.status().ToString().c_str(),
               b.status().ToString().c_str());
    FUZZ_CHECK(a->allowed == b->allowed && a->denied_by == b->denied_by &&
                   a->retry_at_us == b->retry_at_us && a->decisions.size() == b->decisions.size(),
               "%s: the stores disagree on the verdict", ModeName(step.mode));
    for (size_t i = 0; i < subset.size(); ++i) {
      FUZZ_CHECK(SameDecision(a->decisions[i], b->decisions[i]),
                 "%s %s/%s: the stores disagree (values %.17g / %.17g)", ModeName(step.mode),
                 subset[i].name.c_str(), subset[i].key.c_str(), a->decisions[i].value,
                 b->decisions[i].value);
      CheckDecision(subset[i], a->decisions[i], step.mode, a->now_us);
    }
    if (!a->allowed && a->retry_at_us) {
      FUZZ_CHECK(*a->retry_at_us >= a->now_us, "%s: denied with retry_at %lld before now %lld",
                 ModeName(step.mode), static_cast<long long>(*a->retry_at_us),
                 static_cast<long long>(a->now_us));
    }

    const States after = ReadStates(memory, keys);
    if (step.mode == Mode::kCheck || !a->allowed) {
      for (size_t i = 0; i < keys.size(); ++i) {
        FUZZ_CHECK(after[i] == before[i], "%s %s of %zu limit(s) changed %s/%s: %s -> %s",
                   a->allowed ? "allowed" : "denied", ModeName(step.mode), subset.size(),
                   keys[i].name.c_str(), keys[i].key.c_str(), Describe(before[i]).c_str(),
                   Describe(after[i]).c_str());
      }
    }

    v1::RateLimitResponse response;
    VerdictToProto(*a, subset, &response);
    CheckResponse(response);
  }
  const States end_memory = ReadStates(memory, keys);
  const States end_rocks = ReadStates(rocks, keys);
  for (size_t i = 0; i < keys.size(); ++i) {
    FUZZ_CHECK(end_memory[i] == end_rocks[i], "final state of %s/%s: memory %s, RocksDB %s",
               keys[i].name.c_str(), keys[i].key.c_str(), Describe(end_memory[i]).c_str(),
               Describe(end_rocks[i]).c_str());
  }
}

// Validates `request`; on success runs `steps`. Bad input must be refused naming the field.
void RunRequest(const v1::RateLimitRequest& request, const std::vector<Step>& steps) {
  absl::StatusOr<LimitRequests> limits = ResolveRequest(request, ServerLimits());
  if (!limits.ok()) {
    const absl::Status& s = limits.status();
    FUZZ_CHECK(
        s.code() == absl::StatusCode::kInvalidArgument || s.code() == absl::StatusCode::kNotFound,
        "unexpected refusal %s", s.ToString().c_str());
    FUZZ_CHECK(absl::StartsWith(s.message(), "limits"), "refusal names no field: %s",
               s.ToString().c_str());
    return;
  }
  FUZZ_CHECK(!limits->empty() && limits->size() == static_cast<size_t>(request.limits_size()),
             "%zu limits resolved from %d", limits->size(), request.limits_size());
  for (const LimitRequest& l : *limits) {
    absl::Status s = ValidateLimitConfig(l.config, "config.");
    FUZZ_CHECK(s.ok(), "accepted an invalid config: %s", s.ToString().c_str());
    FUZZ_CHECK(std::isfinite(l.count) && l.count > 0, "accepted count %.17g", l.count);
  }
  RunScenario(*limits, steps);
}

// The structured decoder: a request of 1..4 limits (named or inline), then up to 8 steps.
void RunStructured(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  static const std::vector<std::string> kNames = {"api",    "reserve", "window", "hashed_window",
                                                  "inline", "inline2", ""};
  static const std::vector<std::string> kKeys = {"", "k", "user:1", std::string(1024, 'k'),
                                                 std::string(1025, 'k')};
  v1::RateLimitRequest request;
  const int n = in.ConsumeIntegralInRange(0, 5) == 5 ? 17 : in.ConsumeIntegralInRange(1, 4);
  for (int i = 0; i < n; ++i) {
    v1::LimitRequest* l = request.add_limits();
    l->set_name(PickString(in, kNames, 300));
    l->set_key(PickString(in, kKeys, 64));
    if (in.ConsumeBool()) l->set_count(PickDouble(in));
    if (in.ConsumeBool()) {
      v1::LimitConfig* c = l->mutable_config();
      c->set_kind(static_cast<v1::Kind>(in.ConsumeIntegralInRange(0, 3)));
      c->set_rate(PickDouble(in));
      if (in.ConsumeBool()) {
        c->mutable_period()->set_seconds(PickSeconds(in));
        if (in.ConsumeBool()) c->mutable_period()->set_nanos(in.ConsumeIntegral<int32_t>());
      }
      if (in.ConsumeBool()) c->set_capacity(PickDouble(in));
      if (in.ConsumeBool()) c->set_max_reserved(PickDouble(in));
      if (in.ConsumeBool()) {
        c->mutable_start()->set_seconds(PickSeconds(in));
        if (in.ConsumeBool()) c->mutable_start()->set_nanos(in.ConsumeIntegral<int32_t>());
      }
      if (in.ConsumeBool()) c->set_jitter(PickDouble(in));
    }
  }
  std::vector<Step> steps(in.ConsumeIntegralInRange(1, 8));
  for (Step& s : steps) {
    s.mode = static_cast<Mode>(in.ConsumeIntegralInRange(0, 2));
    s.only = in.ConsumeBool() ? -1 : in.ConsumeIntegralInRange(0, n - 1);
    switch (in.ConsumeIntegralInRange(0, 4)) {
      case 0:
        s.advance_us = 0;
        break;
      case 1:
        s.advance_us = in.ConsumeIntegralInRange<int64_t>(0, 1000000);
        break;
      case 2:
        s.advance_us = in.ConsumeIntegralInRange<int64_t>(0, int64_t{86400} * 1000000);
        break;
      case 3:  // the wall clock stepping back
        s.advance_us = -in.ConsumeIntegralInRange<int64_t>(0, 3600 * int64_t{1000000});
        break;
      default:
        s.advance_us = std::clamp<int64_t>(PickSeconds(in), 0, int64_t{1} << 32) * 500000;
        break;
    }
  }
  // Only what the wire can carry: strings must be UTF-8, else the server cannot parse the call.
  v1::RateLimitRequest sent;
  if (!sent.ParseFromString(request.SerializeAsString())) return;
  RunRequest(sent, steps);
}

// A serialized request, decided in a fixed sequence: Check, two Consumes, two Reserves and a
// Check at the start time, then a Consume and a Reserve one second, and one day, later.
void RunSerialized(const uint8_t* data, size_t size) {
  if (size > kMaxRequestBytes) return;  // the server refuses larger messages
  v1::RateLimitRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size)) || request.limits_size() == 0) return;
  constexpr int64_t kSecondUs = 1000000;
  const std::vector<Step> steps = {
      {Mode::kCheck, 0},           {Mode::kConsume, 0}, {Mode::kConsume, 0},
      {Mode::kReserve, 0},         {Mode::kReserve, 0}, {Mode::kCheck, 0},
      {Mode::kConsume, kSecondUs}, {Mode::kReserve, 0}, {Mode::kConsume, 86400 * kSecondUs},
      {Mode::kCheck, 0},
  };
  RunRequest(request, steps);
}

}  // namespace
}  // namespace ratelimit

// Protobuf logs every string that is not UTF-8; such inputs are expected here.
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ratelimit::RunSerialized(data, size);
  ratelimit::RunStructured(data, size);
  return 0;
}
