// kvcast-devcert: writes a development CA and certificates for kvcast's QUIC
// endpoints.
//
//   kvcast-devcert --out DIR [--names localhost,127.0.0.1] [--client NAME]
//                  [--days 365] [--new_ca]
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_split.h"
#include "tools/devcert/devcert.h"

ABSL_FLAG(std::string, out, "", "Output directory (created if missing).");
ABSL_FLAG(std::string, names, "localhost,127.0.0.1",
          "Comma-separated DNS names and IP addresses of the server "
          "certificate.");
ABSL_FLAG(std::string, client, "",
          "Also write a client certificate (mutual TLS) with this name.");
ABSL_FLAG(int, days, 365, "Validity in days.");
ABSL_FLAG(bool, new_ca, false,
          "Make a new CA even if DIR already has ca.pem and ca-key.pem.");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "writes a development CA (ca.pem, ca-key.pem) and certificates signed "
      "by it.\nUsage: kvcast-devcert --out DIR [--names a,b] [--client NAME]");
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    std::fprintf(stderr, "kvcast-devcert: unexpected argument '%s'\n",
                 positional[1]);
    return 2;
  }
  kvcast::devcert::DevCertOptions options;
  options.out_dir = absl::GetFlag(FLAGS_out);
  if (options.out_dir.empty()) {
    std::fprintf(stderr, "kvcast-devcert: --out DIR is required\n");
    return 2;
  }
  options.names = absl::StrSplit(absl::GetFlag(FLAGS_names), ',',
                                 absl::SkipWhitespace());
  options.client_name = absl::GetFlag(FLAGS_client);
  options.validity = absl::Hours(24) * absl::GetFlag(FLAGS_days);
  options.reuse_ca = !absl::GetFlag(FLAGS_new_ca);
  absl::Status status = kvcast::devcert::WriteDevCertificates(options);
  if (!status.ok()) {
    std::fprintf(stderr, "kvcast-devcert: %s\n", status.ToString().c_str());
    return 1;
  }
  kvcast::devcert::DevCertPaths paths =
      kvcast::devcert::PathsIn(options.out_dir);
  std::printf("CA:     %s (key %s)\nserver: %s (key %s)\nMoQT authorization key: %s\n",
              paths.ca_cert.c_str(), paths.ca_key.c_str(), paths.server_cert.c_str(),
              paths.server_key.c_str(), paths.moqt_auth_key.c_str());
  if (!options.client_name.empty()) {
    std::printf("client: %s (key %s)\n", paths.client_cert.c_str(),
                paths.client_key.c_str());
  }
  return 0;
}
