#include "server/serving/listen_check.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace ratelimit {

absl::Status CheckCanListen(absl::string_view address) {
  absl::string_view rest = address;
  if (!absl::ConsumePrefix(&rest, "dns:///")) {
    if (!absl::ConsumePrefix(&rest, "dns:") && !absl::ConsumePrefix(&rest, "ipv4:")) {
      absl::ConsumePrefix(&rest, "ipv6:");
    }
  }
  if (absl::StrContains(rest, ',') || absl::StartsWith(rest, "unix")) return absl::OkStatus();
  std::string host;
  std::string port;
  if (absl::ConsumePrefix(&rest, "[")) {
    const size_t close = rest.find(']');
    if (close == absl::string_view::npos || rest.substr(close + 1, 1) != ":") {
      return absl::OkStatus();
    }
    host = std::string(rest.substr(0, close));
    port = std::string(rest.substr(close + 2));
  } else {
    const size_t colon = rest.rfind(':');
    if (colon == absl::string_view::npos) return absl::OkStatus();
    host = std::string(rest.substr(0, colon));
    port = std::string(rest.substr(colon + 1));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found) != 0) {
    return absl::OkStatus();
  }
  int first_error = 0;
  bool bound = false;
  for (const addrinfo* a = found; a != nullptr && !bound; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      if (first_error == 0) first_error = errno;
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0) {
      bound = true;
    } else if (first_error == 0) {
      first_error = errno;
    }
    close(fd);
  }
  freeaddrinfo(found);
  if (bound || first_error == 0) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("cannot listen on ", address, ": ", std::strerror(first_error)));
}

}  // namespace ratelimit
