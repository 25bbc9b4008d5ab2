// Concurrency limits through the real gRPC service (server/v1/lease_methods.cc), on RocksDB on a
// fake clock: Acquire, Release, Extend and ListLeases; expiry; acquires with rate limits
// all-or-nothing; request_id replays; Check, Reset, Consume and Batch (CHECK entries, and the
// refusal of the others) of a concurrency limit; the admin check of ListLeases; the metrics.
#include <string>

#include "client/cpp/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/support/client_server_test_support.h"
#include "tests/support/server_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::HttpGet;
using ::ratelimit::testing::StartServerAndClient;
using ::ratelimit::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kSecond = ::ratelimit::testing::kSecond;

constexpr char kLimits[] = R"(limits:
  - name: jobs
    kind: concurrency
    capacity: 3
    lease_ttl: 10s
    max_lease_ttl: 1m
  - name: starts
    kind: token_bucket
    rate: 2
    period: 1m
)";

class LeaseMethodsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    clock_.Set(1000 * kSecond);
    ServerOptions options;
    options.admin.token = "s3cret";
    // The tests run the leak sweep themselves (SweepLeakedLeases), so that each leak is counted
    // by the call a test names.
    options.store.lease_sweep_interval = absl::ZeroDuration();
    auto started = StartServerAndClient(options, dir_, kLimits, clock_, nullptr,
                                        ClientOptions{absl::Seconds(10), "s3cret"});
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(started->server);
    client_ = std::move(started->client);
  }

  v1::AcquireResponse Acquire(const std::string& key, int count = 1, bool with_rate = false,
                              const std::string& request_id = "") {
    v1::AcquireRequest r;
    if (with_rate) {
      v1::LimitRequest* rate = r.add_limits();
      rate->set_name("starts");
      rate->set_key(key);
    }
    v1::LimitRequest* l = r.add_limits();
    l->set_name("jobs");
    l->set_key(key);
    l->set_count(count);
    r.set_request_id(request_id);
    r.set_holder("test");
    auto answer = client_->Acquire(r);
    EXPECT_TRUE(answer.ok()) << answer.status();
    return answer.ok() ? *answer : v1::AcquireResponse();
  }

  v1::LeaseState Release(const std::string& key, const std::string& id) {
    v1::ReleaseRequest r;
    r.set_name("jobs");
    r.set_key(key);
    r.set_lease_id(id);
    auto answer = client_->Release(r);
    EXPECT_TRUE(answer.ok()) << answer.status();
    return answer.ok() ? answer->state() : v1::LEASE_STATE_UNSPECIFIED;
  }

  absl::StatusOr<v1::ExtendResponse> Extend(const std::string& key, const std::string& id,
                                            int ttl_seconds) {
    v1::ExtendRequest r;
    r.set_name("jobs");
    r.set_key(key);
    r.set_lease_id(id);
    r.mutable_ttl()->set_seconds(ttl_seconds);
    return client_->Extend(r);
  }

  uint64_t Held(const std::string& key) {
    v1::ListLeasesRequest r;
    r.set_name("jobs");
    r.set_key(key);
    auto answer = client_->ListLeases(r);
    EXPECT_TRUE(answer.ok()) << answer.status();
    return answer.ok() ? answer->held() : 999;
  }

  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<RateLimitServer> server_;
  std::unique_ptr<RateLimitClient> client_;
};

TEST_F(LeaseMethodsTest, AcquiresUpToCapacityThenRefusesWithWhenASlotFrees) {
  const v1::AcquireResponse first = Acquire("t", 2);
  ASSERT_TRUE(first.allowed());
  EXPECT_EQ(first.lease().count(), 2u);
  EXPECT_EQ(first.lease().expires_at().seconds(), 1010);
  EXPECT_EQ(first.lease().holder(), "test");
  EXPECT_EQ(first.results(0).value(), 1);  // free slots
  EXPECT_EQ(first.results(0).capacity(), 3);
  clock_.Advance(4 * kSecond);
  ASSERT_TRUE(Acquire("t").allowed());
  const v1::AcquireResponse refused = Acquire("t");
  EXPECT_FALSE(refused.allowed());
  EXPECT_FALSE(refused.has_lease());
  EXPECT_EQ(refused.reason(), v1::NO_FREE_SLOTS);
  EXPECT_EQ(refused.retry_at().seconds(), 1010);  // the first lease's expiry frees a slot
  EXPECT_EQ(refused.retry_after().seconds(), 6);
  const v1::AcquireResponse too_many = Acquire("u", 4);
  EXPECT_EQ(too_many.reason(), v1::COUNT_EXCEEDS_CAPACITY);
  EXPECT_FALSE(too_many.has_retry_at());
  EXPECT_EQ(Held("t"), 3u);
}

TEST_F(LeaseMethodsTest, ReleaseFreesTheSlotsOnceAndExpiryFreesThemByItself) {
  const v1::AcquireResponse a = Acquire("t", 3);
  ASSERT_TRUE(a.allowed());
  EXPECT_EQ(Release("t", a.lease().id()), v1::RELEASED);
  EXPECT_EQ(Release("t", a.lease().id()), v1::NOT_HELD);
  const v1::AcquireResponse b = Acquire("t", 3);
  ASSERT_TRUE(b.allowed());
  EXPECT_FALSE(Acquire("t").allowed());
  clock_.Advance(10 * kSecond);  // b expires: now == expires_at is no longer held
  EXPECT_EQ(Held("t"), 0u);
  EXPECT_TRUE(Acquire("t", 3).allowed());
  EXPECT_EQ(Release("t", b.lease().id()), v1::NOT_HELD);
}

TEST_F(LeaseMethodsTest, ExtendKeepsAHolderPastItsFirstExpiry) {
  const v1::AcquireResponse a = Acquire("t", 3);
  ASSERT_TRUE(a.allowed());
  for (int beat = 0; beat < 5; ++beat) {
    clock_.Advance(8 * kSecond);
    auto extended = Extend("t", a.lease().id(), 10);
    ASSERT_TRUE(extended.ok()) << extended.status();
    EXPECT_EQ(extended->state(), v1::HELD);
    EXPECT_EQ(extended->lease().expires_at().seconds(), 1000 + 8 * (beat + 1) + 10);
    EXPECT_FALSE(Acquire("t").allowed());
  }
  clock_.Advance(10 * kSecond);
  auto late = Extend("t", a.lease().id(), 10);
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ(late->state(), v1::NOT_HELD);
  EXPECT_FALSE(late->has_lease());
  EXPECT_EQ(Extend("t", a.lease().id(), 61).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(LeaseMethodsTest, AnAcquireWithARateLimitIsAllOrNothing) {
  // The rate limit allows 2 per minute: the third acquire is refused by it and takes no slot.
  for (int i = 0; i < 2; ++i) {
    const v1::AcquireResponse ok = Acquire("t", 1, true);
    ASSERT_TRUE(ok.allowed());
    EXPECT_EQ(Release("t", ok.lease().id()), v1::RELEASED);
  }
  const v1::AcquireResponse refused_by_rate = Acquire("t", 1, true);
  EXPECT_FALSE(refused_by_rate.allowed());
  EXPECT_EQ(refused_by_rate.denied_by(), 0);
  EXPECT_EQ(refused_by_rate.reason(), v1::INSUFFICIENT_TOKENS);
  EXPECT_EQ(Held("t"), 0u);
  // Slots all held: the refusal takes no token.
  clock_.Advance(60 * kSecond);  // the bucket is full again (2)
  ASSERT_TRUE(Acquire("u", 3).allowed());
  const v1::AcquireResponse refused_by_slots = Acquire("u", 1, true);
  EXPECT_FALSE(refused_by_slots.allowed());
  EXPECT_EQ(refused_by_slots.denied_by(), 1);
  auto bucket = client_->Check(MakeRequest("starts", "u"));
  ASSERT_TRUE(bucket.ok()) << bucket.status();
  EXPECT_EQ(bucket->results(0).value(), 2);
}

TEST_F(LeaseMethodsTest, ARetriedAcquireGetsTheSameLeaseAndTakesNothing) {
  const v1::AcquireResponse first = Acquire("t", 2, false, "job-1");
  ASSERT_TRUE(first.allowed());
  const v1::AcquireResponse retry = Acquire("t", 2, false, "job-1");
  EXPECT_TRUE(retry.allowed());
  EXPECT_TRUE(retry.replayed());
  EXPECT_EQ(retry.lease().id(), first.lease().id());
  EXPECT_EQ(Held("t"), 2u);
}

// A request_id names one acquire: a request asking for other slots (or another holder) under it
// is refused, naming it, and takes nothing, as Consume refuses a reused request_id.
TEST_F(LeaseMethodsTest, AnAcquireReusingARequestIdForOtherSlotsIsRefusedAndTakesNothing) {
  const v1::AcquireResponse first = Acquire("t", 2, false, "job-1");
  ASSERT_TRUE(first.allowed());
  v1::AcquireRequest other;
  v1::LimitRequest* l = other.add_limits();
  l->set_name("jobs");
  l->set_key("t");
  l->set_count(1);
  other.set_request_id("job-1");
  other.set_holder("test");
  auto refused = client_->Acquire(other);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("request_id"));
  l->set_count(2);
  other.set_holder("another holder");
  EXPECT_EQ(client_->Acquire(other).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Held("t"), 2u);
  const v1::AcquireResponse retry = Acquire("t", 2, false, "job-1");
  EXPECT_TRUE(retry.replayed());
  EXPECT_EQ(retry.lease().id(), first.lease().id());
}

TEST_F(LeaseMethodsTest, CheckReportsFreeSlotsAndConsumeAndBatchRefuseThem) {
  ASSERT_TRUE(Acquire("t", 2).allowed());
  auto checked = client_->Check(MakeRequest("jobs", "t"));
  ASSERT_TRUE(checked.ok()) << checked.status();
  EXPECT_TRUE(checked->allowed());
  EXPECT_EQ(checked->results(0).value(), 1);
  auto two = client_->Check(MakeRequest("jobs", "t", 2));
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_FALSE(two->allowed());
  EXPECT_EQ(two->reason(), v1::NO_FREE_SLOTS);
  EXPECT_EQ(Held("t"), 2u);  // Check took nothing

  auto consumed = client_->Consume(MakeRequest("jobs", "t"));
  EXPECT_EQ(consumed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(consumed.status().message()), HasSubstr("limits[0].name"));
  EXPECT_EQ(client_->Reserve(MakeRequest("jobs", "t")).status().code(),
            absl::StatusCode::kInvalidArgument);
  v1::BatchRequest batch;
  v1::BatchEntry* e = batch.add_entries();
  *e->mutable_request() = MakeRequest("jobs", "t");
  auto answered = client_->Batch(batch);
  ASSERT_TRUE(answered.ok()) << answered.status();
  EXPECT_THAT(answered->results(0).error().message(), HasSubstr("entries[0].limits[0].name"));
  EXPECT_EQ(Held("t"), 2u);
}

// A Batch CHECK entry naming a concurrency limit answers as Check would at its place in the
// batch's order: it sees the rate-limit tokens the entries before it took and not those of the
// entries after it, and the slots held, taking none.
TEST_F(LeaseMethodsTest, ABatchCheckOfSlotsAnswersAtItsPlaceInTheOrderAndTakesNothing) {
  ASSERT_TRUE(Acquire("t", 2).allowed());  // 1 of 3 slots free
  auto rate_and_slots = [](int slots) {
    v1::RateLimitRequest r = MakeRequest("starts", "t");  // 2 a minute
    v1::LimitRequest* l = r.add_limits();
    l->set_name("jobs");
    l->set_key("t");
    l->set_count(slots);
    return r;
  };
  v1::BatchRequest batch;
  AddBatchEntry(&batch, v1::BatchEntry::CONSUME, MakeRequest("starts", "t"));   // 1 token left
  AddBatchEntry(&batch, v1::BatchEntry::CHECK, rate_and_slots(1));              // 1: allowed
  AddBatchEntry(&batch, v1::BatchEntry::CONSUME, MakeRequest("starts", "t"));   // none left
  AddBatchEntry(&batch, v1::BatchEntry::CHECK, rate_and_slots(1));              // 3: no token
  AddBatchEntry(&batch, v1::BatchEntry::CHECK, MakeRequest("jobs", "t", 2));    // 4: 1 free
  AddBatchEntry(&batch, v1::BatchEntry::CONSUME, MakeRequest("jobs", "t"));     // 5: refused
  AddBatchEntry(&batch, v1::BatchEntry::CHECK, MakeRequest("jobs", "t", 0.5));  // 6: refused
  auto answered = client_->Batch(batch);
  ASSERT_TRUE(answered.ok()) << answered.status();
  ASSERT_EQ(answered->results_size(), 7);
  auto response = [&](int i) { return answered->results(i).response(); };
  EXPECT_TRUE(response(0).allowed());
  // Decided after entry 0 and before entry 2: one token, one free slot.
  EXPECT_TRUE(response(1).allowed());
  ASSERT_EQ(response(1).results_size(), 2);
  EXPECT_EQ(response(1).results(0).value(), 1);
  EXPECT_EQ(response(1).results(1).value(), 1);
  EXPECT_TRUE(response(2).allowed());
  // After entry 2: no token left, the slot still free.
  EXPECT_FALSE(response(3).allowed());
  EXPECT_EQ(response(3).denied_by(), 0);
  EXPECT_TRUE(response(3).results(1).allowed());
  EXPECT_FALSE(response(4).allowed());
  EXPECT_EQ(response(4).reason(), v1::NO_FREE_SLOTS);
  EXPECT_EQ(response(4).results(0).value(), 1);
  EXPECT_THAT(answered->results(5).error().message(), HasSubstr("entries[5].limits[0].name"));
  EXPECT_THAT(answered->results(6).error().message(), HasSubstr("entries[6].limits[0].count"));
  EXPECT_EQ(Held("t"), 2u);  // the checks took nothing
}

// A Check of slots asks for whole slots, as an Acquire does. Any other count is the caller's
// error, named, and never a store failure: a server that fails open would otherwise answer it
// "allowed".
TEST_F(LeaseMethodsTest, ACheckForOtherThanWholeSlotsIsRefusedNamingItsCountNeverFailedOpen) {
  ServerOptions options;
  options.store.failure_policy = FailurePolicy::kOpen;
  TempDir dir;
  auto started = StartServerAndClient(options, dir, kLimits, clock_, nullptr,
                                      ClientOptions{absl::Seconds(10), ""});
  ASSERT_TRUE(started.ok()) << started.status();
  for (double bad : {0.5, 1099511627776.0}) {
    v1::RateLimitRequest request = MakeRequest("starts", "t");
    v1::LimitRequest* slots = request.add_limits();
    slots->set_name("jobs");
    slots->set_key("t");
    slots->set_count(bad);
    auto checked = started->client->Check(request);
    EXPECT_EQ(checked.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(checked.status().message()), HasSubstr("limits[1].count")) << bad;
  }
}

TEST_F(LeaseMethodsTest, ResetEndsTheLeasesOfAKeyOrOfEveryKey) {
  const v1::AcquireResponse a = Acquire("t", 1);
  ASSERT_TRUE(Acquire("t", 2).allowed());
  ASSERT_TRUE(Acquire("u", 1).allowed());
  v1::ResetRequest one;
  one.set_name("jobs");
  one.set_key("t");
  auto deleted = client_->ResetDetailed(one);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(deleted->deleted(), 2u);  // two leases ended
  EXPECT_EQ(deleted->leases(), 2u);   // and the answer says they were leases
  EXPECT_EQ(Held("t"), 0u);
  EXPECT_EQ(Held("u"), 1u);
  EXPECT_EQ(Release("t", a.lease().id()), v1::NOT_HELD);
  v1::ResetRequest every;
  every.set_name("jobs");
  every.set_all_keys(true);
  auto all = client_->ResetDetailed(every);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->deleted(), 1u);  // the one key that held a lease
  EXPECT_EQ(all->leases(), 1u);
  EXPECT_EQ(Held("u"), 0u);
}

TEST_F(LeaseMethodsTest, ResetOfAnInlineNameCountsItsLeasesApartFromItsStates) {
  v1::LimitConfig slots;
  slots.set_kind(v1::CONCURRENCY);
  slots.set_capacity(3);
  v1::AcquireRequest acquire;
  v1::LimitRequest* limit = acquire.add_limits();
  limit->set_name("pool");
  limit->set_key("k");
  *limit->mutable_config() = slots;
  ASSERT_TRUE(client_->Acquire(acquire)->allowed());
  ASSERT_TRUE(client_->Acquire(acquire)->allowed());
  v1::ResetRequest reset;
  reset.set_name("pool");
  reset.set_key("k");
  reset.set_source(v1::INLINE);
  auto deleted = client_->ResetDetailed(reset);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(deleted->deleted(), 2u);
  EXPECT_EQ(deleted->leases(), 2u);
  // A rate limit's state under the same inline name is a state, not a lease.
  v1::RateLimitRequest consume;
  v1::LimitRequest* rate = consume.add_limits();
  rate->set_name("pool");
  rate->set_key("k");
  rate->mutable_config()->set_kind(v1::TOKEN_BUCKET);
  rate->mutable_config()->set_rate(1);
  rate->mutable_config()->mutable_period()->set_seconds(60);
  rate->mutable_config()->set_capacity(5);
  ASSERT_TRUE(client_->Consume(consume).ok());
  ASSERT_TRUE(client_->Acquire(acquire)->allowed());
  deleted = client_->ResetDetailed(reset);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(deleted->deleted(), 2u);  // the state and the lease
  EXPECT_EQ(deleted->leases(), 1u);
}

TEST_F(LeaseMethodsTest, ListLeasesNeedsTheAdminCredentialAndShowsTheLeases) {
  const v1::AcquireResponse a = Acquire("t", 2);
  clock_.Advance(kSecond);
  const v1::AcquireResponse b = Acquire("t", 1);
  v1::ListLeasesRequest r;
  r.set_name("jobs");
  r.set_key("t");
  auto listed = client_->ListLeases(r);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->leases_size(), 2);
  EXPECT_EQ(listed->leases(0).id(), a.lease().id());  // soonest expiry first
  EXPECT_EQ(listed->leases(1).id(), b.lease().id());
  EXPECT_EQ(listed->held(), 3u);
  EXPECT_EQ(listed->capacity(), 3u);
  auto anonymous = RateLimitClient::Connect("127.0.0.1:" + std::to_string(server_->port()),
                                            ClientOptions{absl::Seconds(10), ""});
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(anonymous->ListLeases(r).status().code(), absl::StatusCode::kUnauthenticated);
  // Logged under its own name: it was "reset refused", counted with the resets'.
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("WARNING list leases refused"), std::string::npos) << log;
  EXPECT_EQ(log.find("reset refused"), std::string::npos) << log;
}

TEST_F(LeaseMethodsTest, MetricsCountRefusalsExpiriesAndHeldSlots) {
  const v1::AcquireResponse a = Acquire("t", 3);
  ASSERT_TRUE(a.allowed());
  EXPECT_FALSE(Acquire("t").allowed());
  clock_.Advance(10 * kSecond);
  ASSERT_TRUE(Acquire("t", 1).allowed());  // drops a, expired while held
  const auto [status, body] = HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_EQ(status, 200);
  EXPECT_THAT(body,
              HasSubstr("ratelimit_lease_acquires_total{limit=\"jobs\",outcome=\"acquired\"} 2"));
  EXPECT_THAT(body,
              HasSubstr("ratelimit_lease_acquires_total{limit=\"jobs\",outcome=\"refused\"} 1"));
  EXPECT_THAT(body, HasSubstr("ratelimit_leases_expired_total{limit=\"jobs\"} 1"));
  EXPECT_THAT(body, HasSubstr("ratelimit_lease_slots_held{limit=\"jobs\"} 1"));
}

// A lease that expired unreleased is counted once, by whichever call finds it: here a listing,
// then a check (it had been counted twice on Redis and not at all after a RocksDB listing).
TEST_F(LeaseMethodsTest, ALeakFoundByAListingOrACheckIsCountedOnce) {
  ASSERT_TRUE(Acquire("t", 2).allowed());
  ASSERT_TRUE(Acquire("u", 1).allowed());
  clock_.Advance(10 * kSecond + kSecond / 2);  // expired; kept a minute past it
  v1::ListLeasesRequest r;
  r.set_name("jobs");
  r.set_key("t");
  ASSERT_TRUE(client_->ListLeases(r).ok());
  ASSERT_TRUE(client_->ListLeases(r).ok());
  ASSERT_TRUE(Acquire("t", 1).allowed());
  v1::RateLimitRequest check;
  v1::LimitRequest* l = check.add_limits();
  l->set_name("jobs");
  l->set_key("u");
  ASSERT_TRUE(client_->Check(check).ok());
  ASSERT_TRUE(client_->Check(check).ok());
  ASSERT_TRUE(Acquire("u", 1).allowed());
  const auto [status, body] = HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_EQ(status, 200);
  EXPECT_THAT(body, HasSubstr("ratelimit_leases_expired_total{limit=\"jobs\"} 2"));
}

// A check that finds a key's lease expired takes its slots off the gauge, as any other call on the
// key does, whether the check comes alone or as a Batch's CHECK entry.
TEST_F(LeaseMethodsTest, ACheckThatFindsALeaseExpiredTakesItsSlotsOffTheGauge) {
  ASSERT_TRUE(Acquire("c", 2).allowed());
  ASSERT_TRUE(Acquire("b", 1).allowed());
  auto held = [&] {
    const auto [status, body] = HttpGet(server_->metrics_port(), "/metrics");
    EXPECT_EQ(status, 200);
    return body;
  };
  EXPECT_THAT(held(), HasSubstr("ratelimit_lease_slots_held{limit=\"jobs\"} 3"));
  clock_.Advance(10 * kSecond + kSecond / 2);  // both expired
  v1::RateLimitRequest check;
  v1::LimitRequest* l = check.add_limits();
  l->set_name("jobs");
  l->set_key("c");
  ASSERT_TRUE(client_->Check(check).ok());
  EXPECT_THAT(held(), HasSubstr("ratelimit_lease_slots_held{limit=\"jobs\"} 1"));
  v1::BatchRequest batch;
  v1::BatchEntry* e = batch.add_entries();
  e->set_method(v1::BatchEntry::CHECK);
  v1::LimitRequest* bl = e->mutable_request()->add_limits();
  bl->set_name("jobs");
  bl->set_key("b");
  ASSERT_TRUE(client_->Batch(batch).ok());
  // Nothing held: a limit of the limits file reads 0 (its series stays).
  EXPECT_THAT(held(), HasSubstr("ratelimit_lease_slots_held{limit=\"jobs\"} 0\n"));
}

// The leak sweep counts a lease that expired unreleased on a key no call decides again, takes its
// slots off the gauge, and counts each leak once: not again on the next pass, nor by a later call
// on the key. A lease still held is left alone.
TEST_F(LeaseMethodsTest, TheLeakSweepCountsALeakOnAKeyNoCallTouchesAgain) {
  ASSERT_TRUE(Acquire("idle", 2).allowed());
  ASSERT_TRUE(Acquire("busy", 1).allowed());
  clock_.Advance(5 * kSecond);
  const v1::AcquireResponse later = Acquire("busy", 1);  // expires 5 s after the first
  ASSERT_TRUE(later.allowed());
  absl::StatusOr<int64_t> none = server_->SweepLeakedLeases();
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, 0);          // nothing expired yet
  clock_.Advance(6 * kSecond);  // "idle"'s lease and "busy"'s first have expired
  absl::StatusOr<int64_t> swept = server_->SweepLeakedLeases();
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_EQ(*swept, 2);
  const auto [status, body] = HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_EQ(status, 200);
  EXPECT_THAT(body, HasSubstr("ratelimit_leases_expired_total{limit=\"jobs\"} 2"));
  EXPECT_THAT(body, HasSubstr("ratelimit_lease_slots_held{limit=\"jobs\"} 1"));  // busy's later
  absl::StatusOr<int64_t> again = server_->SweepLeakedLeases();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, 0);
  EXPECT_EQ(Held("idle"), 0u);  // a listing finds nothing left to count
  EXPECT_EQ(Release("busy", later.lease().id()), v1::RELEASED);
  const auto [status2, after] = HttpGet(server_->metrics_port(), "/metrics");
  EXPECT_THAT(after, HasSubstr("ratelimit_leases_expired_total{limit=\"jobs\"} 2"));
}

// The server runs the sweep by itself every --lease_sweep_interval: a leak on a key no call
// touches again shows in the metric without anything else happening.
TEST(LeaseSweepServerTest, TheServerSweepsEveryInterval) {
  TempDir dir;
  FakeClock clock;
  clock.Set(1000 * kSecond);
  ServerOptions options;
  options.store.lease_sweep_interval = absl::Milliseconds(20);
  auto started = StartServerAndClient(options, dir, kLimits, clock);
  ASSERT_TRUE(started.ok()) << started.status();
  v1::AcquireRequest r;
  v1::LimitRequest* l = r.add_limits();
  l->set_name("jobs");
  l->set_key("idle");
  auto acquired = started->client->Acquire(r);
  ASSERT_TRUE(acquired.ok() && acquired->allowed()) << acquired.status();
  clock.Advance(11 * kSecond);  // expired unreleased; no call follows
  const int port = started->server->metrics_port();
  EXPECT_TRUE(::ratelimit::testing::Eventually([port] {
    return HttpGet(port, "/metrics")
               .second.find("ratelimit_leases_expired_total{limit=\"jobs\"} 1") !=
           std::string::npos;
  }));
  // Its turns are counted: every one a pass, since it owns its store.
  const std::string body = HttpGet(port, "/metrics").second;
  EXPECT_THAT(body, Not(HasSubstr("ratelimit_lease_sweeps_total{result=\"swept\"} 0")));
  EXPECT_THAT(body, HasSubstr("ratelimit_lease_sweeps_total{result=\"skipped\"} 0"));
}

// A Reset of every key ends their leases: the gauge reads 0 for the limit (it showed their slots
// until each key's max_lease_ttl had passed).
TEST_F(LeaseMethodsTest, ResetOfEveryKeyTakesItsSlotsOffTheGauge) {
  ASSERT_TRUE(Acquire("t", 2).allowed());
  ASSERT_TRUE(Acquire("u", 1).allowed());
  auto before = HttpGet(server_->metrics_port(), "/metrics");
  EXPECT_THAT(before.second, HasSubstr("ratelimit_lease_slots_held{limit=\"jobs\"} 3"));
  ASSERT_TRUE(client_->ResetAll("jobs").ok());
  auto after = HttpGet(server_->metrics_port(), "/metrics");
  EXPECT_THAT(after.second, HasSubstr("ratelimit_lease_slots_held{limit=\"jobs\"} 0\n"));
  ASSERT_TRUE(Acquire("t", 1).allowed());
  auto again = HttpGet(server_->metrics_port(), "/metrics");
  EXPECT_THAT(again.second, HasSubstr("ratelimit_lease_slots_held{limit=\"jobs\"} 1"));
}

}  // namespace
}  // namespace ratelimit
