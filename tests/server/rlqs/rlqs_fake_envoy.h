#ifndef RATELIMIT_TESTS_SERVER_RLQS_RLQS_FAKE_ENVOY_H_
#define RATELIMIT_TESTS_SERVER_RLQS_RLQS_FAKE_ENVOY_H_

// A simulated Envoy for the RLQS fleet tests: it behaves as Envoy's rate_limit_quota filter does
// for one bucket ({tenant: acme} of domain "edge"): it reports the bucket every interval with a
// whole-second time_elapsed, enforces the TokenBucket it was assigned, and falls back to
// allowing everything when it has no assignment or its assignment expired (the filter's
// defaults). When its stream breaks it keeps its assignment until it expires and drops its
// reports until it reconnects (Envoy drops them too).
//
// SettleFleet waits until the servers and their Envoys are quiescent: every report processed,
// every action the servers wrote read and applied.

#include <algorithm>
#include <map>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/server/rlqs/rlqs_test_server.h"

namespace ratelimit::testing {

class FakeEnvoy {
 public:
  FakeEnvoy(RlqsTestServer& server, double demand) : server_(&server), demand_(demand) {}
  ~FakeEnvoy() { Close(); }

  // Opens the stream and sends the first report of the bucket at once, as Envoy does on the
  // bucket's first request.
  void Open() {
    {
      absl::MutexLock lock(&mu_);
      broken_ = false;
    }
    stub_ = server_->NewStub();
    context_ = std::make_unique<grpc::ClientContext>();
    stream_ = stub_->StreamRateLimitQuotas(context_.get());
    reader_ = std::thread([this, server = server_] {
      rlqs_v3::RateLimitQuotaResponse r;
      while (stream_->Read(&r)) Apply(r, server);
      absl::MutexLock lock(&mu_);
      broken_ = true;
    });
    Send(/*first=*/true, 0);
  }

  // Moves to `other` after the current server died: the old stream is finished (its status is
  // whatever the crash left), the assignment held is kept until it expires.
  void Reconnect(RlqsTestServer& other) {
    Drop();
    server_ = &other;
    Open();
  }

  // `dt_us` of simulated time at the client's demand.
  void Step(int64_t dt_us) {
    owed_ += demand_ * static_cast<double>(dt_us) / kSecond;
    const int64_t now = server_->clock().NowMicros();
    absl::MutexLock lock(&mu_);
    Refill(now);
    while (owed_ >= 1) {
      owed_ -= 1;
      if (Allow(now)) {
        ++allowed_;
        ++admitted_;
      } else {
        ++denied_;
      }
    }
  }

  // The usage since the last report, over `elapsed_seconds`; dropped while the stream is down.
  void Report(int64_t elapsed_seconds) { Send(/*first=*/false, elapsed_seconds); }

  void Close() {
    if (!stream_) return;
    stream_->WritesDone();
    reader_.join();
    EXPECT_TRUE(stream_->Finish().ok());
    stream_.reset();
  }

  void set_demand(double d) { demand_ = d; }
  double demand() const { return demand_; }
  uint64_t TakeAdmitted() {
    absl::MutexLock lock(&mu_);
    return std::exchange(admitted_, 0);
  }
  // The rate of the assignment in force (0 without one, or once it expired).
  double AssignedRate() const {
    absl::MutexLock lock(&mu_);
    if (!has_assignment_ || server_->clock().NowMicros() >= expires_us_ || !token_bucket_) {
      return 0;
    }
    return rate_;
  }
  bool has_assignment() const {
    absl::MutexLock lock(&mu_);
    return has_assignment_ && server_->clock().NowMicros() < expires_us_;
  }
  // Reports written to `server`, and actions read from it.
  uint64_t sent_to(const RlqsTestServer* server) const {
    absl::MutexLock lock(&mu_);
    auto it = sent_.find(server);
    return it == sent_.end() ? 0 : it->second;
  }
  uint64_t received_from(const RlqsTestServer* server) const {
    absl::MutexLock lock(&mu_);
    auto it = received_.find(server);
    return it == received_.end() ? 0 : it->second;
  }
  RlqsTestServer* server() const { return server_; }

  // Ends the stream as a crash of its server leaves it (its status is whatever the crash left);
  // the assignment held is kept until it expires, and reports are dropped from then on.
  void Drop() {
    if (!stream_) return;
    context_->TryCancel();
    reader_.join();
    (void)stream_->Finish();
    stream_.reset();
  }

 private:
  void Send(bool first, int64_t elapsed_seconds) {
    rlqs_v3::RateLimitQuotaUsageReports m;
    if (first) m.set_domain("edge");
    auto* u = m.add_bucket_quota_usages();
    (*u->mutable_bucket_id()->mutable_bucket())["tenant"] = "acme";
    u->mutable_time_elapsed()->set_seconds(elapsed_seconds);
    {
      absl::MutexLock lock(&mu_);
      if (broken_) return;  // dropped, as Envoy drops them while its stream is down
      u->set_num_requests_allowed(std::exchange(allowed_, 0));
      u->set_num_requests_denied(std::exchange(denied_, 0));
    }
    if (!server_->alive() || !stream_->Write(m)) {
      absl::MutexLock lock(&mu_);
      broken_ = true;
      return;
    }
    absl::MutexLock lock(&mu_);
    ++sent_[server_];
  }

  void Apply(const rlqs_v3::RateLimitQuotaResponse& r, const RlqsTestServer* from) {
    const int64_t now = server_->clock().NowMicros();
    absl::MutexLock lock(&mu_);
    for (const auto& a : r.bucket_action()) {
      ++received_[from];
      if (a.has_abandon_action()) {
        has_assignment_ = false;
        continue;
      }
      const auto& q = a.quota_assignment_action();
      Refill(now);
      has_assignment_ = true;
      expires_us_ = now + q.assignment_time_to_live().seconds() * kSecond;
      const auto& s = q.rate_limit_strategy();
      deny_all_ =
          s.has_blanket_rule() && s.blanket_rule() == envoy::type::v3::RateLimitStrategy::DENY_ALL;
      token_bucket_ = s.has_token_bucket();
      if (!token_bucket_) continue;
      const double rate = static_cast<double>(s.token_bucket().tokens_per_fill().value()) /
                          static_cast<double>(s.token_bucket().fill_interval().seconds());
      const double max = s.token_bucket().max_tokens();
      // A changed bucket starts at the old remaining/max ratio; a new one full.
      tokens_ = max_ > 0 ? tokens_ / max_ * max : max;
      rate_ = rate;
      max_ = max;
    }
  }

  void Refill(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (token_bucket_) {
      tokens_ = std::min(max_, tokens_ + rate_ * static_cast<double>(now - refilled_us_) / kSecond);
    }
    refilled_us_ = now;
  }

  bool Allow(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!has_assignment_ || now >= expires_us_) return true;  // no or expired assignment
    if (deny_all_) return false;
    if (!token_bucket_) return true;
    if (tokens_ < 1) return false;
    tokens_ -= 1;
    return true;
  }

  RlqsTestServer* server_;
  double demand_;
  double owed_ = 0;
  std::unique_ptr<rlqs_v3::RateLimitQuotaService::Stub> stub_;
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReaderWriter<rlqs_v3::RateLimitQuotaUsageReports,
                                           rlqs_v3::RateLimitQuotaResponse>>
      stream_;
  std::thread reader_;
  mutable absl::Mutex mu_;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  std::map<const RlqsTestServer*, uint64_t> sent_ ABSL_GUARDED_BY(mu_);
  std::map<const RlqsTestServer*, uint64_t> received_ ABSL_GUARDED_BY(mu_);
  uint64_t allowed_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t denied_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t admitted_ ABSL_GUARDED_BY(mu_) = 0;
  bool has_assignment_ ABSL_GUARDED_BY(mu_) = false;
  bool deny_all_ ABSL_GUARDED_BY(mu_) = false;
  bool token_bucket_ ABSL_GUARDED_BY(mu_) = false;
  double rate_ ABSL_GUARDED_BY(mu_) = 0;
  double max_ ABSL_GUARDED_BY(mu_) = 0;
  double tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t refilled_us_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t expires_us_ ABSL_GUARDED_BY(mu_) = 0;
};

// Waits until every live server processed every report written to it, has no action waiting,
// and every action it wrote was read; and, for servers with a board, until no bucket waits for
// its first part.
inline void SettleFleet(const std::vector<RlqsTestServer*>& servers,
                        const std::vector<std::unique_ptr<FakeEnvoy>>& fleet) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (true) {
    bool quiet = true;
    for (RlqsTestServer* server : servers) {
      if (!server->alive()) continue;
      uint64_t sent = 0, received = 0;
      for (const auto& c : fleet) {
        sent += c->sent_to(server);
        received += c->received_from(server);
      }
      const RlqsService::Stats st = server->service().stats();
      quiet = quiet && st.messages == sent && st.actions_waiting == 0 &&
              st.actions_sent == received && st.buckets_waiting_for_part == 0;
    }
    if (quiet) return;
    ASSERT_LT(absl::Now(), deadline) << "the fleet did not settle";
    absl::SleepFor(absl::Microseconds(100));
  }
}

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_SERVER_RLQS_RLQS_FAKE_ENVOY_H_
