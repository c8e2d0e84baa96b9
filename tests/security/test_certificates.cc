#include "tests/security/test_certificates.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"

namespace starling {
namespace testing_security {

struct TestCertificateAuthority::Keys {
  EVP_PKEY* key = nullptr;
  X509* cert = nullptr;
  ~Keys() {
    X509_free(cert);
    EVP_PKEY_free(key);
  }
};

namespace {

absl::Status Failed(const std::string& what) {
  return absl::InternalError(absl::StrCat("libcrypto: ", what, " failed"));
}

// Adds extension `nid` with `value` (the openssl.cnf syntax) to `cert`.
absl::Status AddExtension(X509* issuer, X509* cert, int nid,
                          const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) return Failed(absl::StrCat("extension ", value));
  const int added = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return added == 1 ? absl::OkStatus() : Failed("X509_add_ext");
}

// A certificate for `key` named `common_name`, issued by `issuer` (its
// certificate and key; null: self-signed).
absl::StatusOr<X509*> MakeCertificate(EVP_PKEY* key,
                                      const std::string& common_name,
                                      long serial, X509* issuer,
                                      EVP_PKEY* issuer_key, bool ca,
                                      const std::string& alt_names) {
  X509* cert = X509_new();
  if (cert == nullptr) return Failed("X509_new");
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert), 24 * 3600);
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(
      name, "CN", MBSTRING_ASC,
      reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1, 0);
  X509_set_issuer_name(
      cert, issuer != nullptr ? X509_get_subject_name(issuer) : name);
  X509* signer = issuer != nullptr ? issuer : cert;
  absl::Status status;
  if (ca) {
    status.Update(
        AddExtension(signer, cert, NID_basic_constraints, "critical,CA:TRUE"));
    status.Update(AddExtension(signer, cert, NID_key_usage,
                               "critical,keyCertSign,cRLSign"));
    status.Update(
        AddExtension(signer, cert, NID_subject_key_identifier, "hash"));
  } else {
    status.Update(
        AddExtension(signer, cert, NID_basic_constraints, "critical,CA:FALSE"));
    status.Update(AddExtension(signer, cert, NID_key_usage,
                               "critical,digitalSignature,keyEncipherment"));
    status.Update(
        AddExtension(signer, cert, NID_ext_key_usage, "serverAuth,clientAuth"));
    status.Update(AddExtension(signer, cert, NID_subject_alt_name, alt_names));
    status.Update(
        AddExtension(signer, cert, NID_authority_key_identifier, "keyid"));
  }
  if (status.ok() && X509_sign(cert, issuer_key != nullptr ? issuer_key : key,
                               EVP_sha256()) == 0) {
    status = Failed("X509_sign");
  }
  if (!status.ok()) {
    X509_free(cert);
    return status;
  }
  return cert;
}

absl::Status WritePem(const std::string& path, X509* cert, EVP_PKEY* key) {
  BIO* bio = BIO_new(BIO_s_mem());
  const bool ok = cert != nullptr
                      ? PEM_write_bio_X509(bio, cert) == 1
                      : PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0,
                                                 nullptr, nullptr) == 1;
  char* data = nullptr;
  const long length = BIO_get_mem_data(bio, &data);
  std::ofstream out(path, std::ios::binary);
  out.write(data, length);
  BIO_free(bio);
  if (!ok || !out) return Failed(absl::StrCat("writing ", path));
  return absl::OkStatus();
}

}  // namespace

TestCertificateAuthority::TestCertificateAuthority(std::string dir,
                                                   std::string ca_file,
                                                   std::unique_ptr<Keys> keys)
    : dir_(std::move(dir)),
      ca_file_(std::move(ca_file)),
      keys_(std::move(keys)) {}

TestCertificateAuthority::~TestCertificateAuthority() = default;

absl::StatusOr<std::unique_ptr<TestCertificateAuthority>>
TestCertificateAuthority::Create(const std::string& dir,
                                 const std::string& name) {
  auto keys = std::make_unique<Keys>();
  keys->key = EVP_EC_gen("P-256");
  if (keys->key == nullptr) return Failed("EVP_EC_gen");
  absl::StatusOr<X509*> cert =
      MakeCertificate(keys->key, absl::StrCat(name, " test CA"), 1, nullptr,
                      nullptr, /*ca=*/true, "");
  if (!cert.ok()) return cert.status();
  keys->cert = *cert;
  const std::string ca_file = absl::StrCat(dir, "/", name, "-ca.pem");
  if (absl::Status s = WritePem(ca_file, keys->cert, nullptr); !s.ok()) {
    return s;
  }
  return std::unique_ptr<TestCertificateAuthority>(
      new TestCertificateAuthority(dir, ca_file, std::move(keys)));
}

absl::StatusOr<IssuedFiles> TestCertificateAuthority::Issue(
    const std::string& common_name, const std::string& alt_names) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  if (key == nullptr) return Failed("EVP_EC_gen");
  absl::StatusOr<X509*> cert =
      MakeCertificate(key, common_name, next_serial_++, keys_->cert, keys_->key,
                      /*ca=*/false, alt_names);
  if (!cert.ok()) {
    EVP_PKEY_free(key);
    return cert.status();
  }
  IssuedFiles files{absl::StrCat(dir_, "/", common_name, ".pem"),
                    absl::StrCat(dir_, "/", common_name, ".key")};
  absl::Status status = WritePem(files.cert_file, *cert, nullptr);
  status.Update(WritePem(files.key_file, nullptr, key));
  X509_free(*cert);
  EVP_PKEY_free(key);
  if (!status.ok()) return status;
  return files;
}

}  // namespace testing_security
}  // namespace starling
