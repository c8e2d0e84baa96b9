// A certificate authority made for one test, with libcrypto: a CA and the
// certificates it signs (ECDSA P-256, SHA-256, valid from an hour ago for a
// day), each with the subjectAltName a TLS client checks the server's
// against. Written as PEM files under a directory, for the binaries'
// --tls_cert_file, --tls_key_file and --tls_ca_file.
#ifndef STARLING_TESTS_SECURITY_TEST_CERTIFICATES_H_
#define STARLING_TESTS_SECURITY_TEST_CERTIFICATES_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace starling {
namespace testing_security {

// PEM files of one certificate and its key.
struct IssuedFiles {
  std::string cert_file;
  std::string key_file;
};

class TestCertificateAuthority {
 public:
  // A CA named `name`, its certificate written to DIR/NAME-ca.pem.
  static absl::StatusOr<std::unique_ptr<TestCertificateAuthority>> Create(
      const std::string& dir, const std::string& name);
  ~TestCertificateAuthority();

  const std::string& ca_file() const { return ca_file_; }

  // A certificate for `common_name`, signed by this CA, for servers and
  // clients alike, naming `alt_names` ("IP:127.0.0.1,DNS:localhost"):
  // DIR/COMMON_NAME.pem and DIR/COMMON_NAME.key.
  absl::StatusOr<IssuedFiles> Issue(const std::string& common_name,
                                    const std::string& alt_names);

 private:
  struct Keys;
  TestCertificateAuthority(std::string dir, std::string ca_file,
                           std::unique_ptr<Keys> keys);

  const std::string dir_;
  const std::string ca_file_;
  std::unique_ptr<Keys> keys_;
  long next_serial_ = 2;
};

}  // namespace testing_security
}  // namespace starling

#endif  // STARLING_TESTS_SECURITY_TEST_CERTIFICATES_H_
