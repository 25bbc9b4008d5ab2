#ifndef RATELIMIT_SERVER_OBSERVABILITY_RELOADING_KEY_PAIR_H_
#define RATELIMIT_SERVER_OBSERVABILITY_RELOADING_KEY_PAIR_H_

#include <openssl/ssl.h>

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace ratelimit {

// A certificate chain and private key read from PEM files for an OpenSSL server, re-read when
// either file changes (its modification time, size or inode), so that certificates can be
// rotated without a restart. Install() makes an SSL_CTX ask it for the pair on every handshake.
//
// Thread safety: thread-safe (handshakes on several threads call it concurrently).
class ReloadingKeyPair {
 public:
  ReloadingKeyPair(std::string cert_file, std::string key_file);
  ~ReloadingKeyPair();
  ReloadingKeyPair(const ReloadingKeyPair&) = delete;
  ReloadingKeyPair& operator=(const ReloadingKeyPair&) = delete;

  // Reads the files. INVALID_ARGUMENT naming the file when they do not hold a certificate chain
  // and the private key of its first certificate. On failure the previous pair stays.
  absl::Status Load();

  // Sets `ctx`'s certificate callback to this pair. REQUIRES: Load() succeeded once; this object
  // outlives `ctx`.
  void Install(SSL_CTX* ctx);

 private:
  static int OnHandshake(SSL* ssl, void* self);
  // The files' identity (mtime, size, inode), to notice a change cheaply.
  std::string Signature() const;

  const std::string cert_file_;
  const std::string key_file_;
  absl::Mutex mu_;
  std::string signature_ ABSL_GUARDED_BY(mu_);
  X509* cert_ ABSL_GUARDED_BY(mu_) = nullptr;
  STACK_OF(X509) * chain_ ABSL_GUARDED_BY(mu_) = nullptr;
  EVP_PKEY* key_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_OBSERVABILITY_RELOADING_KEY_PAIR_H_
