#include "tools/cli/remote_generate.h"

#include <chrono>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "kvcast/v1/generation.grpc.pb.h"

namespace kvcast::cli {

v1::GenerateRequest MakeGenerateRequest(const GenerateOptions& options, const RemoteOptions& remote) {
  v1::GenerateRequest req;
  if (options.prompt_ids.empty()) {
    req.set_text(options.prompt);
  } else {
    for (int32_t id : options.prompt_ids) req.mutable_token_ids()->add_ids(id);
  }
  v1::SamplingParams* s = req.mutable_sampling();
  s->set_temperature(options.temperature);
  s->set_top_k(options.top_k);
  s->set_top_p(options.top_p);
  s->set_repetition_penalty(options.repetition_penalty);
  s->set_seed(options.seed);
  req.set_max_tokens(options.max_tokens);
  if (!remote.stop.empty()) req.add_stop(remote.stop);
  req.set_ignore_eos(options.ignore_eos);
  req.set_request_id(remote.request_id);
  return req;
}

std::string DescribeFinal(const v1::Final& final) {
  std::string reason(absl::StripPrefix(v1::FinishReason_Name(final.finish_reason()), "FINISH_REASON_"));
  absl::AsciiStrToLower(&reason);
  const v1::Usage& u = final.usage();
  const v1::Timings& t = final.timings();
  return absl::StrFormat(
      "finish: %s; prompt %d tokens (%d cached), generated %d tokens\n"
      "TTFT %.1f ms (queue %.1f ms), TBT mean %.2f ms p99 %.2f ms, e2e %.1f ms\n"
      "KV transfer %d bytes in %.2f ms; prefill %s -> decode %s; retries %d; request %s\n",
      reason, u.prompt_tokens(), u.cached_prompt_tokens(), u.generated_tokens(), t.ttft_ms(),
      t.queue_ms(), t.mean_tbt_ms(), t.p99_tbt_ms(), t.e2e_ms(), t.transfer_bytes(), t.transfer_ms(),
      final.prefill_worker(), final.decode_worker(), final.retries(), final.request_id());
}

absl::Status RemoteGenerate(const GenerateOptions& options, const RemoteOptions& remote) {
  auto channel = MakeSchedulerChannel(remote.scheduler, remote.tls);
  if (!channel.ok()) return channel.status();
  auto stub = v1::Generation::NewStub(*channel);
  grpc::ClientContext ctx;
  AddApiKey(&ctx, remote.api_key);
  if (remote.deadline_s > 0) {
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::microseconds(int64_t(remote.deadline_s * 1e6)));
  }
  auto reader = stub->Generate(&ctx, MakeGenerateRequest(options, remote));
  v1::GenerateResponse resp;
  v1::Final final;
  bool got_final = false, printed = false;
  while (reader->Read(&resp)) {
    if (resp.has_delta()) {
      if (options.print_ids) {
        for (int32_t id : resp.delta().token_ids()) std::printf("%d ", id);
      } else {
        std::fwrite(resp.delta().text().data(), 1, resp.delta().text().size(), stdout);
      }
      std::fflush(stdout);
      printed = true;
    } else if (resp.has_final()) {
      final = resp.final();
      got_final = true;
    }
  }
  grpc::Status status = reader->Finish();
  if (printed) std::printf("\n");
  std::fflush(stdout);
  if (!status.ok()) return FromGrpc(status);
  if (!got_final) return absl::InternalError("the stream ended without a Final message");
  std::fputs(DescribeFinal(final).c_str(), stderr);
  return absl::OkStatus();
}

}  // namespace kvcast::cli
