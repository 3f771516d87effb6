// What `kvcast generate` asks for, in-process (local_generate.h) or from a
// cluster (remote_generate.h).
#ifndef KVCAST_TOOLS_CLI_GENERATE_OPTIONS_H_
#define KVCAST_TOOLS_CLI_GENERATE_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace kvcast::cli {

struct GenerateOptions {
  std::string prompt;               // text (used when prompt_ids is empty)
  std::vector<int32_t> prompt_ids;  // token ids
  int max_tokens = 64;
  float temperature = 0;  // 0 = greedy
  int top_k = 0;          // 0 = off
  float top_p = 1;
  float repetition_penalty = 1;
  uint64_t seed = 0;
  bool ignore_eos = false;
  bool print_ids = false;  // token ids on stdout instead of text
};

}  // namespace kvcast::cli

#endif  // KVCAST_TOOLS_CLI_GENERATE_OPTIONS_H_
