#include "server/tls/tls_files.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "storage/file_util.h"

namespace ratelimit {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

BioPtr MemoryBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

absl::Status Invalid(absl::string_view flag, const std::string& path, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": ", reason));
}

absl::StatusOr<std::string> Read(absl::string_view flag, const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, ": no file given"));
  absl::StatusOr<std::string> contents = ReadFileToString(path);
  if (!contents.ok()) return Invalid(flag, path, "cannot read the file");
  return contents;
}

X509Ptr FirstCertificate(const std::string& pem) {
  BioPtr bio = MemoryBio(pem);
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  return cert;
}

PkeyPtr PrivateKey(const std::string& pem) {
  BioPtr bio = MemoryBio(pem);
  // An empty passphrase callback: an encrypted key fails instead of prompting on the terminal.
  PkeyPtr key(PEM_read_bio_PrivateKey(
      bio.get(), nullptr, [](char*, int, int, void*) { return 0; }, nullptr));
  ERR_clear_error();
  return key;
}

}  // namespace

absl::StatusOr<std::string> ReadPemCertificates(absl::string_view flag, const std::string& path) {
  absl::StatusOr<std::string> pem = Read(flag, path);
  if (!pem.ok()) return pem.status();
  if (!FirstCertificate(*pem)) return Invalid(flag, path, "no PEM certificate in the file");
  return pem;
}

absl::StatusOr<std::string> ReadPemPrivateKey(absl::string_view flag, const std::string& path) {
  absl::StatusOr<std::string> pem = Read(flag, path);
  if (!pem.ok()) return pem.status();
  if (!PrivateKey(*pem)) {
    return Invalid(flag, path, "no unencrypted PEM private key in the file");
  }
  return pem;
}

absl::StatusOr<PemKeyPair> ReadPemKeyPair(absl::string_view cert_flag, const std::string& cert_path,
                                          absl::string_view key_flag, const std::string& key_path) {
  absl::StatusOr<std::string> chain = ReadPemCertificates(cert_flag, cert_path);
  if (!chain.ok()) return chain.status();
  absl::StatusOr<std::string> key = ReadPemPrivateKey(key_flag, key_path);
  if (!key.ok()) return key.status();
  X509Ptr cert = FirstCertificate(*chain);
  PkeyPtr pkey = PrivateKey(*key);
  if (X509_check_private_key(cert.get(), pkey.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat(key_flag, " ", key_path, ": the key does not belong to the certificate of ",
                     cert_flag, " ", cert_path));
  }
  return PemKeyPair{*std::move(chain), *std::move(key)};
}

}  // namespace ratelimit
