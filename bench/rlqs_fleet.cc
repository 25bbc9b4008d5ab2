#include "bench/rlqs_fleet.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "bench/local_quota.h"
#include "envoy/service/rate_limit_quota/v3/rlqs.grpc.pb.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace ratelimit::bench {
namespace {

namespace rlqs_v3 = ::envoy::service::rate_limit_quota::v3;
namespace rls_v3 = ::envoy::service::ratelimit::v3;

// A channel of its own (its own HTTP/2 connection), as each Envoy has: without a local subchannel
// pool, channels with the same target and arguments share one connection.
std::shared_ptr<grpc::Channel> OwnChannel(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

void SleepUntil(absl::Time t) {
  const absl::Duration d = t - absl::Now();
  if (d > absl::ZeroDuration()) absl::SleepFor(d);
}

bool InWindow(absl::Time t, absl::Time begin, absl::Time end) { return t >= begin && t < end; }

void AddError(FleetTally& tally, const std::string& error) {
  ++tally.errors;
  if (tally.first_error.empty()) tally.first_error = error;
}

// One simulated Envoy of RunRlqsFleet.
class SimulatedEnvoy {
 public:
  SimulatedEnvoy(const FleetSettings& settings, double demand, absl::Time open_at, absl::Time begin,
                 absl::Time end)
      : settings_(settings), demand_(demand), open_at_(open_at), begin_(begin), end_(end) {}

  SimulatedEnvoy(const SimulatedEnvoy&) = delete;
  SimulatedEnvoy& operator=(const SimulatedEnvoy&) = delete;

  // On its own thread: until `end`, then the stream is closed.
  void Run() {
    SleepUntil(open_at_);
    auto stub = rlqs_v3::RateLimitQuotaService::NewStub(OwnChannel(settings_.target));
    grpc::ClientContext context;
    // Nothing waits forever on a server that stops answering.
    context.set_deadline(absl::ToChronoTime(end_ + absl::Seconds(30)));
    stream_ = stub->StreamRateLimitQuotas(&context);
    std::thread reader([this] { Read(); });
    const int64_t interval_s = absl::ToInt64Seconds(settings_.reporting_interval);
    bool open = Report(/*first=*/true, 0);
    absl::Time last = absl::Now();
    absl::Time next_report = last + settings_.reporting_interval;
    double owed = 0;
    while (open && last < end_) {
      SleepUntil(std::min(last + settings_.tick, next_report));
      const absl::Time now = absl::Now();
      owed += demand_ * absl::ToDoubleSeconds(now - last);
      last = now;
      const uint64_t arrived = static_cast<uint64_t>(std::floor(owed));
      owed -= static_cast<double>(arrived);
      Decide(arrived, now);
      if (now >= next_report) {
        open = Report(/*first=*/false, interval_s);
        next_report += settings_.reporting_interval;
      }
    }
    stream_->WritesDone();
    reader.join();
    const grpc::Status status = stream_->Finish();
    if (!status.ok()) {
      absl::MutexLock lock(&mu_);
      AddError(tally_, absl::StrCat("StreamRateLimitQuotas: ", status.error_code(), ": ",
                                    status.error_message()));
    }
  }

  FleetTally tally() const {
    absl::MutexLock lock(&mu_);
    FleetTally t = tally_;
    t.actions = actions_;
    return t;
  }

 private:
  void Decide(uint64_t arrived, absl::Time now) {
    const int64_t now_us = absl::ToUnixMicros(now);
    absl::MutexLock lock(&mu_);
    const uint64_t without_before = quota_.admitted_without_assignment();
    const uint64_t allowed = quota_.Admit(arrived, now_us);
    allowed_ += allowed;
    denied_ += arrived - allowed;
    if (!InWindow(now, begin_, end_)) return;
    tally_.offered += arrived;
    tally_.admitted += allowed;
    tally_.denied += arrived - allowed;
    tally_.admitted_without_assignment += quota_.admitted_without_assignment() - without_before;
    tally_.assigned_rate = quota_.AssignedRate(now_us);
  }

  // Sends the usage since the last report; false when the stream is broken.
  bool Report(bool first, int64_t elapsed_seconds) {
    rlqs_v3::RateLimitQuotaUsageReports message;
    if (first) message.set_domain(settings_.domain);
    rlqs_v3::RateLimitQuotaUsageReports::BucketQuotaUsage* usage =
        message.add_bucket_quota_usages();
    (*usage->mutable_bucket_id()->mutable_bucket())[settings_.key] = settings_.value;
    usage->mutable_time_elapsed()->set_seconds(elapsed_seconds);
    {
      absl::MutexLock lock(&mu_);
      usage->set_num_requests_allowed(std::exchange(allowed_, 0));
      usage->set_num_requests_denied(std::exchange(denied_, 0));
    }
    if (!stream_->Write(message)) return false;
    absl::MutexLock lock(&mu_);
    ++tally_.reports;
    return true;
  }

  void Read() {
    rlqs_v3::RateLimitQuotaResponse response;
    while (stream_->Read(&response)) {
      const int64_t now_us = absl::ToUnixMicros(absl::Now());
      absl::MutexLock lock(&mu_);
      for (const auto& action : response.bucket_action()) {
        ++actions_;
        quota_.Apply(action, now_us);
      }
    }
  }

  const FleetSettings& settings_;
  const double demand_;
  const absl::Time open_at_, begin_, end_;
  std::unique_ptr<grpc::ClientReaderWriter<rlqs_v3::RateLimitQuotaUsageReports,
                                           rlqs_v3::RateLimitQuotaResponse>>
      stream_;
  mutable absl::Mutex mu_;
  LocalQuota quota_ ABSL_GUARDED_BY(mu_);
  uint64_t allowed_ ABSL_GUARDED_BY(mu_) = 0;  // since the last report
  uint64_t denied_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t actions_ ABSL_GUARDED_BY(mu_) = 0;
  FleetTally tally_ ABSL_GUARDED_BY(mu_);
};

// One caller thread of RunRlsCallers: one call at a time on `stub`, paced at `demand`.
FleetTally CallShouldRateLimit(const FleetSettings& settings, rls_v3::RateLimitService::Stub& stub,
                               double demand, absl::Time begin, absl::Time end) {
  rls_v3::RateLimitRequest request;
  request.set_domain(settings.domain);
  auto* entry = request.add_descriptors()->add_entries();
  entry->set_key(settings.key);
  entry->set_value(settings.value);
  const absl::Duration period = absl::Seconds(1) / std::max(demand, 1e-9);
  FleetTally tally;
  absl::Time due = absl::Now();
  while (true) {
    const absl::Time now = absl::Now();
    if (now >= end) break;
    // Behind by more than a moment (the answers are slower than the demand): as fast as they
    // come, without a burst to catch up.
    due = std::max(due, now - absl::Milliseconds(100));
    SleepUntil(std::min(due, end));
    if (absl::Now() >= end) break;
    due += period;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + settings.deadline));
    rls_v3::RateLimitResponse response;
    const grpc::Status status = stub.ShouldRateLimit(&context, request, &response);
    if (!InWindow(absl::Now(), begin, end)) continue;
    ++tally.offered;
    if (!status.ok()) {
      AddError(tally, absl::StrCat("ShouldRateLimit: ", status.error_code(), ": ",
                                   status.error_message()));
    } else if (response.overall_code() == rls_v3::RateLimitResponse::OK) {
      ++tally.admitted;
    } else {
      ++tally.denied;
    }
  }
  return tally;
}

void Merge(FleetTally& total, const FleetTally& t) {
  total.offered += t.offered;
  total.admitted += t.admitted;
  total.denied += t.denied;
  total.admitted_without_assignment += t.admitted_without_assignment;
  total.assigned_rate += t.assigned_rate;
  total.reports += t.reports;
  total.actions += t.actions;
  total.errors += t.errors;
  if (total.first_error.empty()) total.first_error = t.first_error;
}

}  // namespace

FleetTally RunRlqsFleet(const FleetSettings& settings, absl::Time begin, absl::Time end) {
  const absl::Time start = absl::Now();
  const size_t n = settings.demands.size();
  std::vector<std::unique_ptr<SimulatedEnvoy>> fleet;
  for (size_t i = 0; i < n; ++i) {
    const absl::Time open_at =
        start + settings.reporting_interval * static_cast<double>(i) / static_cast<double>(n);
    fleet.push_back(
        std::make_unique<SimulatedEnvoy>(settings, settings.demands[i], open_at, begin, end));
  }
  std::vector<std::thread> threads;
  for (auto& envoy : fleet) threads.emplace_back([&envoy] { envoy->Run(); });
  for (std::thread& t : threads) t.join();
  FleetTally total;
  for (const auto& envoy : fleet) Merge(total, envoy->tally());
  return total;
}

FleetTally RunRlsCallers(const FleetSettings& settings, absl::Time begin, absl::Time end) {
  const int k = settings.calls_in_flight;
  std::vector<std::unique_ptr<rls_v3::RateLimitService::Stub>> stubs;
  for (size_t i = 0; i < settings.demands.size(); ++i) {
    stubs.push_back(rls_v3::RateLimitService::NewStub(OwnChannel(settings.target)));
  }
  std::vector<FleetTally> tallies(settings.demands.size() * k);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < tallies.size(); ++t) {
    threads.emplace_back([&, t] {
      tallies[t] =
          CallShouldRateLimit(settings, *stubs[t / k], settings.demands[t / k] / k, begin, end);
    });
  }
  for (std::thread& t : threads) t.join();
  FleetTally total;
  for (const FleetTally& t : tallies) Merge(total, t);
  return total;
}

}  // namespace ratelimit::bench
