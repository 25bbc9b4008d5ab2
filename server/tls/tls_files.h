#ifndef RATELIMIT_SERVER_TLS_TLS_FILES_H_
#define RATELIMIT_SERVER_TLS_TLS_FILES_H_

// Reading and checking PEM files (certificates, private keys) with OpenSSL, so that a bad file is
// reported once, at start-up, naming the flag that points to it. Shared by the server and the
// client tool (target `ratelimit_tls_files`, which depends only on absl and OpenSSL).
//
// Thread safety: the functions keep no state; they are safe to call concurrently.

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ratelimit {

// The contents of `path`, which must hold one or more PEM certificates (a chain, or a bundle of
// CAs). INVALID_ARGUMENT "<flag> <path>: <reason>" when the file cannot be read or holds no
// certificate that parses.
absl::StatusOr<std::string> ReadPemCertificates(absl::string_view flag, const std::string& path);

// The contents of `path`, which must hold one unencrypted PEM private key. Errors as above.
absl::StatusOr<std::string> ReadPemPrivateKey(absl::string_view flag, const std::string& path);

// A certificate chain and the private key of its first certificate, as PEM text.
struct PemKeyPair {
  std::string certificate_chain;
  std::string private_key;
};

// Reads both files (as above) and checks that the key belongs to the chain's first certificate
// (INVALID_ARGUMENT naming both flags and files otherwise).
absl::StatusOr<PemKeyPair> ReadPemKeyPair(absl::string_view cert_flag, const std::string& cert_path,
                                          absl::string_view key_flag, const std::string& key_path);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_TLS_TLS_FILES_H_
