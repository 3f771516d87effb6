#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvcast {

struct Engine::Sequence {
  uint64_t id = 0;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int prompt_len = 0;
  int kv_len = 0;               // tokens whose K/V are in `pages`
  int cached_tokens = 0;
  bool prefilled = false;       // submitted with KV computed elsewhere
  int chunks_published = 0;     // leading full chunks offered to the cache
  int chunks_reported = 0;      // prompt chunks given to on_prompt_chunk (kept on preemption)
  Hash128 seed;                 // chain seed of the sequence's tenant
  std::vector<Hash128> prompt_chain;  // of the prompt's full chunks, from Submit
  Hash128 last_chunk_hash;      // hash of chunk chunks_published - 1 (or seed)
  KvPages pages;                // its references
  GenerationParams params;
  Sampler sampler;
  int generated = 0;
  // Constrained decoding: the grammar, and (made on the compute thread at
  // the first pick) the place in it after the last `replay` tokens.
  std::shared_ptr<const grammar::Grammar> grammar;
  std::optional<grammar::Matcher> matcher;
  int replay = 0;
  int32_t forced_token = -1;  // the format's prefix_token while it is still to be emitted
  // With params.prompt_logprobs: those of prompt tokens 1.. made so far
  // (kept across a preemption), handed out with the first token's event.
  std::vector<TokenLogprob> prompt_logprobs;

  Sequence(uint64_t id, std::vector<int32_t> prompt, const GenerationParams& p)
      : id(id), tokens(std::move(prompt)), params(p), sampler(p.sampling) {
    prompt_len = int(tokens.size());
  }
  int pending() const { return int(tokens.size()) - kv_len; }
  // Whether prompt log-probabilities are still to be made (they go out with
  // the first token): then no cached chunk can stand in for computing the
  // prompt.
  bool prompt_logprobs_due() const {
    return params.prompt_logprobs && generated == 0 &&
           int(prompt_logprobs.size()) + 1 < prompt_len;
  }
};

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

Engine::Engine(const EngineOptions& options, std::unique_ptr<Backend> backend)
    : options_(options), backend_(std::move(backend)) {}

Engine::~Engine() {
  for (auto& seq : running_) Release(seq.get());
  {
    absl::MutexLock lock(&mu_);
    for (auto& seq : waiting_) Release(seq.get());  // prefilled ones hold pages
  }
  if (disk_tier_ != nullptr) {  // keep every cached chunk for the next start
    prefix_cache_->SetObserver(nullptr);  // its owner may be going away
    prefix_cache_->Reclaim(1 << 30);
    host_tier_->FlushToDisk();
  }
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(
    const std::string& model_dir, const EngineOptions& options,
    std::unique_ptr<Backend> backend) {
  if (options.page_tokens <= 0 || options.chunk_tokens <= 0 ||
      options.chunk_tokens % options.page_tokens != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine: chunk_tokens (", options.chunk_tokens,
        ") must be a positive multiple of page_tokens (", options.page_tokens, ")"));
  }
  if (options.max_batch_tokens <= 0 || options.max_running <= 0) {
    return absl::InvalidArgumentError("engine: max_batch_tokens and max_running must be positive");
  }
  std::unique_ptr<Engine> e(new Engine(options, std::move(backend)));
  ASSIGN_OR_RETURN(e->checkpoint_, Checkpoint::Open(model_dir));
  ASSIGN_OR_RETURN(e->model_, Transformer::Load(*e->checkpoint_, e->backend_.get()));
  auto tok = LoadTokenizer(model_dir);
  if (tok.ok()) {
    e->tokenizer_ = std::move(*tok);
  } else if (!absl::IsNotFound(tok.status())) {
    return tok.status();
  }
  KvLayout layout = e->model_->kv_layout(options.page_tokens);
  if (options.kv_fp16_values) layout.storage = e->backend_->Fp16KvStorage();
  int pages = options.num_pages;
  if (pages <= 0) {
    const int64_t page_bytes =
        int64_t(layout.page_bytes()) * 2 * layout.num_layers;
    int64_t bytes = options.kv_cache_bytes;
    if (options.kv_cache_fraction > 0) {
      bytes = int64_t(options.kv_cache_fraction * double(e->backend_->AvailableMemory()));
    }
    pages = int(std::min<int64_t>(std::max<int64_t>(1, bytes / page_bytes), INT32_MAX));
  }
  ASSIGN_OR_RETURN(e->pool_, KvPagePool::Create(e->backend_.get(), layout, pages));
  e->prefix_cache_ = std::make_unique<PrefixCache>(e->pool_.get(), options.chunk_tokens);
  if (options.host_tier_bytes > 0) {
    e->host_tier_ = std::make_unique<HostKvTier>(e->pool_.get(), e->backend_.get(),
                                                 options.chunk_tokens, options.host_tier_format,
                                                 uint64_t(options.host_tier_bytes),
                                                 options.host_tier_policy);
    e->prefix_cache_->SetHostTier(e->host_tier_.get());
  }
  if (!options.disk_tier_dir.empty() && options.disk_tier_bytes > 0) {
    if (e->host_tier_ == nullptr) {
      return absl::InvalidArgumentError("engine: the disk KV tier needs a host tier above it");
    }
    DiskKvTier::Shape shape{e->model_->fingerprint(), options.host_tier_format,
                            options.chunk_tokens, layout, e->host_tier_->chunk_bytes()};
    ASSIGN_OR_RETURN(e->disk_tier_, DiskKvTier::Open(options.disk_tier_dir, shape,
                                                     uint64_t(options.disk_tier_bytes)));
    e->host_tier_->SetDiskTier(e->disk_tier_.get());
  }
  e->prefix_seed_ = PrefixSeed(e->model_->fingerprint());
  return e;
}

absl::Status Engine::CheckRequest(const std::vector<int32_t>& prompt,
                                  const GenerationParams& params,
                                  const PrefilledKv& kv) const {
  if (prompt.empty()) return absl::InvalidArgumentError("engine: empty prompt");
  for (int32_t t : prompt) {
    if (t < 0 || t >= config().vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "engine: token id ", t, " outside the vocabulary of ", config().vocab_size));
    }
  }
  RETURN_IF_ERROR(params.sampling.Validate());
  for (const auto& [token, bias] : params.sampling.logit_bias) {
    if (token < 0 || token >= config().vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("engine: logit_bias of token id ", token,
                                                     " outside the vocabulary of ", config().vocab_size));
    }
  }
  if (params.top_logprobs < 0 || params.top_logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(absl::StrCat("engine: top_logprobs ", params.top_logprobs,
                                                   " outside [0, ", kMaxTopLogprobs, "]"));
  }
  if (params.max_tokens <= 0) {
    return absl::InvalidArgumentError("engine: max_tokens must be positive");
  }
  if (params.response_format.constrained()) {
    if (tokenizer_ == nullptr) {
      return absl::InvalidArgumentError("engine: response_format needs the model's tokenizer");
    }
    const int generated = params.response_format.generated_tokens;
    if (generated < 0 || generated >= int(prompt.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "engine: response_format.generated_tokens ", generated, " outside the prompt of ",
          prompt.size()));
    }
  }
  if (int(prompt.size()) >= model_->max_sequence_len()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine: prompt of ", prompt.size(), " tokens leaves no room under the model's limit of ",
        model_->max_sequence_len()));
  }
  const int64_t page_need = (int64_t(prompt.size()) + options_.page_tokens) / options_.page_tokens;
  if (page_need > pool_->num_pages()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "engine: prompt needs ", page_need, " KV pages, the pool has ", pool_->num_pages()));
  }
  // KV computed elsewhere.
  const int n = int(prompt.size());
  if (kv.tokens < 0 || kv.tokens > n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine: prefilled tokens ", kv.tokens, " outside the prompt of ", n));
  }
  const int pages = (kv.tokens + options_.page_tokens - 1) / options_.page_tokens;
  if (kv.pages.size() != pages) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine: ", kv.tokens, " prefilled tokens need ", pages, " pages, got ",
        kv.pages.size()));
  }
  if (!kv.pages.empty() && kv.pages.pool() != pool_.get()) {
    return absl::InvalidArgumentError("engine: prefilled pages of another page pool");
  }
  if (kv.tokens > 0 && params.prompt_logprobs) {
    return absl::InvalidArgumentError(
        "engine: prompt_logprobs need the whole prompt computed here, not prefilled KV");
  }
  if (kv.tokens < n) {
    if (kv.next_token != -1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "engine: next_token given with only ", kv.tokens, " of ", n, " prompt tokens prefilled"));
    }
    return absl::OkStatus();
  }
  if (kv.next_token < 0 || kv.next_token >= config().vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine: next_token ", kv.next_token, " outside the vocabulary of ",
        config().vocab_size));
  }
  const auto& eos = config().eos_token_ids;
  const auto& stop = params.stop_tokens;
  if (params.max_tokens <= 1 || n + 1 >= model_->max_sequence_len() ||
      std::find(stop.begin(), stop.end(), kv.next_token) != stop.end() ||
      (!params.ignore_eos && std::find(eos.begin(), eos.end(), kv.next_token) != eos.end())) {
    return absl::InvalidArgumentError("engine: prefilled request has nothing left to generate");
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Engine::Submit(std::vector<int32_t> prompt,
                                        const GenerationParams& params) {
  return Submit(std::move(prompt), params, PrefilledKv());
}

absl::StatusOr<uint64_t> Engine::Submit(std::vector<int32_t> prompt,
                                        const GenerationParams& params, PrefilledKv kv) {
  // Refused, `kv`'s pages are released with it.
  if (absl::Status st = CheckRequest(prompt, params, kv); !st.ok()) return st;
  auto seq = std::make_unique<Sequence>(0, std::move(prompt), params);
  if (params.response_format.constrained()) {
    ResponseFormat format = params.response_format;
    if (!format.prefix_token.empty()) {  // one special token, or else its text
      const std::optional<int32_t> id = tokenizer_->TokenId(format.prefix_token);
      if (id && !tokenizer_->TokenBytes(*id)) {
        seq->forced_token = *id;
      } else {
        format.json_prefix = format.prefix_token + format.json_prefix;
      }
      format.prefix_token.clear();
    }
    absl::StatusOr<std::shared_ptr<const grammar::Grammar>> g = grammars_.Get(format);
    if (!g.ok()) return absl::InvalidArgumentError(absl::StrCat("response_format: ", g.status().message()));
    seq->grammar = *std::move(g);
    seq->replay = format.generated_tokens + (kv.next_token >= 0 ? 1 : 0);
    // The output so far must fit: checked here on a private automaton (the
    // shared ones belong to the compute thread), replayed there again.
    const std::vector<int32_t>& t = seq->tokens;
    std::vector<int32_t> out(t.end() - format.generated_tokens, t.end());
    if (kv.next_token >= 0) out.push_back(kv.next_token);
    if (seq->forced_token >= 0 && !out.empty()) {  // emitted already: not replayed
      if (out.front() != seq->forced_token) {
        return absl::InvalidArgumentError(absl::StrCat("response_format: generated token 0 (id ", out.front(),
                                                       ") is not the format's prefix token"));
      }
      out.erase(out.begin());
      seq->forced_token = -1;
      --seq->replay;
    }
    std::optional<grammar::Matcher> check;
    if (!out.empty()) check.emplace(seq->grammar);
    for (size_t i = 0; i < out.size(); ++i) {
      std::optional<std::string> bytes = tokenizer_->TokenBytes(out[i]);
      if (!bytes || !check->Advance(*bytes)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "response_format: generated token ", i, " (id ", out[i], ") does not fit the format"));
      }
    }
  }
  seq->seed = prefix_seed(params.tenant);
  if (kv.tokens == 0 && options_.prefix_caching) {
    seq->prompt_chain = ChunkHashChain(seq->seed, seq->tokens, options_.chunk_tokens);
  }
  if (kv.tokens > 0) {
    seq->prefilled = true;
    seq->pages = std::move(kv.pages);
    seq->kv_len = kv.tokens;
    seq->cached_tokens = kv.tokens;
    if (kv.next_token >= 0) {
      seq->tokens.push_back(kv.next_token);
      seq->generated = 1;
    }
  }
  absl::MutexLock lock(&mu_);
  seq->id = next_id_++;
  const uint64_t id = seq->id;
  waiting_.push_back(std::move(seq));
  sequences_total_.fetch_add(1, std::memory_order_relaxed);
  return id;
}

void Engine::Prefetch(const std::vector<int32_t>& prompt, std::string_view tenant) {
  if (host_tier_ == nullptr || !options_.prefix_caching || prompt.empty()) return;
  prefix_cache_->Prefetch(ChunkHashChain(prefix_seed(tenant), prompt, options_.chunk_tokens),
                          (int(prompt.size()) - 1) / options_.chunk_tokens);
}

void Engine::Cancel(uint64_t id) {
  absl::MutexLock lock(&mu_);
  cancelled_.insert(id);
}

bool Engine::HasWork() const {
  absl::MutexLock lock(&mu_);
  return !waiting_.empty() || running_count_ > 0;
}

int Engine::num_waiting() const {
  absl::MutexLock lock(&mu_);
  return int(waiting_.size());
}

int Engine::num_running() const {
  absl::MutexLock lock(&mu_);
  return running_count_;
}

Hash128 Engine::prefix_seed(std::string_view tenant) const {
  return tenant.empty() ? prefix_seed_ : PrefixSeed(model_->fingerprint(), tenant);
}

int64_t Engine::waiting_prompt_tokens() const {
  int64_t n = 0;
  std::vector<std::pair<std::vector<Hash128>, int>> not_admitted;  // (chain, max chunks)
  {
    absl::MutexLock lock(&mu_);
    for (const auto& s : waiting_) {
      n += std::max(0, s->prompt_len - s->kv_len);
      if (s->kv_len == 0 && !s->prompt_chain.empty()) {
        not_admitted.emplace_back(s->prompt_chain, (s->prompt_len - 1) / options_.chunk_tokens);
      }
    }
  }
  // Their cached prefix is found at admission; count it out already (the
  // scheduler's router reads this as the work queued here).
  for (const auto& [chain, max_chunks] : not_admitted) {
    n -= int64_t(prefix_cache_->Held(chain, max_chunks)) * options_.chunk_tokens;
  }
  return n;
}

bool Engine::FollowsAPrefill(const Sequence& w) const {
  if (!options_.prefix_caching || w.kv_len > 0 || !w.pages.empty() || w.prompt_chain.empty() ||
      w.prompt_logprobs_due()) {
    return false;  // nothing to share, or it holds its KV already (prefilled), or computes it all
  }
  const int chunk = options_.chunk_tokens;
  const size_t reusable = std::min(w.prompt_chain.size(), size_t((w.prompt_len - 1) / chunk));
  for (const auto& r : running_) {
    if (r->kv_len >= r->prompt_len || r->prompt_chain.empty()) continue;  // not prefilling
    size_t common = 0;
    while (common < reusable && common < r->prompt_chain.size() &&
           w.prompt_chain[common] == r->prompt_chain[common]) {
      ++common;
    }
    if (common > size_t(r->kv_len / chunk)) return true;  // `r` has some of them still to do
  }
  return false;
}

void Engine::Admit(Sequence* seq) {
  if (!seq->pages.empty()) {
    // Prefilled (only those hold pages while waiting): offer its full chunks
    // to the cache right away so later requests reuse them.
    seq->chunks_published = 0;
    seq->last_chunk_hash = seq->seed;
    PublishChunks(seq);
    ReportChunks(seq);
    return;
  }
  // Reuse cached chunks, but always leave at least one token to compute: the
  // last token's logits are needed, and shared pages are never written.
  std::vector<Hash128> chain =
      seq->kv_len == 0 && int(seq->tokens.size()) == seq->prompt_len && !seq->prompt_chain.empty()
          ? seq->prompt_chain
          : ChunkHashChain(seq->seed, seq->tokens, options_.chunk_tokens);
  int max_chunks = options_.prefix_caching && !seq->prompt_logprobs_due()
                       ? (int(seq->tokens.size()) - 1) / options_.chunk_tokens
                       : 0;
  seq->pages = prefix_cache_->Acquire(chain, max_chunks);
  int chunks = seq->pages.size() / (options_.chunk_tokens / options_.page_tokens);
  seq->kv_len = chunks * options_.chunk_tokens;
  seq->chunks_published = chunks;
  seq->last_chunk_hash = chunks > 0 ? chain[chunks - 1] : seq->seed;
  if (seq->generated == 0 && !seq->prefilled) seq->cached_tokens = seq->kv_len;
  ReportChunks(seq);
}

absl::Status Engine::EnsurePages(Sequence* seq, int tokens) {
  int need = (seq->kv_len + tokens + options_.page_tokens - 1) / options_.page_tokens -
             seq->pages.size();
  if (need <= 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(KvPages fresh, pool_->Allocate(need));
  seq->pages.Append(std::move(fresh));
  return absl::OkStatus();
}

absl::Status Engine::ShortOfPages(const Sequence& seq, int tokens,
                                  const absl::Status& allocation) const {
  const int need = (seq.kv_len + tokens + options_.page_tokens - 1) / options_.page_tokens;
  const int pinned =
      prefix_cache_->num_pinned() * (options_.chunk_tokens / options_.page_tokens);
  if (need > pool_->num_pages() - pinned) {
    // No wait or retry on an engine of this pool's size helps (the
    // scheduler gives it back to the client).
    return absl::OutOfRangeError(absl::StrCat(
        "the sequence needs ", need, " KV pages at ", seq.kv_len + tokens,
        " tokens; the page pool holds ", pool_->num_pages(),
        pinned > 0 ? absl::StrCat(", ", pinned, " of them pinned") : "", " (",
        allocation.message(), ")"));
  }
  // It would fit, but pages are held outside this engine's sequences (chunks
  // being published or landed, retained prompts): another worker, or this
  // one a moment later, can serve it.
  return absl::ResourceExhaustedError(absl::StrCat(
      "the KV page pool is full for now: the sequence needs ", need, " of its ",
      pool_->num_pages(), " pages, the rest are held by prompts being published or landed (",
      allocation.message(), ")"));
}

void Engine::Release(Sequence* seq) {
  seq->pages.Reset();
  seq->kv_len = 0;
  seq->chunks_published = 0;
  seq->last_chunk_hash = seq->seed;
}

void Engine::PublishChunks(Sequence* seq) {
  const int chunk = options_.chunk_tokens;
  const int pages_per_chunk = chunk / options_.page_tokens;
  while (options_.prefix_caching && (seq->chunks_published + 1) * chunk <= seq->kv_len) {
    const int c = seq->chunks_published;
    seq->last_chunk_hash = NextChunkHash(
        seq->last_chunk_hash, absl::MakeConstSpan(seq->tokens).subspan(c * chunk, chunk));
    // The sequence's own references keep its pages: sharing cannot fail.
    if (absl::StatusOr<KvPages> shared = seq->pages.Share(c * pages_per_chunk, pages_per_chunk);
        shared.ok()) {
      prefix_cache_->Insert(seq->last_chunk_hash, *std::move(shared));
    }
    ++seq->chunks_published;
  }
}

void Engine::ReportChunks(Sequence* seq) {
  if (!seq->params.on_prompt_chunk) return;
  const int chunk = options_.chunk_tokens;
  const int page = options_.page_tokens;
  while (seq->chunks_reported * chunk < seq->prompt_len) {
    const int c = seq->chunks_reported;
    const int end = std::min((c + 1) * chunk, seq->prompt_len);
    if (seq->kv_len < end) break;
    const int first = c * chunk / page;
    absl::StatusOr<KvPages> shared = seq->pages.Share(first, (end + page - 1) / page - first);
    if (shared.ok()) seq->params.on_prompt_chunk(c, *std::move(shared));
    ++seq->chunks_reported;
  }
}

absl::Status Engine::PickTokens(const std::vector<Sequence*>& batch,
                                const std::vector<int>& counts, const float* logits,
                                std::vector<int32_t>* picked,
                                std::vector<std::optional<TokenLogprob>>* logprobs) {
  const int vocab = config().vocab_size;
  picked->assign(batch.size(), -1);
  logprobs->assign(batch.size(), std::nullopt);
  std::vector<TokenSampling> draws;
  std::vector<size_t> on_host, masked;  // masked: indexes into draws
  for (size_t i = 0; i < batch.size(); ++i) {
    Sequence* s = batch[i];
    if (s->pending() != counts[i]) continue;  // more prompt to go
    if (s->sampler.PicksWithoutHistory() && s->generated >= s->params.min_tokens &&
        !s->params.logprobs && (s->grammar == nullptr || backend_->SamplesWithTokenMasks())) {
      if (s->grammar != nullptr) masked.push_back(draws.size());
      draws.push_back(s->sampler.NextDraw(int(i)));
    } else {
      on_host.push_back(i);
    }
  }
  // Constrained rows sampled on the backend: each with its grammar's mask.
  const size_t words = masked.empty() ? 0 : MaskWords();
  batch_masks_.assign(masked.size() * words, 0u);
  for (size_t k = 0; k < masked.size(); ++k) {
    TokenSampling& draw = draws[masked[k]];
    absl::Span<uint32_t> mask = absl::MakeSpan(batch_masks_).subspan(k * words, words);
    RETURN_IF_ERROR(GrammarMask(batch[size_t(draw.row)], mask));
    draw.allowed = mask.data();
  }
  std::vector<int32_t> tokens(draws.size());
  // Waits for the pass even when nothing is drawn.
  RETURN_IF_ERROR(
      backend_->SampleTokens(logits, vocab, draws.data(), int(draws.size()), tokens.data()));
  for (size_t j = 0; j < draws.size(); ++j) (*picked)[draws[j].row] = tokens[j];
  host_logits_.resize(vocab);
  for (size_t i : on_host) {
    backend_->CopyToHost(host_logits_.data(), logits + i * size_t(vocab), vocab * sizeof(float));
    // Log-probabilities are of the model's distribution: the row before
    // the min_tokens masks below and whatever the sampler does to it.
    const bool want_logprobs = batch[i]->params.logprobs;
    if (want_logprobs) raw_logits_ = host_logits_;
    if (batch[i]->generated < batch[i]->params.min_tokens) {
      for (int32_t t : config().eos_token_ids) host_logits_[size_t(t)] = -INFINITY;
      for (int32_t t : batch[i]->params.stop_tokens) {
        if (t >= 0 && t < vocab) host_logits_[size_t(t)] = -INFINITY;
      }
    }
    if (batch[i]->grammar != nullptr) {
      grammar_mask_.assign(MaskWords(), 0u);
      RETURN_IF_ERROR(GrammarMask(batch[i], absl::MakeSpan(grammar_mask_)));
      for (size_t t = 0; t < size_t(vocab); ++t) {
        if (!((grammar_mask_[t >> 5] >> (t & 31)) & 1)) host_logits_[t] = -INFINITY;
      }
    }
    // The output: what this engine generated, after what the prompt holds
    // of a resumed request's.
    const Sequence& s = *batch[i];
    const size_t output =
        s.tokens.size() - size_t(s.prompt_len) + size_t(s.params.response_format.generated_tokens);
    (*picked)[i] = batch[i]->sampler.Sample(host_logits_, batch[i]->tokens, output);
    if (want_logprobs) {
      (*logprobs)[i] = ComputeLogprobs(raw_logits_, (*picked)[i], batch[i]->params.top_logprobs);
    }
  }
  return absl::OkStatus();
}

size_t Engine::MaskWords() {
  if (trie_ == nullptr) {
    trie_ = std::make_unique<grammar::TokenTrie>(grammar::TokenTrie::FromTokenizer(*tokenizer_));
  }
  return (size_t(std::max(config().vocab_size, trie_->vocab_size())) + 31) / 32;
}

absl::Status Engine::GrammarMask(Sequence* seq, absl::Span<uint32_t> mask) {
  const absl::Time start = absl::Now();
  auto allow = [&](int32_t t) {
    if (t >= 0 && size_t(t) < mask.size() * 32) mask[size_t(t) >> 5] |= 1u << (t & 31);
  };
  if (!seq->matcher) {
    seq->matcher.emplace(grammars_.AutomatonOf(seq->grammar));
    for (auto it = seq->tokens.end() - seq->replay; it != seq->tokens.end(); ++it) {
      const std::optional<std::string>& bytes = trie_->bytes_of(*it);
      if (!bytes || !seq->matcher->Advance(*bytes)) {  // checked at Submit
        return absl::InternalError("engine: replayed output does not fit its grammar");
      }
    }
  }
  if (seq->forced_token >= 0) {  // the format's prefix token comes first
    allow(seq->forced_token);
  } else {
    const size_t words = (size_t(trie_->vocab_size()) + 31) / 32;
    seq->matcher->FillMask(*trie_, mask.subspan(0, words));
    // EOS and stop tokens (no bytes of their own) once the output is complete.
    if (seq->matcher->CanEnd()) {
      for (int32_t t : config().eos_token_ids) allow(t);
      for (int32_t t : seq->params.stop_tokens) allow(t);
    }
  }
  grammar_seconds_ += absl::ToDoubleSeconds(absl::Now() - start);
  return absl::OkStatus();
}

void Engine::AddPromptLogprobs(Sequence* seq, const ForwardItem& item, const float* logits,
                               size_t i, size_t other_rows) {
  const size_t vocab = size_t(config().vocab_size);
  const int n = int(item.tokens.size());
  host_logits_.resize(vocab);
  // Position p's logits give token p + 1's; the next one due is token
  // prompt_logprobs.size() + 1.
  for (int j = 0; j < n; ++j) {
    const int next = item.start_pos + j + 1;
    if (next != int(seq->prompt_logprobs.size()) + 1 || next >= seq->prompt_len) continue;
    const size_t row = j + 1 == n ? i : other_rows + size_t(j);
    backend_->CopyToHost(host_logits_.data(), logits + row * vocab, vocab * sizeof(float));
    seq->prompt_logprobs.push_back(
        ComputeLogprobs(host_logits_, seq->tokens[size_t(next)], seq->params.top_logprobs));
  }
}

bool Engine::Accept(Sequence* seq, int32_t tok, SequenceEvent* ev) {
  seq->tokens.push_back(tok);
  ++seq->generated;
  generated_total_.fetch_add(1, std::memory_order_relaxed);
  ev->token = tok;
  const auto& eos = config().eos_token_ids;
  const auto& stop = seq->params.stop_tokens;
  bool complete = false;  // the grammar admits no more bytes
  if (seq->forced_token >= 0 && tok == seq->forced_token) {
    seq->forced_token = -1;
  } else if (seq->matcher) {
    const std::optional<std::string>& bytes = trie_->bytes_of(tok);
    if (bytes && seq->matcher->Advance(*bytes)) complete = !seq->matcher->CanContinue();
  }
  if (complete || std::find(stop.begin(), stop.end(), tok) != stop.end() ||
      (!seq->params.ignore_eos && std::find(eos.begin(), eos.end(), tok) != eos.end())) {
    ev->finish = FinishReason::kStop;
  } else if (seq->generated >= seq->params.max_tokens ||
             int(seq->tokens.size()) >= model_->max_sequence_len()) {
    ev->finish = FinishReason::kLength;
  }
  return ev->finish != FinishReason::kNone;
}

absl::StatusOr<std::vector<SequenceEvent>> Engine::Step() {
  std::vector<SequenceEvent> events;
  auto event_for = [](const Sequence& s) {
    SequenceEvent ev;
    ev.id = s.id;
    ev.prompt_tokens = s.prompt_len;
    ev.cached_tokens = s.cached_tokens;
    ev.generated_tokens = s.generated;
    return ev;
  };
  // Cancellations and admissions.
  std::vector<Sequence*> admitted;
  {
    absl::MutexLock lock(&mu_);
    auto cancel = [&](std::unique_ptr<Sequence>& s) {
      if (!cancelled_.erase(s->id)) return false;
      SequenceEvent ev = event_for(*s);
      ev.finish = FinishReason::kCancelled;
      events.push_back(ev);
      return true;
    };
    for (auto it = running_.begin(); it != running_.end();) {
      if (cancel(*it)) {
        Release(it->get());
        it = running_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (cancel(*it)) {
        Release(it->get());  // a prefilled sequence holds pages while waiting
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
    cancelled_.clear();  // ids that matched nothing are forgotten
    for (auto it = waiting_.begin();
         it != waiting_.end() && int(running_.size()) < options_.max_running;) {
      if (FollowsAPrefill(**it)) {
        ++it;  // stays first in line for the next step
        continue;
      }
      running_.push_back(std::move(*it));
      it = waiting_.erase(it);
      admitted.push_back(running_.back().get());
    }
    running_count_ = int(running_.size());
  }
  for (Sequence* s : admitted) Admit(s);  // outside mu_: may call on_prompt_chunk

  // Plan the pass: decode tokens first, then prompt chunks within the budget.
  std::vector<Sequence*> order;
  for (auto& s : running_) if (s->pending() == 1) order.push_back(s.get());
  for (auto& s : running_) if (s->pending() > 1) order.push_back(s.get());
  std::vector<Sequence*> batch;
  std::vector<int> counts;
  int budget = options_.max_batch_tokens;
  // Prompt positions whose logits rows a pass keeps (prompt_logprobs): at
  // most a chunk's, so the logits buffer stays within chunk_tokens rows
  // beyond the batch's last rows, whatever the vocabulary and pass size.
  int logit_rows = options_.chunk_tokens;
  for (size_t i = 0; i < order.size(); ++i) {
    Sequence* s = order[i];
    int n = std::min(s->pending(), budget);
    if (n <= 0) break;
    if (s->prompt_logprobs_due()) {
      n = std::min(n, logit_rows);
      if (n <= 0) continue;  // the next pass computes it
      logit_rows -= n;
    }
    absl::Status st = EnsurePages(s, n);
    while (!st.ok() && absl::IsResourceExhausted(st)) {
      // Free the youngest other sequence not already in this pass.
      Sequence* victim = nullptr;
      for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
        Sequence* cand = it->get();
        if (cand != s && std::find(batch.begin(), batch.end(), cand) == batch.end() &&
            !cand->pages.empty()) {
          victim = cand;
          break;
        }
      }
      if (victim == nullptr) break;
      Release(victim);  // moved back to the waiting queue below
      ++preemptions_;
      st = EnsurePages(s, n);
    }
    if (!st.ok()) {
      if (!batch.empty()) continue;  // retry next step once others finish
      SequenceEvent ev = event_for(*s);
      ev.finish = FinishReason::kError;
      ev.status = absl::IsResourceExhausted(st) ? ShortOfPages(*s, n, st) : st;
      events.push_back(ev);
      Release(s);
      s->tokens.clear();  // marks it for removal below
      continue;
    }
    batch.push_back(s);
    counts.push_back(n);
    budget -= n;
  }
  // Move preempted sequences (pages released, not in the batch) back to waiting.
  {
    absl::MutexLock lock(&mu_);
    for (auto it = running_.begin(); it != running_.end();) {
      Sequence* s = it->get();
      bool failed = s->tokens.empty();
      bool preempted = !failed && s->pages.empty() &&
                       std::find(batch.begin(), batch.end(), s) == batch.end();
      if (preempted) waiting_.push_front(std::move(*it));
      it = (failed || preempted) ? running_.erase(it) : it + 1;
    }
    running_count_ = int(running_.size());
  }
  if (batch.empty()) return events;

  std::vector<ForwardItem> items;
  std::vector<size_t> other_rows;  // of each item, where its every_logit rows start
  size_t rows = batch.size();
  for (size_t i = 0; i < batch.size(); ++i) {
    Sequence* s = batch[i];
    items.push_back(ForwardItem{absl::MakeConstSpan(s->tokens).subspan(s->kv_len, counts[i]),
                                s->kv_len, s->pages.ids()});
    items.back().every_logit = s->prompt_logprobs_due() && counts[i] > 1;
    other_rows.push_back(rows);
    if (items.back().every_logit) rows += size_t(counts[i]) - 1;
  }
  const absl::Time pass_start = absl::Now();
  ASSIGN_OR_RETURN(const float* logits,
                   model_->ForwardLogits(items, pool_.get(), /*all_logits=*/false));
  // Before publishing: the transfer ops read pages the pass writes.
  std::vector<int32_t> picked;
  std::vector<std::optional<TokenLogprob>> logprobs;
  RETURN_IF_ERROR(PickTokens(batch, counts, logits, &picked, &logprobs));
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i]->prompt_logprobs_due()) {
      AddPromptLogprobs(batch[i], items[i], logits, i, other_rows[i]);
    }
  }
  // Only this thread writes them: a load and a store, no lost update.
  step_seconds_total_.store(step_seconds_total_.load(std::memory_order_relaxed) +
                                absl::ToDoubleSeconds(absl::Now() - pass_start),
                            std::memory_order_relaxed);
  steps_total_.fetch_add(1, std::memory_order_relaxed);
  step_sequences_total_.fetch_add(int64_t(batch.size()), std::memory_order_relaxed);

  std::vector<Sequence*> finished;
  for (size_t i = 0; i < batch.size(); ++i) {
    Sequence* s = batch[i];
    prompt_tokens_total_.fetch_add(std::clamp(s->prompt_len - s->kv_len, 0, counts[i]),
                                   std::memory_order_relaxed);
    s->kv_len += counts[i];
    PublishChunks(s);
    ReportChunks(s);
    if (s->pending() != 0) continue;  // more prompt to go
    SequenceEvent ev = event_for(*s);
    bool done = Accept(s, picked[i], &ev);
    ev.generated_tokens = s->generated;
    ev.logprob = std::move(logprobs[i]);
    if (s->generated == 1) ev.prompt_logprobs = std::move(s->prompt_logprobs);
    events.push_back(ev);
    if (done) finished.push_back(s);
  }
  if (!finished.empty()) {
    absl::MutexLock lock(&mu_);
    for (auto it = running_.begin(); it != running_.end();) {
      if (std::find(finished.begin(), finished.end(), it->get()) != finished.end()) {
        Release(it->get());
        it = running_.erase(it);
      } else {
        ++it;
      }
    }
    running_count_ = int(running_.size());
  }
  return events;
}

}  // namespace kvcast
