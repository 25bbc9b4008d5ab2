#include "server/observability/reloading_key_pair.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "server/observability/log.h"

namespace ratelimit {
namespace {

std::string FileSignature(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return "missing";
  return absl::StrCat(st.st_ino, ":", st.st_size, ":", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec);
}

}  // namespace

ReloadingKeyPair::ReloadingKeyPair(std::string cert_file, std::string key_file)
    : cert_file_(std::move(cert_file)), key_file_(std::move(key_file)) {}

ReloadingKeyPair::~ReloadingKeyPair() {
  X509_free(cert_);
  sk_X509_pop_free(chain_, X509_free);
  EVP_PKEY_free(key_);
}

std::string ReloadingKeyPair::Signature() const {
  return FileSignature(cert_file_) + "/" + FileSignature(key_file_);
}

absl::Status ReloadingKeyPair::Load() {
  const std::string signature = Signature();
  FILE* cf = fopen(cert_file_.c_str(), "r");
  if (!cf) return absl::InvalidArgumentError(absl::StrCat(cert_file_, ": cannot read the file"));
  X509* cert = PEM_read_X509(cf, nullptr, nullptr, nullptr);
  STACK_OF(X509)* chain = sk_X509_new_null();
  while (X509* extra = PEM_read_X509(cf, nullptr, nullptr, nullptr)) sk_X509_push(chain, extra);
  fclose(cf);
  EVP_PKEY* key = nullptr;
  if (FILE* kf = fopen(key_file_.c_str(), "r")) {
    key = PEM_read_PrivateKey(
        kf, nullptr, [](char*, int, int, void*) { return 0; }, nullptr);
    fclose(kf);
  }
  const bool ok = cert && key && X509_check_private_key(cert, key) == 1;
  ERR_clear_error();
  if (!ok) {
    X509_free(cert);
    sk_X509_pop_free(chain, X509_free);
    EVP_PKEY_free(key);
    return absl::InvalidArgumentError(absl::StrCat(
        cert_file_, ", ", key_file_, ": not a PEM certificate and the private key of it"));
  }
  absl::MutexLock lock(&mu_);
  X509_free(cert_);
  sk_X509_pop_free(chain_, X509_free);
  EVP_PKEY_free(key_);
  cert_ = cert;
  chain_ = chain;
  key_ = key;
  signature_ = signature;
  return absl::OkStatus();
}

void ReloadingKeyPair::Install(SSL_CTX* ctx) { SSL_CTX_set_cert_cb(ctx, &OnHandshake, this); }

int ReloadingKeyPair::OnHandshake(SSL* ssl, void* arg) {
  auto* self = static_cast<ReloadingKeyPair*>(arg);
  bool changed;
  {
    absl::MutexLock lock(&self->mu_);
    changed = self->Signature() != self->signature_;
  }
  if (changed) {
    if (absl::Status s = self->Load(); s.ok()) {
      Log(LogLevel::kInfo, "metrics TLS certificate reloaded", {{"file", self->cert_file_}});
    } else {
      Log(LogLevel::kWarning, "metrics TLS certificate not reloaded; the previous one stays",
          {{"error", std::string(s.message())}});
    }
  }
  absl::MutexLock lock(&self->mu_);
  // SSL_use_cert_and_key takes its own references (override = 1 replaces any earlier pair).
  return SSL_use_cert_and_key(ssl, self->cert_, self->key_, self->chain_, 1) == 1 ? 1 : 0;
}

}  // namespace ratelimit
