#ifndef RATELIMIT_TESTS_SUPPORT_TEST_PKI_H_
#define RATELIMIT_TESTS_SUPPORT_TEST_PKI_H_

// Certificates for TLS tests, made at test time with the `openssl` command in a directory of the
// test's own (EC P-256 keys, valid for a day).

#include <string>

#include "absl/status/status.h"

namespace ratelimit::testing {

class TestPki {
 public:
  // Makes, in `dir`:
  //   ca.pem/ca.key              the test CA
  //   other-ca.pem/other-ca.key  an unrelated CA
  //   server.pem/server.key      CN=server, SAN DNS:localhost, IP:127.0.0.1, signed by ca
  //   admin.pem/admin.key        CN=admin, SAN URI:spiffe://example.org/admin, signed by ca
  //   user.pem/user.key          CN=user, SAN URI:spiffe://example.org/user and
  //                              DNS:user.example.org, signed by ca
  //   rogue.pem/rogue.key        CN=rogue, SAN URI:spiffe://example.org/admin, signed by other-ca
  // Check ok() before use.
  explicit TestPki(std::string dir);

  const absl::Status& status() const { return status_; }
  bool ok() const { return status_.ok(); }

  // Issues (or re-issues) `name`.pem/`name`.key in the directory, signed by `ca` ("ca" or
  // "other-ca"), with the given subject CN and subjectAltName value (e.g. "DNS:localhost").
  // The files are replaced atomically (written beside, then renamed), certificate first.
  absl::Status Issue(const std::string& name, const std::string& ca, const std::string& cn,
                     const std::string& san);

  std::string Cert(const std::string& name) const { return dir_ + "/" + name + ".pem"; }
  std::string Key(const std::string& name) const { return dir_ + "/" + name + ".key"; }
  // The subject CN of the certificate a TLS server at 127.0.0.1:`port` presents to a new
  // connection (openssl s_client; client certificate `client` when not empty), or "" when the
  // handshake fails.
  std::string PresentedCommonName(int port, const std::string& client = "") const;

 private:
  absl::Status MakeCa(const std::string& name, const std::string& cn);
  std::string dir_;
  absl::Status status_;
  int serial_ = 1;
};

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_SUPPORT_TEST_PKI_H_
