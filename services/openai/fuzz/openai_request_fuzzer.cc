// libFuzzer target for the OpenAI-compatible API's request bodies
// (services/openai/openai_protocol.h): any bytes as a /v1/completions and a
// /v1/chat/completions body are either refused with an ApiError naming a
// field or parsed into a request whose response JSON can be written.
#include <cstddef>
#include <cstdint>
#include <string>

#include "services/openai/openai_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvcast::openai;
  const std::string body(reinterpret_cast<const char*>(data), size);
  for (Endpoint e : {Endpoint::kCompletions, Endpoint::kChat}) {
    CompletionRequest r;
    if (auto err = ParseRequest(e, body, &r)) {
      (void)err->Body();
      continue;
    }
    std::string text;
    for (const Prompt& p : r.prompts) text += p.text.value_or("");
    for (const auto& m : r.messages) text += m["content"].get<std::string>();
    Usage u{int(r.prompts.size()), r.max_tokens.value_or(0), r.min_tokens};
    (void)SseEvent(StreamChunk(e, "id", 0, r.model, 0, text, "stop"));
    (void)Dump(FullResponse(e, "id", 0, r.model, {{text, "length"}}, u));
  }
  return 0;
}
