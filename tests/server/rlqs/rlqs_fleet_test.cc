// A simulated fleet of Envoys against a real RLQS server over gRPC, on a fake clock. Each client
// behaves as Envoy's rate_limit_quota filter does: it reports its bucket every interval with a
// whole-second time_elapsed, enforces the TokenBucket it was assigned, and falls back to allowing
// everything when it has no assignment or its assignment expired (the filter's defaults).
//
// Between steps of simulated time the test waits for the fleet and the server to be quiescent:
// every report processed, every action the server wrote read and applied by its client.

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/server/rlqs/rlqs_fake_envoy.h"
#include "tests/server/rlqs/rlqs_test_server.h"

namespace ratelimit {
namespace {

using testing::FakeEnvoy;
using testing::kSecond;
using testing::RlqsTestServer;
namespace rlqs_v3 = envoy::service::rate_limit_quota::v3;

constexpr int64_t kStepUs = kSecond / 10;
constexpr double kLimit = 1000;

std::string Config(double limit) {
  return absl::StrCat("rules: [{name: tenants, match: {tenant: \"*\"}, requests_per_unit: ",
                      static_cast<int64_t>(limit), ", unit: second, burst: 100}]");
}

class RlqsFleetTest : public ::testing::Test {
 protected:
  void SetUp() override { server_.SetConfig(Config(kLimit)); }

  FakeEnvoy& Join(double demand) {
    fleet_.push_back(std::make_unique<FakeEnvoy>(server_, demand));
    fleet_.back()->Open();
    Settle();
    return *fleet_.back();
  }

  // Waits until the server processed every report and every action it wrote was applied.
  void Settle() { testing::SettleFleet({&server_}, fleet_); }

  // Runs `seconds` of simulated time: demand every step, a report from every open client at
  // the end of each second, then a division. Returns the requests admitted.
  uint64_t Run(int seconds, std::vector<FakeEnvoy*> open = {}) {
    if (open.empty()) {
      for (const auto& c : fleet_) open.push_back(c.get());
    }
    uint64_t admitted = 0;
    for (int s = 0; s < seconds; ++s) {
      for (int i = 0; i < kSecond / kStepUs; ++i) {
        server_.clock().Advance(kStepUs);
        for (FakeEnvoy* c : open) c->Step(kStepUs);
      }
      for (FakeEnvoy* c : open) c->Report(1);
      Settle();
      server_.service().Tick();
      Settle();
    }
    for (FakeEnvoy* c : open) {
      last_admitted_[c] = c->TakeAdmitted();
      admitted += last_admitted_[c];
    }
    return admitted;
  }

  double AssignedTotal(const std::vector<FakeEnvoy*>& open) {
    double sum = 0;
    for (FakeEnvoy* c : open) sum += c->AssignedRate();
    return sum;
  }

  std::vector<FakeEnvoy*> Open() {
    std::vector<FakeEnvoy*> out;
    for (const auto& c : fleet_) out.push_back(c.get());
    return out;
  }

  RlqsTestServer server_;
  std::vector<std::unique_ptr<FakeEnvoy>> fleet_;
  // What each client admitted during the last Run.
  std::map<FakeEnvoy*, uint64_t> last_admitted_;
};

constexpr double kDemands[] = {20, 40, 60, 80, 100, 150, 200, 300, 400, 500};

// The rate each demand is entitled to (max-min over the limit less the 5% reserve).
std::vector<double> FairShares(const std::vector<double>& demands, double limit) {
  std::vector<std::optional<double>> d(demands.begin(), demands.end());
  std::vector<FairShare> shares = DivideFairly(limit, 0, FairShareSettings(), d);
  std::vector<double> out;
  for (const FairShare& s : shares) out.push_back(s.rate);
  return out;
}

TEST_F(RlqsFleetTest, SteadyDemandAboveTheLimitIsHeldWithinBoundsAndFair) {
  for (double d : kDemands) Join(d);
  Run(5);  // the demands are learnt
  const uint64_t admitted = Run(60);
  RecordProperty("admitted_per_second", std::to_string(static_cast<double>(admitted) / 60));
  RecordProperty("assigned_rate", std::to_string(AssignedTotal(Open())));
  EXPECT_GE(admitted, 0.90 * kLimit * 60);
  EXPECT_LE(admitted, 1.05 * kLimit * 60);
  EXPECT_LE(AssignedTotal(Open()), kLimit);
  // Every client whose demand is below its fair share (the share of the largest demand) gets
  // what it wants.
  const std::vector<double> fair =
      FairShares(std::vector<double>(std::begin(kDemands), std::end(kDemands)), kLimit);
  int below = 0;
  for (size_t i = 0; i < fleet_.size(); ++i) {
    if (kDemands[i] >= fair.back()) continue;
    ++below;
    EXPECT_GE(fleet_[i]->AssignedRate(), 0.98 * kDemands[i]) << "client " << i;
    EXPECT_GE(static_cast<double>(last_admitted_[fleet_[i].get()]), 0.97 * kDemands[i] * 60)
        << "client " << i;
  }
  EXPECT_EQ(below, 5);
  EXPECT_EQ(server_.service().RuleStats().at("edge/tenants").over_assignments, 0u);
}

TEST_F(RlqsFleetTest, FourfoldDemandShiftReconvergesWithinThreeIntervals) {
  for (double d : kDemands) Join(d);
  Run(5);
  FakeEnvoy& shifting = *fleet_[0];
  ASSERT_GE(shifting.AssignedRate(), 0.98 * 20);
  ASSERT_LT(shifting.AssignedRate(), 80 * 0.5);
  shifting.set_demand(80);
  Run(3);
  std::vector<double> demands(std::begin(kDemands), std::end(kDemands));
  demands[0] = 80;
  const double fair = FairShares(demands, kLimit)[0];
  EXPECT_GE(shifting.AssignedRate(), (1 - FairShareSettings().reassign_threshold) * fair);
  EXPECT_LE(AssignedTotal(Open()), kLimit);
}

// A leaving Envoy's share goes to the others once its assignment has expired (three reporting
// intervals of 1 s, and a second for its delivery), not before: it may still enforce it.
TEST_F(RlqsFleetTest, LeaveAndJoinReassignTheShareWhenItsAssignmentExpires) {
  for (double d : kDemands) Join(d);
  Run(5);
  FakeEnvoy& leaving = *fleet_.back();
  const double freed = leaving.AssignedRate();
  ASSERT_GT(freed, 0);
  leaving.Close();
  Settle();
  std::vector<FakeEnvoy*> open = Open();
  open.pop_back();
  Run(2, open);
  EXPECT_LE(AssignedTotal(open) + freed, kLimit);  // the leaving Envoy's may still be enforced
  Run(3, open);
  // The 9 left want 1350 > the limit: the freed share went to them.
  EXPECT_GE(AssignedTotal(open), 0.9 * kLimit);
  EXPECT_LE(AssignedTotal(open), kLimit);
  // A newcomer gets its assignment at once, and the total still holds.
  FakeEnvoy& newcomer = Join(500);
  open.push_back(&newcomer);
  EXPECT_GT(newcomer.AssignedRate(), 0);
  EXPECT_LE(AssignedTotal(open), kLimit);
  Run(2, open);
  EXPECT_GE(newcomer.AssignedRate(),
            0.9 * FairShares({20, 40, 60, 80, 100, 150, 200, 300, 400, 500}, kLimit)[9]);
  const uint64_t admitted = Run(10, open);
  EXPECT_LE(admitted, 1.05 * kLimit * 10);
  EXPECT_GE(admitted, 0.90 * kLimit * 10);
}

TEST_F(RlqsFleetTest, ReloadHalvingTheLimitIsEnforcedWithinOneInterval) {
  for (double d : kDemands) Join(d);
  Run(5);
  server_.SetConfig(Config(kLimit / 2));
  Run(1);  // one interval: its division pushes the new shares
  EXPECT_LE(AssignedTotal(Open()), kLimit / 2);
  const uint64_t admitted = Run(10);
  EXPECT_LE(admitted, 1.05 * kLimit / 2 * 10);
  EXPECT_GE(admitted, 0.90 * kLimit / 2 * 10);
}

}  // namespace
}  // namespace ratelimit
