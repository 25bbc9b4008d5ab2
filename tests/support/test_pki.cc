#include "tests/support/test_pki.h"

#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tests/support/test_support.h"

namespace ratelimit::testing {
namespace {

absl::Status Run(const std::string& command) {
  auto [code, output] = RunCommand("(" + command + ")");
  if (code != 0) return absl::InternalError(absl::StrCat(command, " failed: ", output));
  return absl::OkStatus();
}

constexpr char kNewKey[] = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";

}  // namespace

TestPki::TestPki(std::string dir) : dir_(std::move(dir)) {
  status_ = MakeCa("ca", "ratelimit test CA");
  if (status_.ok()) status_ = MakeCa("other-ca", "another CA");
  if (status_.ok()) status_ = Issue("server", "ca", "server", "DNS:localhost,IP:127.0.0.1");
  if (status_.ok()) status_ = Issue("admin", "ca", "admin", "URI:spiffe://example.org/admin");
  if (status_.ok()) {
    status_ = Issue("user", "ca", "user", "URI:spiffe://example.org/user,DNS:user.example.org");
  }
  if (status_.ok()) status_ = Issue("rogue", "other-ca", "rogue", "URI:spiffe://example.org/admin");
}

absl::Status TestPki::MakeCa(const std::string& name, const std::string& cn) {
  return Run(absl::StrCat("cd '", dir_, "' && openssl req -x509 ", kNewKey, " -subj '/CN=", cn,
                          "' -days 1 -keyout ", name, ".key -out ", name, ".pem",
                          " -addext basicConstraints=critical,CA:TRUE",
                          " -addext keyUsage=critical,keyCertSign,cRLSign"));
}

absl::Status TestPki::Issue(const std::string& name, const std::string& ca, const std::string& cn,
                            const std::string& san) {
  const std::string ext = absl::StrCat(name, ".ext");
  const std::string serial = std::to_string(1000 + serial_++);
  // The key first (the new key beside the old certificate is a half-done rotation the server
  // must survive), then the certificate, each by rename.
  return Run(absl::StrCat("cd '", dir_, "' && printf 'subjectAltName=", san,
                          "\\nbasicConstraints=CA:FALSE\\nkeyUsage=digitalSignature\\n"
                          "extendedKeyUsage=serverAuth,clientAuth\\n' > ",
                          ext, " && openssl req -new ", kNewKey, " -subj '/CN=", cn, "' -keyout ",
                          name, ".key.new -out ", name, ".csr && openssl x509 -req -in ", name,
                          ".csr -CA ", ca, ".pem -CAkey ", ca, ".key -set_serial ", serial,
                          " -days 1 -extfile ", ext, " -out ", name, ".pem.new 2>&1 && mv ", name,
                          ".key.new ", name, ".key && mv ", name, ".pem.new ", name, ".pem"));
}

std::string TestPki::PresentedCommonName(int port, const std::string& client) const {
  std::string command = absl::StrCat("timeout 20 openssl s_client -connect 127.0.0.1:", port,
                                     " -servername localhost -alpn h2");
  if (!client.empty()) absl::StrAppend(&command, " -cert ", Cert(client), " -key ", Key(client));
  absl::StrAppend(&command, " </dev/null 2>/dev/null | openssl x509 -noout -subject");
  auto [code, output] = RunCommand(command);
  if (code != 0) return "";
  // "subject=CN = server"
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    const size_t at = line.find("CN = ");
    if (absl::StartsWith(line, "subject=") && at != absl::string_view::npos) {
      return std::string(absl::StripAsciiWhitespace(line.substr(at + 5)));
    }
  }
  return "";
}

}  // namespace ratelimit::testing
