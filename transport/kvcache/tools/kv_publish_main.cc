// kvcast-kvpub: prefills a prompt with a real model on the CPU and publishes
// its KV cache to a MoQT relay (docs/kvcache-wire-format.md), for interop
// tests with independent subscribers.
//
//   kvcast-kvpub --model DIR (--prompt_ids 1,2,3 | --prompt_len N)
//                --relay HOST:PORT (--ca relay.pem | --insecure)
//                [--listen HOST:PORT --cert C --key K] [--auth_key_file F]
//                [--chunk_tokens 128] [--dump kv.f32] [--linger_s 30]
//
// --listen also serves the tracks on its own MoQT port (as a worker's MoQT
// port does; --relay may then be left out), with --cert/--key as its
// certificate. --auth_key_file signs the PUBLISH_NAMESPACE's authorization
// token and makes --listen's port refuse requests without a valid one.
//
// Once the relay accepted the prompt's namespace (PUBLISH_NAMESPACE_OK; with
// --listen alone: once the port is open) it prints one JSON line on stdout:
//   {"namespace": [root, model_id, digest], "tokens": N, "chunk_tokens": C,
//    "layers": L, "kv_heads": H, "head_dim": D, "dump": PATH, "port": P}
// and serves every track of the prompt until --linger_s passed or SIGINT /
// SIGTERM (exit 0). --dump FILE gets the exact KV the tracks encode: float32
// little-endian, [token][layer][K then V][kv_heads * head_dim], written
// before the JSON line. Exit 2: bad flags; 1: other errors (the model, the
// relay refused or unreachable, the session lost).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "engine/model/checkpoint.h"
#include "engine/transformer.h"
#include "transport/kvcache/naming.h"
#include "transport/kvcache/publisher.h"
#include "engine/kv/token_codec.h"
#include "transport/moqt/authorization.h"
#include "transport/moqt/moqt_endpoint.h"
#include "transport/moqt/tools/client_tls_flags.h"
#include "transport/moqt/tools/tool_flags.h"

ABSL_FLAG(std::string, model, "", ".gguf file or HF model directory (config.json + safetensors)");
ABSL_FLAG(std::string, prompt_ids, "", "prompt token ids, comma-separated");
ABSL_FLAG(int, prompt_len, 0, "prompt of N deterministic token ids (instead of --prompt_ids)");
ABSL_FLAG(int, chunk_tokens, 128, "tokens per group (a multiple of the 16-token page)");
ABSL_FLAG(std::string, dump, "", "write the prompt's exact KV here (float32 LE)");
ABSL_FLAG(std::string, relay, "", "relay address HOST:PORT");
ABSL_FLAG(std::string, listen, "", "also serve the tracks on this UDP HOST:PORT");
ABSL_FLAG(std::string, auth_key_file, "",
          "MoQT authorization keys: sign the PUBLISH_NAMESPACE token; --listen requires tokens");
ABSL_FLAG(bool, ac_encode_thread, true,
          "code the ac tracks' groups on a thread of their own while the loop sends "
          "(false: on the loop thread, as each group's first piece goes out)");
ABSL_FLAG(double, linger_s, 30, "serve this many seconds after announcing, then exit");
ABSL_FLAG(double, connect_timeout_s, 10,
          "give up if the relay has not accepted the namespace by then");

namespace kvcast::kvcache {
namespace {

constexpr int kPageTokens = 16;

// Write end of the pipe that wakes the loop on SIGINT / SIGTERM.
int g_signal_pipe = -1;
void OnSignal(int) {
  const char c = 0;
  (void)!write(g_signal_pipe, &c, 1);
}

absl::StatusOr<std::vector<int32_t>> PromptFromFlags(int vocab_size) {
  const std::string ids = absl::GetFlag(FLAGS_prompt_ids);
  const int len = absl::GetFlag(FLAGS_prompt_len);
  if (ids.empty() == (len == 0)) {
    return absl::InvalidArgumentError("give exactly one of --prompt_ids and --prompt_len");
  }
  std::vector<int32_t> tokens;
  if (!ids.empty()) {
    for (absl::string_view s : absl::StrSplit(ids, ',')) {
      int32_t id = 0;
      if (!absl::SimpleAtoi(s, &id) || id < 0 || id >= vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--prompt_ids: \"", std::string(s), "\" is not a token id in [0, ", vocab_size, ")"));
      }
      tokens.push_back(id);
    }
  } else {
    if (len < 0) return absl::InvalidArgumentError("--prompt_len must be positive");
    for (int i = 0; i < len; ++i) tokens.push_back(int32_t((int64_t(i) * 7919 + 13) % vocab_size));
  }
  return tokens;
}

// [token][layer][K then V][kv_heads * head_dim] float32, host byte order
// (little-endian on every platform kvcast builds for).
absl::Status WriteDump(const std::string& path, const KvPagePool& pool,
                       absl::Span<const int32_t> pages, int num_tokens) {
  const KvLayout& layout = pool.layout();
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) return absl::InvalidArgumentError(absl::StrCat("--dump: cannot write ", path));
  for (int32_t slot : SlotsOf(pages, layout.page_tokens, 0, num_tokens)) {
    for (int l = 0; l < layout.num_layers; ++l) {
      for (const float* cache : {pool.k_cache(l), pool.v_cache(l)}) {
        const float* row = cache + size_t(slot) * layout.token_floats();
        if (std::fwrite(row, sizeof(float), layout.token_floats(), f.get()) !=
            layout.token_floats()) {
          return absl::DataLossError(absl::StrCat("--dump: short write to ", path));
        }
      }
    }
  }
  if (std::fclose(f.release()) != 0) {
    return absl::DataLossError(absl::StrCat("--dump: cannot finish ", path));
  }
  return absl::OkStatus();
}

// The publisher as the relay's client: announces its prompts on the session
// (SetUpstream) and reports the relay's answer and the session's end.
class RelayPublisher : public KvPublisher {
 public:
  RelayPublisher(KvPagePool* pool, Backend* backend, const Hash128& fingerprint, int chunk,
                 AnnounceCallback on_announced, std::function<void(absl::Status)> on_closed)
      : KvPublisher(pool, backend, fingerprint, chunk),
        on_announced_(std::move(on_announced)),
        on_closed_(std::move(on_closed)) {}

  // The relay session: the only one whose prompts are announced (the
  // others are subscribers on --listen's port).
  void set_upstream(moqt::MoqtSession* session) { upstream_ = session; }
  void OnSessionReady(moqt::MoqtSession* session) override {
    if (session != upstream_) return;
    session_ = session;
    SetUpstream(session, on_announced_);
  }
  void OnSessionClosed(moqt::MoqtSession* session, const absl::Status& reason) override {
    KvPublisher::OnSessionClosed(session, reason);
    if (session == session_) {
      session_ = nullptr;
      on_closed_(reason);
    }
  }
  moqt::MoqtSession* session() const { return session_; }

 private:
  AnnounceCallback on_announced_;
  std::function<void(absl::Status)> on_closed_;
  moqt::MoqtSession* upstream_ = nullptr;
  moqt::MoqtSession* session_ = nullptr;
};

absl::Status Main() {
  // Flags first, so a bad command line fails before the model loads.
  if (absl::GetFlag(FLAGS_model).empty()) return absl::InvalidArgumentError("--model is required");
  const bool use_relay = !absl::GetFlag(FLAGS_relay).empty();
  const bool use_listen = !absl::GetFlag(FLAGS_listen).empty();
  if (!use_relay && !use_listen) {
    return absl::InvalidArgumentError("--relay or --listen (or both) is required");
  }
  std::pair<std::string, uint16_t> relay, listen;
  if (use_relay) {
    ASSIGN_OR_RETURN(relay, moqt::ParseHostPort(absl::GetFlag(FLAGS_relay)));
  }
  if (use_listen) {
    ASSIGN_OR_RETURN(listen, moqt::ParseHostPort(absl::GetFlag(FLAGS_listen)));
  }
  const quic::TlsOptions tls = moqt::ClientTlsFromFlags();
  if (use_relay && tls.ca_file.empty() == !tls.insecure_skip_verify) {
    return absl::InvalidArgumentError(
        "give exactly one of --ca FILE (verify the relay) and --insecure (do not)");
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError("--cert and --key go together");
  }
  if (use_listen && tls.cert_file.empty()) {
    return absl::InvalidArgumentError("--listen needs --cert and --key (its certificate)");
  }
  std::shared_ptr<moqt::HmacTokenAuthority> authority;
  if (!absl::GetFlag(FLAGS_auth_key_file).empty()) {
    ASSIGN_OR_RETURN(authority, moqt::HmacTokenAuthority::FromFile(absl::GetFlag(FLAGS_auth_key_file)));
  }
  const int chunk = absl::GetFlag(FLAGS_chunk_tokens);
  if (chunk <= 0 || chunk % kPageTokens != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--chunk_tokens must be a positive multiple of ", kPageTokens));
  }
  if (!(absl::GetFlag(FLAGS_linger_s) > 0) || !(absl::GetFlag(FLAGS_connect_timeout_s) > 0)) {
    return absl::InvalidArgumentError("--linger_s and --connect_timeout_s must be positive");
  }

  // Prefill the prompt, one chunk per forward pass, into a page pool.
  ASSIGN_OR_RETURN(auto checkpoint, Checkpoint::Open(absl::GetFlag(FLAGS_model)));
  auto backend = NewCpuBackend();
  ASSIGN_OR_RETURN(auto model, Transformer::Load(*checkpoint, backend.get()));
  ASSIGN_OR_RETURN(std::vector<int32_t> tokens, PromptFromFlags(model->config().vocab_size));
  const int n = tokens.size();
  if (n > model->max_sequence_len()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the prompt has ", n, " tokens; the model takes ", model->max_sequence_len()));
  }
  const KvLayout layout = model->kv_layout(kPageTokens);
  const int num_pages = (n + kPageTokens - 1) / kPageTokens;
  ASSIGN_OR_RETURN(auto pool, KvPagePool::Create(backend.get(), layout, num_pages));
  ASSIGN_OR_RETURN(KvPages pages, pool->Allocate(num_pages));
  std::vector<float> logits;
  RETURN_IF_ERROR(PrefillInChunks(*model, tokens, pages.ids(), chunk, pool.get(), &logits));
  const std::string dump = absl::GetFlag(FLAGS_dump);
  if (!dump.empty()) RETURN_IF_ERROR(WriteDump(dump, *pool, pages.ids(), n));

  const std::string model_id = ModelId(model->fingerprint());
  const std::string digest =
      PromptDigest(PrefixSeed(model->fingerprint()), tokens, chunk).ToHex();

  ASSIGN_OR_RETURN(auto loop, quic::EventLoop::Create());
  absl::Status result;  // why the loop stopped, when that is an error
  bool announced = false, stopping = false;
  uint16_t port = 0;  // --listen's
  auto fail = [&](absl::Status s) {
    if (stopping) return;
    if (result.ok()) result = std::move(s);
    loop->Stop();
  };
  auto print_info = [&] {
    nlohmann::ordered_json line = {
        {"namespace", {std::string(kNamespaceRoot), model_id, digest}},
        {"tokens", n},
        {"chunk_tokens", chunk},
        {"layers", layout.num_layers},
        {"kv_heads", layout.num_kv_heads},
        {"head_dim", layout.head_dim},
        {"dump", dump.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(dump)},
        {"port", port == 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(port)}};
    std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
    loop->RunAfter(absl::Seconds(absl::GetFlag(FLAGS_linger_s)), [&] { loop->Stop(); });
  };
  auto on_announced = [&](const std::string&, absl::Status s) {
    if (!s.ok()) {
      fail(absl::UnavailableError(absl::StrCat("the relay refused PUBLISH_NAMESPACE: ",
                                               std::string(s.message()))));
      return;
    }
    announced = true;
    print_info();
  };
  auto on_closed = [&](absl::Status s) {
    fail(absl::UnavailableError(absl::StrCat("the relay closed the session: ", s.ToString())));
  };
  RelayPublisher publisher(pool.get(), backend.get(), model->fingerprint(), chunk, on_announced,
                           on_closed);
  publisher.SetAnnounceAuthority(authority);
  if (absl::GetFlag(FLAGS_ac_encode_thread)) publisher.CodeAcInBackground(loop.get());
  // The whole prompt is computed: hand every chunk over (a share of its
  // pages each), then end it.
  RETURN_IF_ERROR(publisher.BeginPrompt(digest, n));
  const int pages_per_chunk = chunk / kPageTokens;
  for (int g = 0; g * chunk < n; ++g) {
    const int first = g * pages_per_chunk;
    const int count = std::min(pages_per_chunk, num_pages - first);
    ASSIGN_OR_RETURN(KvPages chunk_pages, pages.Share(first, count));
    RETURN_IF_ERROR(publisher.ChunkReady(digest, g, std::move(chunk_pages)));
  }
  RETURN_IF_ERROR(publisher.EndPrompt(digest, absl::OkStatus()));
  pages.Reset();

  // SIGINT / SIGTERM end the run cleanly, through the loop. A handler, not
  // a blocked mask + signalfd: the BLAS library starts threads before
  // main(), and any thread may take the signal.
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_NONBLOCK | O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  g_signal_pipe = pipe_fds[1];
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  RETURN_IF_ERROR(loop->AddFd(pipe_fds[0], [&] {
    char buf[16];
    while (read(pipe_fds[0], buf, sizeof(buf)) > 0) {
    }
    loop->Stop();
  }));

  std::unique_ptr<moqt::MoqtServer> server;
  if (use_listen) {
    quic::TlsOptions server_tls;
    server_tls.cert_file = tls.cert_file;
    server_tls.key_file = tls.key_file;
    moqt::SessionOptions options;
    options.authorizer = authority;
    ASSIGN_OR_RETURN(server, moqt::MoqtServer::Create(loop.get(), listen.first, listen.second,
                                                      server_tls, quic::TransportOptions{},
                                                      options, &publisher));
    port = server->port();
    if (!use_relay) print_info();
  }
  std::unique_ptr<moqt::MoqtClient> client;
  if (use_relay) {
    ASSIGN_OR_RETURN(client,
                     moqt::MoqtClient::Connect(loop.get(), relay.first, relay.second, tls,
                                               quic::TransportOptions{}, moqt::SessionOptions{},
                                               &publisher));
    publisher.set_upstream(client->session());
  }
  loop->RunAfter(absl::Seconds(absl::GetFlag(FLAGS_connect_timeout_s)), [&] {
    if (use_relay && !announced) {
      fail(absl::DeadlineExceededError(absl::StrCat(
          "the relay at ", absl::GetFlag(FLAGS_relay), " did not accept the namespace within ",
          absl::GetFlag(FLAGS_connect_timeout_s), " s")));
    }
  });
  loop->Run();
  stopping = true;

  // Leave politely: withdraw the namespace (DropPrompt), close the session.
  publisher.DropPrompt(digest);
  if (moqt::MoqtSession* session = publisher.session()) {
    session->Close(moqt::TerminationCode::kNoError, "kvcast-kvpub done");
  }
  client.reset();
  server.reset();
  loop->RemoveFd(pipe_fds[0]);
  g_signal_pipe = -1;
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  return result;
}

}  // namespace
}  // namespace kvcast::kvcache

int main(int argc, char** argv) {
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 1) {
    std::fprintf(stderr, "kvcast-kvpub: unexpected argument \"%s\" (flags only; --help)\n",
                 args[1]);
    return 2;
  }
  absl::Status s = kvcast::kvcache::Main();
  if (!s.ok()) {
    std::fprintf(stderr, "kvcast-kvpub: %s\n", s.ToString().c_str());
    return absl::IsInvalidArgument(s) ? 2 : 1;
  }
  return 0;
}
