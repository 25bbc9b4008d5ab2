// The serving state the server reports (server/observability/health.cc): starting, serving,
// store failing, draining, and what it publishes to gRPC's health service.
#include "server/observability/health.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace ratelimit {
namespace {

// Records what the reporter publishes to gRPC's health service.
class RecordingHealthService final : public grpc::HealthCheckServiceInterface {
 public:
  void SetServingStatus(const std::string& service, bool serving) override {
    log.push_back(service + (serving ? ":SERVING" : ":NOT_SERVING"));
  }
  void SetServingStatus(bool serving) override { SetServingStatus("", serving); }
  void Shutdown() override {}
  std::vector<std::string> log;
};

TEST(HealthReporterTest, StartingServingStoreFailingDraining) {
  RecordingHealthService grpc_health;
  HealthReporter health;
  health.Attach(&grpc_health, {""});
  EXPECT_EQ(health.state(), ServingState::kStarting);
  health.SetStoreHealthy(true);  // no effect while starting
  EXPECT_EQ(health.state(), ServingState::kStarting);
  health.SetServing();
  EXPECT_EQ(health.state(), ServingState::kServing);
  health.SetStoreHealthy(false);
  EXPECT_EQ(health.state(), ServingState::kStoreFailing);
  health.SetStoreHealthy(true);
  EXPECT_EQ(health.state(), ServingState::kServing);
  health.SetDraining();
  EXPECT_EQ(health.state(), ServingState::kDraining);
  health.SetServing();  // draining is final
  health.SetStoreHealthy(true);
  EXPECT_EQ(health.state(), ServingState::kDraining);
  EXPECT_EQ(grpc_health.log, (std::vector<std::string>{":NOT_SERVING", ":SERVING", ":NOT_SERVING",
                                                       ":SERVING", ":NOT_SERVING"}));
}

TEST(HealthReporterTest, AwaitStateWaitsForAChangeMadeByAnotherThread) {
  HealthReporter health;
  EXPECT_TRUE(health.AwaitState(ServingState::kStarting, absl::ZeroDuration()));
  EXPECT_FALSE(health.AwaitState(ServingState::kServing, absl::Milliseconds(1)));
  absl::Notification waiting;
  std::thread setter([&] {
    waiting.WaitForNotification();
    health.SetServing();
  });
  waiting.Notify();
  EXPECT_TRUE(health.AwaitState(ServingState::kServing, absl::Seconds(60)));
  setter.join();
  health.SetDraining();
  EXPECT_FALSE(health.AwaitState(ServingState::kServing, absl::Milliseconds(1)));
}

}  // namespace
}  // namespace ratelimit
