// `ratelimit reserve --wait` (client/cpp/reserve_wait.h): the reservation shown before the wait,
// an interrupted wait cancelling it, --max_wait cancelling it unshown; the wait on the real
// signals; and the command-line tool interrupted while it waits.
#include "client/cpp/reserve_wait.h"

#include <pthread.h>
#include <signal.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "storage/memory/memory_state_store.h"
#include "tests/support/client_server_test_support.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::BinaryPath;
using ::ratelimit::testing::CheckedBalance;
using ::ratelimit::testing::Eventually;
using ::ratelimit::testing::FakeClock;
using ::ratelimit::testing::kApiLimits;
using ::ratelimit::testing::kSecond;
using ::ratelimit::testing::RunCommand;
using ::ratelimit::testing::StartServerAndClient;
using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WriteFileAtomically;

class ReserveWaitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto started = StartServerAndClient(ServerOptions(), dir_, kApiLimits,  // api: 2 a second
                                        clock_, std::make_unique<MemoryStateStore>());
    ASSERT_OK(started);
    server_ = std::move(started->server);
    client_ = std::move(started->client);
    io_.now = [this] { return absl::FromUnixMicros(clock_.NowMicros()); };
    io_.wait_until = [this](absl::Time when) {
      waited_until_.push_back(when);
      return wait_answer_;
    };
    io_.print = [this](const v1::RateLimitResponse& r) { printed_.push_back(r); };
    io_.fail = [this](const absl::Status& s) {
      failures_.push_back(s);
      return 1;
    };
    io_.note = &note_;
  }

  std::string target() const { return absl::StrCat("127.0.0.1:", server_->port()); }
  // The tokens the api bucket of `key` holds now (a check takes nothing).
  double TokensOf(const std::string& key) { return CheckedBalance(*client_, "api", key); }

  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<RateLimitServer> server_;
  std::unique_ptr<RateLimitClient> client_;
  ReserveWaitIo io_;
  int wait_answer_ = 0;
  std::vector<absl::Time> waited_until_;
  std::vector<v1::RateLimitResponse> printed_;
  std::vector<absl::Status> failures_;
  std::ostringstream note_;
};

TEST_F(ReserveWaitTest, TheReservationIsPrintedBeforeTheWait) {
  io_.wait_until = [this](absl::Time when) {
    EXPECT_EQ(printed_.size(), 1u) << "the wait began before the reservation was shown";
    waited_until_.push_back(when);
    return 0;
  };
  EXPECT_EQ(ReserveThenWait(*client_, MakeRequest("api", "u1", 3), std::nullopt, io_), 0);
  ASSERT_EQ(printed_.size(), 1u);
  EXPECT_TRUE(printed_[0].allowed());
  EXPECT_FALSE(printed_[0].results(0).receipt().empty());  // what would cancel it, shown
  ASSERT_EQ(waited_until_.size(), 1u);
  EXPECT_EQ(waited_until_[0], absl::FromUnixMicros(clock_.NowMicros() + kSecond / 2));
  EXPECT_EQ(TokensOf("u1"), -1);  // the reservation stands
  EXPECT_TRUE(failures_.empty());
}

TEST_F(ReserveWaitTest, AnInterruptedWaitCancelsTheReservation) {
  wait_answer_ = SIGINT;
  v1::RateLimitRequest request = MakeRequest("api", "u1", 3);
  request.set_omit_receipts(true);  // receipts are asked for all the same: they cancel it
  EXPECT_EQ(ReserveThenWait(*client_, request, std::nullopt, io_), 128 + SIGINT);
  EXPECT_EQ(printed_.size(), 1u);
  EXPECT_EQ(waited_until_.size(), 1u);
  EXPECT_EQ(TokensOf("u1"), 2);  // every token back
  EXPECT_NE(note_.str().find("reservation was cancelled"), std::string::npos) << note_.str();
  EXPECT_TRUE(failures_.empty());
}

TEST_F(ReserveWaitTest, AnInterruptedWaitWhoseCancelFailsNamesTheReceipts) {
  io_.wait_until = [this](absl::Time) {
    server_.reset();  // the server goes away while the caller waits
    return SIGTERM;
  };
  EXPECT_EQ(ReserveThenWait(*client_, MakeRequest("api", "u1", 3), std::nullopt, io_), 1);
  ASSERT_EQ(printed_.size(), 1u);
  EXPECT_NE(note_.str().find("ratelimit settle --used=0 --receipt="), std::string::npos)
      << note_.str();
}

TEST_F(ReserveWaitTest, ARetryAtPastMaxWaitIsCancelledAtOnceAndNotShown) {
  EXPECT_EQ(ReserveThenWait(*client_, MakeRequest("api", "u1", 3), absl::Milliseconds(100), io_),
            1);
  ASSERT_EQ(failures_.size(), 1u);
  EXPECT_EQ(failures_[0].code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(failures_[0].message().find("--max_wait"), std::string::npos) << failures_[0];
  EXPECT_TRUE(printed_.empty());
  EXPECT_TRUE(waited_until_.empty());
  EXPECT_EQ(TokensOf("u1"), 2);
  // Within --max_wait, the reservation is kept and waited for.
  EXPECT_EQ(ReserveThenWait(*client_, MakeRequest("api", "u2", 3), absl::Seconds(1), io_), 0);
  EXPECT_EQ(waited_until_.size(), 1u);
  EXPECT_EQ(TokensOf("u2"), -1);
}

TEST_F(ReserveWaitTest, ADeniedOrAnAlreadyUsableReservationIsNotWaitedFor) {
  EXPECT_EQ(ReserveThenWait(*client_, MakeRequest("api", "u1", 1), std::nullopt, io_), 0);
  v1::RateLimitRequest tight = MakeRequest("tight", "u1");
  v1::LimitConfig* config = tight.mutable_limits(0)->mutable_config();
  config->set_kind(v1::TOKEN_BUCKET);
  config->set_rate(1);
  config->mutable_period()->set_seconds(1);
  config->set_max_reserved(0);
  ASSERT_TRUE(client_->Consume(tight).ok());
  EXPECT_EQ(ReserveThenWait(*client_, tight, std::nullopt, io_), 2);
  ASSERT_EQ(printed_.size(), 2u);
  EXPECT_FALSE(printed_[1].allowed());
  EXPECT_TRUE(waited_until_.empty());
}

// The real wait: a held signal that arrived before the wait ends it at once, with its number.
TEST(WaitUnlessInterruptedTest, AHeldSignalEndsTheWaitAndTheTimeEndsItOtherwise) {
  sigset_t before;
  pthread_sigmask(SIG_SETMASK, nullptr, &before);
  HoldInterrupts();
  ASSERT_EQ(raise(SIGTERM), 0);  // held: pending for this thread, not the process's end
  EXPECT_EQ(WaitUnlessInterrupted(absl::Now() + absl::Hours(1)), SIGTERM);
  EXPECT_EQ(WaitUnlessInterrupted(absl::Now()), 0);  // nothing pending, and the time has come
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
}

// The command-line tool: the reservation on standard output while it waits (an hour: the server's
// clock is an hour ahead), then Ctrl-C: exit status 130 and the tokens back.
TEST(ReserveWaitCliTest, CtrlCWhileWaitingCancelsTheReservation) {
  TempDir dir;
  WriteFileAtomically(dir.File("limits.yaml"), kApiLimits);
  FakeClock clock(absl::ToUnixMicros(absl::Now() + absl::Hours(1)));
  ServerOptions o;
  o.listen.address = "127.0.0.1:0";
  o.limits.file = dir.File("limits.yaml");
  auto server = RateLimitServer::Start(o, clock, std::make_unique<MemoryStateStore>());
  ASSERT_OK(server);
  const std::string target = absl::StrCat("127.0.0.1:", (*server)->port());
  const std::string out = dir.File("out"), pid_file = dir.File("pid");
  std::pair<int, std::string> ran;
  std::thread cli([&] {
    ran = RunCommand(absl::StrCat("echo $$ > ", pid_file, "; exec ", BinaryPath("ratelimit"),
                                  " reserve --wait --timeout=10s --target=", target,
                                  " --name=api --key=u1 --count=3 > ", out));
  });
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  const bool shown = Eventually([&] { return read(out).find("receipt=") != std::string::npos; });
  // The shell writes the pid before it becomes the tool; a tool that never showed the
  // reservation is killed, so that the test ends either way.
  ASSERT_TRUE(Eventually([&] { return !read(pid_file).empty(); }));
  kill(static_cast<pid_t>(std::stol(read(pid_file))), shown ? SIGINT : SIGKILL);
  cli.join();
  ASSERT_TRUE(shown) << ran.second;
  EXPECT_EQ(ran.first, 128 + SIGINT) << ran.second;
  // (RunCommand sends standard error where standard output goes: to the file.)
  EXPECT_NE(read(out).find("reservation was cancelled"), std::string::npos) << read(out);
  auto client = RateLimitClient::Connect(target, ClientOptions{absl::Seconds(10), ""});
  absl::StatusOr<v1::RateLimitResponse> check = client->Check(MakeRequest("api", "u1"));
  ASSERT_OK(check);
  EXPECT_EQ(check->results(0).value(), 2);
}

}  // namespace
}  // namespace ratelimit
