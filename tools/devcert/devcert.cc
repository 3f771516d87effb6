#include "tools/devcert/devcert.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvcast::devcert {
namespace {

struct CrtDeleter {
  void operator()(gnutls_x509_crt_int* c) const { gnutls_x509_crt_deinit(c); }
};
struct KeyDeleter {
  void operator()(gnutls_x509_privkey_int* k) const {
    gnutls_x509_privkey_deinit(k);
  }
};
using Crt = std::unique_ptr<gnutls_x509_crt_int, CrtDeleter>;
using Key = std::unique_ptr<gnutls_x509_privkey_int, KeyDeleter>;

absl::Status Gnutls(int rv, absl::string_view what) {
  if (rv >= 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", gnutls_strerror(rv)));
}

bool ParseIp(const std::string& name, std::string* raw) {
  unsigned char buf[sizeof(in6_addr)];
  if (inet_pton(AF_INET, name.c_str(), buf) == 1) {
    raw->assign(reinterpret_cast<char*>(buf), 4);
    return true;
  }
  if (inet_pton(AF_INET6, name.c_str(), buf) == 1) {
    raw->assign(reinterpret_cast<char*>(buf), 16);
    return true;
  }
  return false;
}

bool IsDnsName(const std::string& name) {
  if (name.empty() || name.size() > 253) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '-' && c != '.' && c != '*') {
      return false;
    }
  }
  return true;
}

absl::Status MakeDirs(const std::string& dir) {
  std::string path;
  std::stringstream parts(dir);
  std::string part;
  if (!dir.empty() && dir[0] == '/') path = "/";
  while (std::getline(parts, part, '/')) {
    if (part.empty()) continue;
    path += part + "/";
    if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create directory ", path, ": ",
                       std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

absl::Status WriteFile(const std::string& path, const gnutls_datum_t& data,
                       mode_t mode) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  fchmod(fd, mode);
  size_t done = 0;
  while (done < data.size) {
    ssize_t n = write(fd, data.data + done, data.size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      close(fd);
      return absl::FailedPreconditionError(
          absl::StrCat("cannot write ", path, ": ", std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  close(fd);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", path));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<Key> NewKey() {
  gnutls_x509_privkey_t raw;
  RETURN_IF_ERROR(Gnutls(gnutls_x509_privkey_init(&raw), "privkey init"));
  Key key(raw);
  RETURN_IF_ERROR(Gnutls(
      gnutls_x509_privkey_generate(
          raw, GNUTLS_PK_ECDSA, GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1),
          0),
      "ECDSA P-256 key generation"));
  return key;
}

// A certificate with subject CN=`cn`, O=kvcast development, for `key`.
absl::StatusOr<Crt> NewCertificate(const std::string& cn,
                                   gnutls_x509_privkey_t key,
                                   absl::Duration validity) {
  gnutls_x509_crt_t raw;
  RETURN_IF_ERROR(Gnutls(gnutls_x509_crt_init(&raw), "certificate init"));
  Crt crt(raw);
  RETURN_IF_ERROR(Gnutls(gnutls_x509_crt_set_version(raw, 3), "set version"));
  unsigned char serial[16];
  RETURN_IF_ERROR(Gnutls(gnutls_rnd(GNUTLS_RND_NONCE, serial, sizeof(serial)),
                         "random serial"));
  serial[0] &= 0x7f;  // Positive.
  RETURN_IF_ERROR(Gnutls(gnutls_x509_crt_set_serial(raw, serial, sizeof(serial)),
                         "set serial"));
  time_t now = time(nullptr);
  gnutls_x509_crt_set_activation_time(raw, now - 3600);  // Clock skew.
  gnutls_x509_crt_set_expiration_time(
      raw, now + static_cast<time_t>(absl::ToInt64Seconds(validity)));
  RETURN_IF_ERROR(Gnutls(
      gnutls_x509_crt_set_dn_by_oid(raw, GNUTLS_OID_X520_COMMON_NAME, 0,
                                    cn.data(), cn.size()),
      absl::StrCat("set common name '", cn, "'")));
  const std::string org = "kvcast development";
  RETURN_IF_ERROR(Gnutls(
      gnutls_x509_crt_set_dn_by_oid(raw, GNUTLS_OID_X520_ORGANIZATION_NAME, 0,
                                    org.data(), org.size()),
      "set organization"));
  RETURN_IF_ERROR(Gnutls(gnutls_x509_crt_set_key(raw, key), "set key"));
  unsigned char id[64];
  size_t id_size = sizeof(id);
  RETURN_IF_ERROR(
      Gnutls(gnutls_x509_crt_get_key_id(raw, 0, id, &id_size), "key id"));
  RETURN_IF_ERROR(Gnutls(gnutls_x509_crt_set_subject_key_id(raw, id, id_size),
                         "set subject key id"));
  return crt;
}

absl::Status Export(gnutls_x509_crt_t crt, gnutls_x509_privkey_t key,
                    const std::string& crt_path, const std::string& key_path) {
  gnutls_datum_t out{};
  RETURN_IF_ERROR(Gnutls(gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_PEM, &out),
                         "export certificate"));
  absl::Status st = WriteFile(crt_path, out, 0644);
  gnutls_free(out.data);
  RETURN_IF_ERROR(st);
  out = gnutls_datum_t{};
  RETURN_IF_ERROR(Gnutls(gnutls_x509_privkey_export2_pkcs8(
                             key, GNUTLS_X509_FMT_PEM, nullptr,
                             GNUTLS_PKCS_PLAIN, &out),
                         "export private key"));
  st = WriteFile(key_path, out, 0600);
  gnutls_free(out.data);
  return st;
}

struct Ca {
  Crt crt;
  Key key;
};

absl::StatusOr<Ca> LoadCa(const DevCertPaths& paths) {
  ASSIGN_OR_RETURN(std::string crt_pem, ReadFile(paths.ca_cert));
  ASSIGN_OR_RETURN(std::string key_pem, ReadFile(paths.ca_key));
  gnutls_x509_crt_t crt_raw;
  gnutls_x509_privkey_t key_raw;
  RETURN_IF_ERROR(Gnutls(gnutls_x509_crt_init(&crt_raw), "certificate init"));
  Crt crt(crt_raw);
  RETURN_IF_ERROR(Gnutls(gnutls_x509_privkey_init(&key_raw), "privkey init"));
  Key key(key_raw);
  gnutls_datum_t d{reinterpret_cast<unsigned char*>(crt_pem.data()),
                   static_cast<unsigned>(crt_pem.size())};
  if (int rv = gnutls_x509_crt_import(crt_raw, &d, GNUTLS_X509_FMT_PEM);
      rv < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "existing CA ", paths.ca_cert, " is not a PEM certificate: ",
        gnutls_strerror(rv)));
  }
  d = gnutls_datum_t{reinterpret_cast<unsigned char*>(key_pem.data()),
                     static_cast<unsigned>(key_pem.size())};
  if (int rv = gnutls_x509_privkey_import2(key_raw, &d, GNUTLS_X509_FMT_PEM,
                                           nullptr, 0);
      rv < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "existing CA key ", paths.ca_key, " is unreadable: ",
        gnutls_strerror(rv)));
  }
  return Ca{std::move(crt), std::move(key)};
}

absl::StatusOr<Ca> CreateCa(const DevCertPaths& paths,
                            absl::Duration validity) {
  ASSIGN_OR_RETURN(Key key, NewKey());
  ASSIGN_OR_RETURN(Crt crt, NewCertificate("kvcast development CA", key.get(),
                                           validity));
  RETURN_IF_ERROR(Gnutls(gnutls_x509_crt_set_basic_constraints(crt.get(), 1, 0),
                         "CA basic constraints"));
  RETURN_IF_ERROR(Gnutls(
      gnutls_x509_crt_set_key_usage(crt.get(), GNUTLS_KEY_KEY_CERT_SIGN |
                                                   GNUTLS_KEY_CRL_SIGN |
                                                   GNUTLS_KEY_DIGITAL_SIGNATURE),
      "CA key usage"));
  RETURN_IF_ERROR(Gnutls(gnutls_x509_crt_sign2(crt.get(), crt.get(), key.get(),
                                               GNUTLS_DIG_SHA256, 0),
                         "self-sign CA"));
  RETURN_IF_ERROR(Export(crt.get(), key.get(), paths.ca_cert, paths.ca_key));
  return Ca{std::move(crt), std::move(key)};
}

// A leaf signed by `ca`: serverAuth + clientAuth with `names` as SANs (a
// process that serves and also calls its peers, e.g. a worker, presents
// it both ways), or clientAuth only.
absl::Status IssueLeaf(const Ca& ca, const std::string& cn,
                       const std::vector<std::string>& names, bool client,
                       absl::Duration validity, const std::string& crt_path,
                       const std::string& key_path) {
  ASSIGN_OR_RETURN(Key key, NewKey());
  ASSIGN_OR_RETURN(Crt crt, NewCertificate(cn, key.get(), validity));
  gnutls_x509_crt_t raw = crt.get();
  RETURN_IF_ERROR(Gnutls(gnutls_x509_crt_set_basic_constraints(raw, 0, -1),
                         "leaf basic constraints"));
  RETURN_IF_ERROR(Gnutls(
      gnutls_x509_crt_set_key_usage(raw, GNUTLS_KEY_DIGITAL_SIGNATURE),
      "leaf key usage"));
  RETURN_IF_ERROR(Gnutls(gnutls_x509_crt_set_key_purpose_oid(raw, GNUTLS_KP_TLS_WWW_CLIENT, 0),
                         "extended key usage"));
  if (!client) {
    RETURN_IF_ERROR(Gnutls(gnutls_x509_crt_set_key_purpose_oid(raw, GNUTLS_KP_TLS_WWW_SERVER, 0),
                           "extended key usage"));
  }
  for (const std::string& name : names) {
    std::string ip;
    int rv = ParseIp(name, &ip)
                 ? gnutls_x509_crt_set_subject_alt_name(
                       raw, GNUTLS_SAN_IPADDRESS, ip.data(), ip.size(),
                       GNUTLS_FSAN_APPEND)
                 : gnutls_x509_crt_set_subject_alt_name(
                       raw, GNUTLS_SAN_DNSNAME, name.data(), name.size(),
                       GNUTLS_FSAN_APPEND);
    RETURN_IF_ERROR(Gnutls(rv, absl::StrCat("subjectAltName ", name)));
  }
  unsigned char id[64];
  size_t id_size = sizeof(id);
  unsigned critical = 0;
  if (gnutls_x509_crt_get_subject_key_id(ca.crt.get(), id, &id_size,
                                         &critical) >= 0) {
    RETURN_IF_ERROR(Gnutls(gnutls_x509_crt_set_authority_key_id(raw, id, id_size),
                           "authority key id"));
  }
  RETURN_IF_ERROR(Gnutls(
      gnutls_x509_crt_sign2(raw, ca.crt.get(), ca.key.get(), GNUTLS_DIG_SHA256, 0),
      "sign leaf"));
  return Export(raw, key.get(), crt_path, key_path);
}

}  // namespace

DevCertPaths PathsIn(const std::string& dir) {
  std::string d = dir.empty() || dir.back() == '/' ? dir : dir + "/";
  return DevCertPaths{d + "ca.pem",     d + "ca-key.pem",
                      d + "server.pem", d + "server-key.pem",
                      d + "client.pem", d + "client-key.pem",
                      d + "moqt-auth.key"};
}

absl::Status WriteDevCertificates(const DevCertOptions& options) {
  if (options.out_dir.empty()) {
    return absl::InvalidArgumentError("output directory not set");
  }
  if (options.names.empty()) {
    return absl::InvalidArgumentError(
        "no server names given (DNS names or IP addresses)");
  }
  for (const std::string& name : options.names) {
    std::string ip;
    if (!ParseIp(name, &ip) && !IsDnsName(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", name, "' is neither a DNS name nor an IP address"));
    }
  }
  if (options.validity <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("validity must be positive");
  }
  RETURN_IF_ERROR(MakeDirs(options.out_dir));
  DevCertPaths paths = PathsIn(options.out_dir);
  const bool have_ca = access(paths.ca_cert.c_str(), F_OK) == 0 &&
                       access(paths.ca_key.c_str(), F_OK) == 0;
  ASSIGN_OR_RETURN(Ca ca, options.reuse_ca && have_ca
                              ? LoadCa(paths)
                              : CreateCa(paths, options.validity));
  RETURN_IF_ERROR(IssueLeaf(ca, options.names.front(), options.names,
                            /*client=*/false, options.validity,
                            paths.server_cert, paths.server_key));
  if (!options.client_name.empty()) {
    RETURN_IF_ERROR(IssueLeaf(ca, options.client_name, {}, /*client=*/true,
                              options.validity, paths.client_cert,
                              paths.client_key));
  }
  if (!(options.reuse_ca && have_ca) ||
      access(paths.moqt_auth_key.c_str(), F_OK) != 0) {
    unsigned char key[32];
    if (gnutls_rnd(GNUTLS_RND_KEY, key, sizeof(key)) != 0) {
      return absl::InternalError("gnutls_rnd failed");
    }
    std::string hex = absl::StrCat(
        absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(key), sizeof(key))),
        "\n");
    gnutls_datum_t datum{reinterpret_cast<unsigned char*>(hex.data()),
                         static_cast<unsigned int>(hex.size())};
    RETURN_IF_ERROR(WriteFile(paths.moqt_auth_key, datum, 0600));
  }
  return absl::OkStatus();
}

}  // namespace kvcast::devcert
