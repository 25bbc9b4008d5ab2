// A listening address checked before gRPC binds it: a port another socket listens on is named
// with the system's reason; what the check cannot judge is left to gRPC.
#include "server/serving/listen_check.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace ratelimit {
namespace {

// A TCP socket listening on 127.0.0.1 at a port the system chose; closed with the object.
class Listener {
 public:
  Listener() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(fd_, 1), 0);
    socklen_t len = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~Listener() { Close(); }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  std::string Port() const { return std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(CheckCanListenTest, APortInUseIsNamedWithTheSystemsReason) {
  Listener taken;
  for (const std::string& address :
       {"127.0.0.1:" + taken.Port(), "dns:///127.0.0.1:" + taken.Port(),
        "ipv4:127.0.0.1:" + taken.Port()}) {
    const absl::Status s = CheckCanListen(address);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << address;
    EXPECT_EQ(s.message(), "cannot listen on " + address + ": Address already in use") << s;
  }
  taken.Close();
  EXPECT_TRUE(CheckCanListen("127.0.0.1:" + taken.Port()).ok());
}

TEST(CheckCanListenTest, AFreePortOrAnAddressOnlyGrpcReadsPasses) {
  EXPECT_TRUE(CheckCanListen("127.0.0.1:0").ok());
  for (const char* address :
       {"unix:/nonexistent/dir/socket", "unix-abstract:ratelimit-test",
        "ipv4:127.0.0.1:1,127.0.0.1:2", "no-such-host.invalid:50051", "127.0.0.1", "[::1"}) {
    EXPECT_TRUE(CheckCanListen(address).ok()) << address;
  }
}

TEST(CheckCanListenTest, AnAddressThisHostDoesNotHaveIsRefused) {
  // 192.0.2.1 (TEST-NET-1, documentation only) is on no interface of a test machine.
  const absl::Status s = CheckCanListen("192.0.2.1:0");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "Cannot assign requested address")) << s;
}

}  // namespace
}  // namespace ratelimit
