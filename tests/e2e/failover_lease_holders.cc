#include "tests/e2e/failover_lease_holders.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace ratelimit::testing {
namespace {

constexpr int kLeaseCallers = 8;  // holders, alternating between the two servers
// How long a holder retries one call before it gives up (the failover takes a few seconds).
constexpr absl::Duration kRetryFor = absl::Seconds(30);

v1::AcquireRequest LeaseAcquire(const std::string& request_id, const std::string& holder) {
  v1::AcquireRequest request;
  *request.add_limits() = MakeRequest(kLeaseLimit, kLeaseKey).limits(0);
  request.set_request_id(request_id);
  request.set_holder(holder);
  return request;
}

v1::ReleaseRequest LeaseRelease(const std::string& lease_id) {
  v1::ReleaseRequest request;
  request.set_name(kLeaseLimit);
  request.set_key(kLeaseKey);
  request.set_lease_id(lease_id);
  return request;
}

}  // namespace

LeaseHolders::LeaseHolders(const std::vector<std::string>& targets) : targets_(targets) {
  for (int i = 0; i < kLeaseCallers; ++i) {
    clients_.push_back(RateLimitClient::Connect(targets_[i % 2]));
  }
}

LeaseHolders::~LeaseHolders() { Stop(); }

absl::Status LeaseHolders::Start() {
  absl::Time sent;
  auto pinned = AcquireAnswered(*clients_[1], "pinned", "pinned", &sent);
  if (!pinned.ok()) return pinned.status();
  if (!pinned->allowed()) return absl::InternalError("the pinned lease was refused");
  {
    absl::MutexLock l(&mu_);
    run_.held_at_end.push_back(pinned->lease().id());
    run_.acquired = 1;
    run_.max_holding = holding_ = 1;
  }
  for (int i = 0; i < kLeaseCallers; ++i) threads_.emplace_back([this, i] { Caller(i); });
  return absl::OkStatus();
}

void LeaseHolders::Killed(absl::Time at) {
  absl::MutexLock l(&mu_);
  killed_ = at;
}

bool LeaseHolders::BackOnEveryServer() {
  absl::MutexLock l(&mu_);
  return run_.back[0] != absl::InfiniteFuture() && run_.back[1] != absl::InfiniteFuture();
}

LeaseRun LeaseHolders::StopAndAudit(const std::string& admin_token) {
  Stop();
  LeaseRun run;
  {
    absl::MutexLock l(&mu_);
    run = run_;
  }
  std::sort(run.held_at_end.begin(), run.held_at_end.end());
  ClientOptions admin;
  admin.admin_token = admin_token;
  for (int s = 0; s < 2; ++s) {
    auto client = RateLimitClient::Connect(targets_[s], admin);
    v1::ListLeasesRequest list;
    list.set_name(kLeaseLimit);
    list.set_key(kLeaseKey);
    auto leases = client->ListLeases(list);
    if (leases.ok()) {
      for (const v1::Lease& lease : leases->leases()) run.listed[s].push_back(lease.id());
      std::sort(run.listed[s].begin(), run.listed[s].end());
      run.listed_held[s] = leases->held();
    } else {
      run.problems.push_back("ListLeases: " + leases.status().ToString());
    }
    auto check = client->Check(MakeRequest(kLeaseLimit, kLeaseKey));
    if (check.ok()) run.free_slots[s] = check->results(0).value();
  }
  for (size_t i = 0; i < run.held_at_end.size(); ++i) {
    auto r = clients_[i % clients_.size()]->Release(LeaseRelease(run.held_at_end[i]));
    run.end_releases.push_back(r.ok() ? r->state() : v1::LEASE_STATE_UNSPECIFIED);
  }
  auto check = clients_[0]->Check(MakeRequest(kLeaseLimit, kLeaseKey));
  if (check.ok()) run.free_after_release = check->results(0).value();
  return run;
}

void LeaseHolders::Stop() {
  stop_ = true;
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

absl::StatusOr<v1::AcquireResponse> LeaseHolders::AcquireAnswered(RateLimitClient& client,
                                                                  const std::string& request_id,
                                                                  const std::string& holder,
                                                                  absl::Time* sent) {
  const absl::Time give_up = absl::Now() + kRetryFor;
  while (true) {
    *sent = absl::Now();
    auto r = client.Acquire(LeaseAcquire(request_id, holder));
    if (r.ok() || absl::Now() > give_up) return r;
    CountFailedCall();
    absl::SleepFor(absl::Milliseconds(20));
  }
}

void LeaseHolders::Caller(int i) {
  RateLimitClient& client = *clients_[i];
  std::mt19937 random(i);
  for (int n = 0; !stop_.load(); ++n) {
    absl::Time sent;
    auto acquired = AcquireAnswered(client, absl::StrCat("caller", i, "-", n),
                                    absl::StrCat("caller", i), &sent);
    if (!acquired.ok()) {
      Problem("acquire gave up: " + acquired.status().ToString());
      return;
    }
    if (!acquired->allowed()) {
      absl::SleepFor(absl::Milliseconds(2 + random() % 8));
      continue;
    }
    const std::string id = acquired->lease().id();
    const bool before_kill = Hold(*acquired, i % 2, sent, absl::Now());
    absl::SleepFor(absl::Milliseconds(5 + random() % 25));
    if (!Unhold(id)) return;
    ReleaseAnswered(client, id, before_kill);
  }
}

bool LeaseHolders::Hold(const v1::AcquireResponse& acquired, int server, absl::Time sent,
                        absl::Time answered) {
  absl::MutexLock l(&mu_);
  ++run_.acquired;
  if (acquired.replayed()) ++run_.replayed;
  if (sent > killed_) run_.back[server] = std::min(run_.back[server], answered);
  run_.max_holding = std::max(run_.max_holding, ++holding_);
  return answered < killed_;
}

bool LeaseHolders::Unhold(const std::string& id) {
  absl::MutexLock l(&mu_);
  if (stop_.load()) {
    run_.held_at_end.push_back(id);
    return false;
  }
  --holding_;
  return true;
}

void LeaseHolders::ReleaseAnswered(RateLimitClient& client, const std::string& id,
                                   bool acquired_before_kill) {
  const absl::Time give_up = absl::Now() + kRetryFor;
  for (bool failed_before = false;; failed_before = true) {
    const absl::Time sent = absl::Now();
    auto r = client.Release(LeaseRelease(id));
    if (!r.ok() && absl::Now() <= give_up) {
      CountFailedCall();
      absl::SleepFor(absl::Milliseconds(20));
      continue;
    }
    absl::MutexLock l(&mu_);
    if (!r.ok()) {
      run_.problems.push_back("release gave up: " + r.status().ToString());
    } else if (r->state() == v1::RELEASED) {
      ++run_.released;
      if (acquired_before_kill && sent > killed_) ++run_.held_across_kill;
    } else if (r->state() == v1::NOT_HELD) {
      // Never released and within its TTL, yet not held: the store lost it. After a failed
      // attempt (which may have released it) the answer proves nothing.
      if (!failed_before) run_.lost.push_back(id);
    } else {
      run_.problems.push_back(absl::StrCat("release answered ", r->state()));
    }
    return;
  }
}

void LeaseHolders::CountFailedCall() {
  absl::MutexLock l(&mu_);
  ++run_.failed_calls;
}

void LeaseHolders::Problem(const std::string& what) {
  absl::MutexLock l(&mu_);
  run_.problems.push_back(what);
}

}  // namespace ratelimit::testing
