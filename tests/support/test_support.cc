#include "tests/support/test_support.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "storage/file_util.h"

namespace ratelimit::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base ? base : "/tmp") + "/ratelimit-test-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) std::abort();
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void WriteFileAtomically(const std::string& path, const std::string& contents) {
  if (absl::Status s = ::ratelimit::WriteFileAtomically(path, contents); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    std::abort();
  }
}

std::string NewestWal(const std::string& dir) {
  std::string newest;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string p = e.path().string();
    if (absl::EndsWith(p, ".log") && std::filesystem::file_size(p) > 0 && p > newest) newest = p;
  }
  return newest;
}

uint64_t WalRecordBytes(const std::string& wal) {
  const std::string bytes = ::ratelimit::ReadFileToString(wal).value_or("");
  const size_t last = bytes.find_last_not_of('\0');
  return last == std::string::npos ? 0 : last + 1;
}

RefusingPort::RefusingPort() {
  fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("RefusingPort");
    std::abort();
  }
  port_ = ntohs(addr.sin_port);
}

RefusingPort::~RefusingPort() { close(fd_); }

absl::Status FailingStateStore::Update(absl::Span<const StateKey> keys, DecideFn decide) {
  if (absl::Status e = Error(); !e.ok()) return e;
  return inner_->Update(keys, decide);
}
absl::StatusOr<std::optional<State>> FailingStateStore::Get(const StateKey& key) {
  if (absl::Status e = Error(); !e.ok()) return e;
  return inner_->Get(key);
}
absl::StatusOr<uint64_t> FailingStateStore::Delete(const StateKey& key) {
  if (absl::Status e = Error(); !e.ok()) return e;
  return inner_->Delete(key);
}
absl::StatusOr<uint64_t> FailingStateStore::DeleteAll(LimitSource source, absl::string_view name) {
  if (absl::Status e = Error(); !e.ok()) return e;
  return inner_->DeleteAll(source, name);
}
absl::Status FailingStateStore::Health() {
  if (absl::Status e = Error(); !e.ok()) return e;
  return inner_->Health();
}
absl::Status FailingStateStore::CollectGarbage() {
  if (absl::Status e = Error(); !e.ok()) return e;
  return inner_->CollectGarbage();
}

std::string BinaryPath(const std::string& name) {
  const char* dir = std::getenv("RATELIMIT_BIN_DIR");
  return std::string(dir ? dir : ".") + "/" + name;
}

std::pair<int, std::string> RunCommand(const std::string& command) {
  FILE* f = popen((command + " 2>&1").c_str(), "r");
  if (f == nullptr) return {-1, ""};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const int status = pclose(f);
  if (status == -1) return {-1, out};
  if (WIFSIGNALED(status)) return {128 + WTERMSIG(status), out};
  return {WEXITSTATUS(status), out};
}

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(std::vector<std::string> args,
                                                                    const std::string& work_dir) {
  if (std::getenv("RATELIMIT_BIN_DIR") == nullptr) {
    return absl::FailedPreconditionError("RATELIMIT_BIN_DIR is not set");
  }
  const std::string binary = BinaryPath("ratelimit-server");
  static std::atomic<int> counter{0};
  const std::string tag = std::to_string(getpid()) + "-" + std::to_string(counter++);
  const std::string port_file = work_dir + "/port-" + tag;
  auto p = std::unique_ptr<ServerProcess>(new ServerProcess());
  p->stderr_path_ = work_dir + "/server-" + tag + ".log";
  args.insert(args.begin(), binary);
  args.push_back("--listen=127.0.0.1:0");
  args.push_back("--port_file=" + port_file);
  args.push_back("--metrics_listen=127.0.0.1:0");
  args.push_back("--metrics_port_file=" + port_file + ".metrics");

  p->pid_ = fork();
  if (p->pid_ < 0) return absl::InternalError("fork failed");
  if (p->pid_ == 0) {
    FILE* err = std::freopen(p->stderr_path_.c_str(), "w", stderr);
    (void)err;
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(port_file);
    int port = 0;
    std::ifstream metrics_in(port_file + ".metrics");
    int metrics_port = 0;
    if (in >> port && port > 0 && metrics_in >> metrics_port && metrics_port > 0) {
      p->port_ = port;
      p->metrics_port_ = metrics_port;
      return p;
    }
    int status;
    if (waitpid(p->pid_, &status, WNOHANG) == p->pid_) {
      p->pid_ = -1;
      return absl::InternalError("server exited during start-up: " + p->Stderr());
    }
    // Polling a file the child writes once; there is no event to wait on across processes.
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return absl::DeadlineExceededError("server did not start: " + p->Stderr());
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) StopWith(SIGKILL);
}

int ServerProcess::StopWith(int signal) {
  if (pid_ <= 0) return -1;
  kill(pid_, signal);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

std::optional<int> ServerProcess::StopWithin(int signal, absl::Duration limit) {
  const pid_t pid = pid_;
  if (pid <= 0) return std::nullopt;
  int status = 0;
  absl::Notification exited;
  std::thread waiter([&] {
    status = StopWith(signal);
    exited.Notify();
  });
  const bool in_time = exited.WaitForNotificationWithTimeout(limit);
  if (!in_time) kill(pid, SIGKILL);  // not reaped yet: still this child
  waiter.join();
  if (!in_time) return std::nullopt;
  return status;
}

void StopPollingIdleClientChannels() {
  // gRPC's documented setting (doc/environment_variables.md); 0 turns the backup poller off.
  setenv("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "0", 1);
}

std::string ServerProcess::Stderr() const { return ReadFileToString(stderr_path_).value_or(""); }

LimitConfig TokenBucket(double rate, int64_t period_us, std::optional<double> capacity,
                        std::optional<double> max_reserved) {
  LimitConfig c;
  c.kind = LimitKind::kTokenBucket;
  c.rate = rate;
  c.period_us = period_us;
  c.capacity = capacity;
  c.max_reserved = max_reserved;
  return c;
}

LimitConfig FixedWindow(double rate, int64_t period_us, std::optional<int64_t> start_us,
                        std::optional<double> capacity) {
  LimitConfig c;
  c.kind = LimitKind::kFixedWindow;
  c.rate = rate;
  c.period_us = period_us;
  c.start_us = start_us;
  c.capacity = capacity;
  return c;
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

uint64_t LoggedOccurrences(const std::vector<std::string>& lines, const std::string& event) {
  const std::string summary = event + " repeated ";
  uint64_t total = 0;
  for (const std::string& line : lines) {
    const size_t at = line.find(summary);
    if (at == std::string::npos) {
      // A full line: "<time> <LEVEL> <event>" then fields or the end of the line.
      const size_t e = line.find(" " + event);
      const size_t after = e == std::string::npos ? e : e + 1 + event.size();
      if (e != std::string::npos && (after == line.size() || line[after] == ' ')) ++total;
      continue;
    }
    const std::string rest = line.substr(at + summary.size());
    uint64_t n = 0;
    EXPECT_TRUE(absl::SimpleAtoi(rest.substr(0, rest.find(' ')), &n)) << line;
    total += n;
  }
  return total;
}

}  // namespace ratelimit::testing
