// Several replicas dividing one bucket's global rate (server/rlqs/rlqs_replicas.h): the
// decision's arithmetic and encoding, one replica's sync against a board, and simulated Envoys
// (rlqs_fake_envoy.h) split between two RLQS servers that share a board, in memory and on the
// Redis cluster, on one fake clock.
#include "server/rlqs/rlqs_replicas.h"

#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/memory/memory_replica_board.h"
#include "tests/server/rlqs/rlqs_fake_envoy.h"
#include "tests/server/rlqs/rlqs_test_server.h"
#include "tests/support/redis_standalone.h"
#include "tests/support/redis_test_store.h"

namespace ratelimit {
namespace {

using testing::FakeClock;
using testing::FakeEnvoy;
using testing::kSecond;
using testing::RlqsTestServer;

constexpr double kLimit = 1000;
constexpr int64_t kT0 = 1'790'000'000 * kSecond;

RlqsRule Limit(double rate, double burst) {
  RlqsRule r;
  r.name = "tenants";
  r.action = RlqsRuleAction::kLimit;
  r.rate_per_second = rate;
  r.burst = burst;
  return r;
}

double SumOfParts(const RlqsReplicaDecision& d, int64_t now_us) {
  double sum = 0;
  for (const auto& [replica, p] : d.parts) sum += d.PartOf(replica, now_us)->rate;
  return sum;
}

TEST(RlqsReplicaDecisionTest, PartsAreTheSumsOfTheFleetWideFairShares) {
  std::map<std::string, RlqsReplicaRecord> records = {
      {"a", {0, {100, 900}}}, {"b", {0, {200}}}, {"c", {0, {}}}};
  RlqsReplicaDecision d = DecideRlqsReplicas(Limit(1000, 100), records, std::nullopt, kT0, kSecond);
  const std::vector<FairShare> shares =
      DivideFairly(1000, 100, FairShareSettings(), {100, 900, 200});
  EXPECT_DOUBLE_EQ(d.parts.at("a").rate, shares[0].rate + shares[1].rate);
  EXPECT_DOUBLE_EQ(d.parts.at("b").rate, shares[2].rate);
  EXPECT_DOUBLE_EQ(d.parts.at("c").rate, 0);
  EXPECT_DOUBLE_EQ(d.parts.at("a").burst, shares[0].burst + shares[1].burst);
  // The first decision has nothing in force before it: every part at once.
  EXPECT_DOUBLE_EQ(d.PartOf("a", kT0)->rate, d.parts.at("a").rate);
  EXPECT_LE(SumOfParts(d, kT0), 1000 * (1 - FairShareSettings().newcomer_reserve) + 1e-9);
  EXPECT_FALSE(d.PartOf("z", kT0).has_value());
}

TEST(RlqsReplicaDecisionTest, AGrowingPartWaitsForTheShrinkingOnesButANewcomerTakesTheReserve) {
  const RlqsRule rule = Limit(1000, 100);
  RlqsReplicaDecision first =
      DecideRlqsReplicas(rule, {{"a", {0, {2000}}}}, std::nullopt, kT0, kSecond);
  const double a_alone = first.parts.at("a").rate;  // 950: all but the reserve
  ASSERT_NEAR(a_alone, 950, 1e-9);
  // b joins with one subscriber of unknown demand: a shrinks at once, b starts from the reserve.
  const int64_t t1 = kT0 + 2 * kSecond;
  RlqsReplicaDecision second = DecideRlqsReplicas(
      rule, {{"a", {a_alone, {2000}}}, {"b", {0, {std::nullopt}}}}, first, t1, kSecond);
  EXPECT_NEAR(second.parts.at("a").rate, 475, 1e-9);
  EXPECT_NEAR(second.parts.at("b").rate, 475, 1e-9);
  EXPECT_NEAR(second.PartOf("a", t1)->rate, 475, 1e-9);
  EXPECT_NEAR(second.PartOf("b", t1)->rate, 50, 1e-9) << "only the reserve is free";
  // While a may still hand out 950 (it has not read the decision), the parts in force are
  // within the global rate; once settled, b has its share.
  EXPECT_LE(a_alone + second.PartOf("b", t1)->rate, 1000 + 1e-9);
  EXPECT_NEAR(second.PartOf("b", t1 + kSecond)->rate, 475, 1e-9);
  EXPECT_LE(SumOfParts(second, t1 + kSecond), 1000);
}

TEST(RlqsReplicaDecisionTest, ARecordedPartLargerThanTheDecisionsLeavesLessFree) {
  const RlqsRule rule = Limit(1000, 100);
  RlqsReplicaDecision first =
      DecideRlqsReplicas(rule, {{"a", {0, {500}}}, {"b", {0, {500}}}}, std::nullopt, kT0, kSecond);
  ASSERT_NEAR(first.parts.at("a").rate, 475, 1e-9);
  const int64_t t = kT0 + 3 * kSecond;
  // a's demand fell: b may grow, at first only into what is free. With a's record saying it
  // hands out its 475, the reserve's 50 is free; with a's record saying 525 (a part of an older
  // decision it still hands out), nothing is.
  RlqsReplicaDecision in_step =
      DecideRlqsReplicas(rule, {{"a", {475, {10}}}, {"b", {475, {2000}}}}, first, t, kSecond);
  RlqsReplicaDecision lagging =
      DecideRlqsReplicas(rule, {{"a", {525, {10}}}, {"b", {475, {2000}}}}, first, t, kSecond);
  EXPECT_NEAR(in_step.PartOf("b", t)->rate, 525, 1e-9);
  EXPECT_NEAR(lagging.PartOf("b", t)->rate, 475, 1e-9);
  EXPECT_LE(525 + lagging.PartOf("b", t)->rate, 1000 + 1e-9);
  // Settled, b has all of its share.
  EXPECT_GT(lagging.PartOf("b", t + kSecond)->rate, 900);
}

TEST(RlqsReplicaDecisionTest, AHalvedLimitShrinksEveryPartAtOnce) {
  RlqsReplicaDecision first = DecideRlqsReplicas(
      Limit(1000, 100), {{"a", {0, {800}}}, {"b", {0, {800}}}}, std::nullopt, kT0, kSecond);
  RlqsReplicaDecision halved = DecideRlqsReplicas(
      Limit(500, 50), {{"a", {475, {800}}}, {"b", {475, {800}}}}, first, kT0 + kSecond, kSecond);
  EXPECT_LE(SumOfParts(halved, kT0 + kSecond), 500 * 0.95 + 1e-9);
}

TEST(RlqsReplicaDecisionTest, AGoneReplicasPartIsHeldBackUntilItsRecordSaysItsAssignmentsEnd) {
  const RlqsRule rule = Limit(1000, 100);
  const int64_t a_until = kT0 + 20 * kSecond;
  RlqsReplicaDecision first =
      DecideRlqsReplicas(rule, {{"a", {0, {500}, a_until}}, {"b", {0, {2000}, kT0 + 20 * kSecond}}},
                         std::nullopt, kT0, kSecond);
  const double a_part = first.parts.at("a").rate;
  ASSERT_NEAR(a_part, 475, 1e-9);
  ASSERT_EQ(first.held.at("a").until_us, a_until);
  // a's record went stale; its Envoys may enforce its 475 until a_until: b grows into the rest
  // only, in every decision until then (each carries a's entry on).
  RlqsReplicaDecision second = DecideRlqsReplicas(rule, {{"b", {475, {2000}, kT0 + 24 * kSecond}}},
                                                  first, kT0 + 4 * kSecond, kSecond);
  EXPECT_FALSE(second.parts.contains("a"));
  EXPECT_NEAR(second.held.at("a").rate, a_part, 1e-9);
  RlqsReplicaDecision third = DecideRlqsReplicas(rule, {{"b", {475, {2000}, kT0 + 28 * kSecond}}},
                                                 second, kT0 + 8 * kSecond, kSecond);
  // The fleet's newcomer reserve stays a share of the whole rule (50 of 1000) while a's part is
  // held: b is not handed the part of it that a's departure would otherwise free.
  const double reserve = FairShareSettings().newcomer_reserve;
  for (const RlqsReplicaDecision* d : {&second, &third}) {
    EXPECT_NEAR(d->parts.at("b").rate, 1000 - a_part - reserve * 1000, 1e-9);
    EXPECT_NEAR(d->parts.at("b").burst, 100 - first.parts.at("a").burst - reserve * 100, 1e-9);
    EXPECT_NEAR(SumOfParts(*d, kT0 + 10 * kSecond) + d->held.at("a").rate, 1000 - reserve * 1000,
                1e-9);
  }
  // Past a_until its entry is dropped and b has the whole rate (all but the reserve).
  RlqsReplicaDecision after =
      DecideRlqsReplicas(rule, {{"b", {525, {2000}, kT0 + 40 * kSecond}}}, third, a_until, kSecond);
  EXPECT_FALSE(after.held.contains("a"));
  EXPECT_NEAR(after.parts.at("b").rate, 950, 1e-9);
  // A record of an earlier version says nothing of its end: its part is held back only while
  // the decision spreads, as before.
  RlqsReplicaDecision unknown =
      DecideRlqsReplicas(rule, {{"a", {0, {500}}}, {"b", {0, {2000}}}}, std::nullopt, kT0, kSecond);
  EXPECT_TRUE(unknown.held.empty());
}

TEST(RlqsReplicaDecisionTest, EncodingRoundTripsAndRefusesGarbage) {
  RlqsReplicaDecision d = DecideRlqsReplicas(
      Limit(1000.5, 33.25), {{"host-1-ab", {0, {1.0 / 3, std::nullopt}}}, {"host-2-cd", {0, {7}}}},
      std::nullopt, kT0, kSecond);
  std::optional<RlqsReplicaDecision> back = RlqsReplicaDecision::Decode(d.Encode());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->Encode(), d.Encode());
  EXPECT_EQ(back->rate, 1000.5);
  EXPECT_EQ(back->parts.at("host-1-ab").rate, d.parts.at("host-1-ab").rate);
  for (const char* bad : {"", "x", "rlqs-fleet-1 1 2 3\n", "rlqs-fleet-1 1 2 3 4\na 1 2 3\n",
                          "rlqs-fleet-1 -1 2 3 4\n"}) {
    EXPECT_FALSE(RlqsReplicaDecision::Decode(bad).has_value()) << bad;
  }
  RlqsReplicaRecord r{12.5, {1.0 / 3, std::nullopt, 0}};
  std::optional<RlqsReplicaRecord> r2 = RlqsReplicaRecord::Decode(r.Encode());
  ASSERT_TRUE(r2.has_value());
  EXPECT_EQ(r2->in_force, 12.5);
  EXPECT_EQ(r2->demands, r.demands);
  EXPECT_FALSE(RlqsReplicaRecord::Decode("d1:1;x").has_value());
  EXPECT_FALSE(RlqsReplicaRecord::Decode("d1:1").has_value());
  EXPECT_TRUE(RlqsReplicaRecord::Decode("d1:0;").has_value());
  // The time its assignments end: written, read back, and unknown (0) in an earlier version's.
  r.held_until_us = kT0 + 7;
  EXPECT_EQ(RlqsReplicaRecord::Decode(r.Encode())->held_until_us, kT0 + 7);
  EXPECT_EQ(RlqsReplicaRecord::Decode("d1:2;5,-")->held_until_us, 0);
  EXPECT_EQ(RlqsReplicaRecord::Decode("d1:2;5,-")->demands.size(), 2u);
  EXPECT_FALSE(RlqsReplicaRecord::Decode("d2:2;5,-").has_value());
  EXPECT_FALSE(RlqsReplicaRecord::Decode("d2:2;-1;5").has_value());
  // Held entries round trip, and read as parts of no replica by an earlier version's shape.
  d.held["gone-1"] = {kT0 + 9, 12.5, 3};
  back = RlqsReplicaDecision::Decode(d.Encode());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->Encode(), d.Encode());
  EXPECT_EQ(back->held.at("gone-1").until_us, kT0 + 9);
  EXPECT_EQ(back->held.at("gone-1").rate, 12.5);
  EXPECT_FALSE(back->parts.contains("gone-1"));
  EXPECT_NE(d.Encode().find(absl::StrCat("\nheld:", kT0 + 9, ":gone-1 12.5 3 12.5 3\n")),
            std::string::npos);
  EXPECT_FALSE(RlqsReplicaDecision::Decode("rlqs-fleet-1 1 2 3 4\nheld:x:a 1 2 1 2\n"));
  EXPECT_FALSE(RlqsReplicaDecision::Decode("rlqs-fleet-1 1 2 3 4\nheld:5: 1 2 1 2\n"));
}

TEST(RlqsReplicasTest, OneDecisionPerIntervalAndNewcomersDecideAtOnce) {
  MemoryReplicaBoard board;
  RlqsReplicas a({"a", kSecond}, board), b({"b", kSecond}, board);
  RlqsReplicaBucket bucket{"edge", {{"tenant", "acme"}}, Limit(1000, 100), {2000}, 0};
  std::vector<RlqsReplicas::Result> ra = a.Sync({bucket}, kT0);
  ASSERT_TRUE(ra[0].status.ok());
  ASSERT_TRUE(ra[0].part.has_value());
  EXPECT_NEAR(ra[0].part->rate, 950, 1e-9);
  // b's first sync: it is not in the decision, so it decides at once though a leads.
  RlqsReplicaBucket at_b = bucket;
  at_b.demands = {std::nullopt};
  std::vector<RlqsReplicas::Result> rb = b.Sync({at_b}, kT0 + kSecond / 10);
  ASSERT_TRUE(rb[0].part.has_value());
  EXPECT_NEAR(rb[0].part->rate, 50, 1e-9);
  EXPECT_EQ(a.decisions() + b.decisions(), 2u);
  // Within the interval a's sync decides nothing new; after it, a (the leader) decides again.
  bucket.in_force = 950;
  ra = a.Sync({bucket}, kT0 + kSecond / 2);
  EXPECT_NEAR(ra[0].part->rate, 475, 1e-9);
  EXPECT_EQ(a.decisions(), 1u);
  ra = a.Sync({bucket}, kT0 + 2 * kSecond);
  EXPECT_EQ(a.decisions(), 2u);
  rb = b.Sync({at_b}, kT0 + 2 * kSecond);
  EXPECT_EQ(b.decisions(), 1u) << "b reads a's decision";
  EXPECT_NEAR(ra[0].part->rate + rb[0].part->rate, 950, 1e-6);
  EXPECT_EQ(a.over_assignments(), 0u);
}

TEST(RlqsReplicasTest, TheLeaderCountsRecordsWhosePartsSumOverTheRate) {
  MemoryReplicaBoard board;
  RlqsReplicas a({"a", kSecond}, board), b({"b", kSecond}, board);
  RlqsReplicaBucket bucket{"edge", {{"tenant", "acme"}}, Limit(1000, 100), {500}, 600};
  b.Sync({bucket}, kT0);  // b leads
  bucket.in_force = 500;
  a.Sync({bucket}, kT0 + kSecond / 2);  // a does not lead: it checks nothing
  EXPECT_EQ(a.over_assignments() + b.over_assignments(), 0u);
  b.Sync({RlqsReplicaBucket{bucket.domain, bucket.key, bucket.rule, {500}, 600}}, kT0 + kSecond);
  EXPECT_EQ(b.over_assignments(), 1u) << "600 + 500 > 1000";
}

// Two RLQS servers sharing a board and a fake clock, with simulated Envoys split between them.
enum class BoardKind { kMemory, kRedisCluster };

class RlqsTwoReplicasTest : public ::testing::TestWithParam<BoardKind> {
 protected:
  void SetUp() override {
    if (GetParam() == BoardKind::kMemory) {
      board_ = &memory_board_;
    } else {
      ASSERT_TRUE(testing::RedisServerInstalled()) << "redis-server is required";
      auto target = testing::StartRedisTestTarget(testing::RedisTopology::kCluster);
      ASSERT_OK(target);
      target_ = *std::move(target);
      auto store = testing::OpenRedisTestStore(target_, nullptr);
      ASSERT_OK(store);
      store_ = *std::move(store);
      board_ = store_->replica_board();
    }
    for (const char* name : {"replica-a", "replica-b"}) {
      RlqsServiceOptions options;
      options.board = board_;
      options.replicas = {name, kSecond};
      servers_.push_back(std::make_unique<RlqsTestServer>(options, &clock_));
      servers_.back()->SetConfig(
          "rules: [{name: tenants, match: {tenant: \"*\"}, requests_per_unit: 1000, unit: "
          "second, burst: 100}]");
    }
  }
  void TearDown() override {
    fleet_.clear();
    servers_.clear();
  }

  std::vector<RlqsTestServer*> Servers() { return {servers_[0].get(), servers_[1].get()}; }
  void Settle() { testing::SettleFleet(Servers(), fleet_); }

  FakeEnvoy& Join(RlqsTestServer& server, double demand) {
    fleet_.push_back(std::make_unique<FakeEnvoy>(server, demand));
    fleet_.back()->Open();
    Settle();
    return *fleet_.back();
  }

  double AssignedTotal() {
    double sum = 0;
    for (const auto& c : fleet_) sum += c->AssignedRate();
    return sum;
  }

  // `seconds` of simulated time: demand every 100 ms, a report from every client every
  // report_every_ seconds, then each live server's tick each second. The assignments held never
  // sum over the limit at a second's end (checked). Returns the requests admitted.
  uint64_t Run(int seconds) {
    uint64_t admitted = 0;
    for (int s = 0; s < seconds; ++s) {
      for (int i = 0; i < 10; ++i) {
        clock_.Advance(kSecond / 10);
        for (const auto& c : fleet_) c->Step(kSecond / 10);
      }
      if ((s + 1) % report_every_ == 0) {
        for (const auto& c : fleet_) c->Report(report_every_);
      }
      Settle();
      for (RlqsTestServer* server : Servers()) {
        if (!server->alive()) continue;
        server->service().Tick();
        Settle();
      }
      max_assigned_ = std::max(max_assigned_, AssignedTotal());
    }
    for (const auto& c : fleet_) admitted += c->TakeAdmitted();
    return admitted;
  }

  FakeClock clock_{kT0};
  MemoryReplicaBoard memory_board_;
  testing::RedisTestTarget target_;
  std::unique_ptr<RedisStateStore> store_;
  ReplicaBoard* board_ = nullptr;
  std::vector<std::unique_ptr<RlqsTestServer>> servers_;
  std::vector<std::unique_ptr<FakeEnvoy>> fleet_;
  double max_assigned_ = 0;
  int report_every_ = 1;  // seconds between an Envoy's reports
};

constexpr double kDemands[] = {20, 40, 60, 80, 100, 150, 200, 300, 400, 500};

TEST_P(RlqsTwoReplicasTest, TenEnvoysOnTwoReplicasAreHeldWithinTheBoundsAndFair) {
  for (size_t i = 0; i < std::size(kDemands); ++i) Join(*servers_[i % 2], kDemands[i]);
  Run(5);
  const uint64_t admitted = Run(60);
  RecordProperty("admitted_per_second", std::to_string(static_cast<double>(admitted) / 60));
  EXPECT_GE(admitted, 0.90 * kLimit * 60);
  EXPECT_LE(admitted, 1.05 * kLimit * 60);
  EXPECT_LE(max_assigned_, kLimit + 1e-6);
  for (RlqsTestServer* server : Servers()) {
    EXPECT_EQ(server->service().stats().fleet_over_assignments, 0u);
    EXPECT_EQ(server->service().stats().fleet_errors, 0u);
  }
  EXPECT_GT(servers_[0]->service().stats().fleet_decisions +
                servers_[1]->service().stats().fleet_decisions,
            60u)
      << "one division per interval";
  const std::vector<FairShare> fair =
      DivideFairly(kLimit, 0, FairShareSettings(),
                   std::vector<std::optional<double>>(std::begin(kDemands), std::end(kDemands)));
  for (size_t i = 0; i < fleet_.size(); ++i) {
    if (kDemands[i] >= fair.back().rate) continue;
    EXPECT_GE(fleet_[i]->AssignedRate(), 0.98 * kDemands[i]) << "client " << i;
  }
}

// Envoys that report every 5 s hold assignments for 15 s, longer than a record takes to go stale
// (3 s): a killed replica's Envoys that do not reconnect go on enforcing theirs meanwhile.
TEST_P(RlqsTwoReplicasTest, AKilledReplicasEnvoysThatStayAwayAreCountedUntilTheirAssignmentsEnd) {
  report_every_ = 5;
  for (size_t i = 0; i < std::size(kDemands); ++i) Join(*servers_[i % 2], kDemands[i]);
  Run(10);
  servers_[0]->Kill();
  for (const auto& c : fleet_) {
    if (!c->server()->alive()) c->Drop();  // its stream ended; it keeps its assignment
  }
  max_assigned_ = 0;
  Run(25);  // the survivor takes the dead replica's part only once its Envoys' assignments ended
  EXPECT_LE(max_assigned_, kLimit + 1e-6);
  const uint64_t admitted = Run(10);
  RecordProperty("admitted_per_second", std::to_string(static_cast<double>(admitted) / 10));
  EXPECT_GE(admitted, 0.90 * kLimit * 10) << "the survivor's Envoys have the whole rate";
  EXPECT_LE(max_assigned_, kLimit + 1e-6);
}

TEST_P(RlqsTwoReplicasTest, AKilledReplicasEnvoysMoveToTheOtherAndTheBoundHolds) {
  for (size_t i = 0; i < std::size(kDemands); ++i) Join(*servers_[i % 2], kDemands[i]);
  Run(5);
  servers_[0]->Kill();
  for (const auto& c : fleet_) {
    if (!c->server()->alive()) c->Reconnect(*servers_[1]);
  }
  Settle();
  // Once the old assignments expired (three reporting intervals) and the dead replica's record
  // went stale (three reallocation intervals), the survivor divides the whole rate.
  Run(4);
  max_assigned_ = 0;
  const uint64_t admitted = Run(30);
  RecordProperty("admitted_per_second", std::to_string(static_cast<double>(admitted) / 30));
  RecordProperty("assigned_rate", std::to_string(AssignedTotal()));
  EXPECT_GE(admitted, 0.90 * kLimit * 30);
  EXPECT_LE(admitted, 1.05 * kLimit * 30);
  EXPECT_LE(max_assigned_, kLimit + 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Boards, RlqsTwoReplicasTest,
                         ::testing::Values(BoardKind::kMemory, BoardKind::kRedisCluster),
                         [](const auto& info) {
                           return info.param == BoardKind::kMemory ? "Memory" : "RedisCluster";
                         });

}  // namespace
}  // namespace ratelimit
