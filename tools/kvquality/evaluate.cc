// The KV quality evaluation: see evaluate.h.
#include "tools/kvquality/evaluate.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/kv/token_codec.h"
#include "engine/transformer.h"
#include "tools/kvquality/query_energy.h"
#include "tools/kvquality/track_codecs.h"

namespace kvcast::kvquality {

std::string_view ModeName(Mode mode) {
  switch (mode) {
    case Mode::kProduct:
      return "product";
    case Mode::kAllKv:
      return "all-kv";
    case Mode::kAllKvToken:
      return "all-kv-token";
  }
  return "?";
}

absl::StatusOr<Mode> ModeOfName(std::string_view name) {
  for (Mode m : {Mode::kProduct, Mode::kAllKv, Mode::kAllKvToken}) {
    if (name == ModeName(m)) return m;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "mode \"", std::string(name), "\": expected product, all-kv or all-kv-token"));
}

namespace {

constexpr int kPageTokens = 16;

absl::Status CheckOptions(const EvalOptions& o,
                          const std::vector<absl::Span<const int32_t>>& windows) {
  if (o.group_tokens < 1 || o.prefix_tokens < o.group_tokens ||
      o.prefix_tokens % o.group_tokens != 0 || o.continuation_tokens < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prefix ", o.prefix_tokens, " (a positive multiple of the group, ", o.group_tokens,
        "), continuation ", o.continuation_tokens, " (at least 2)"));
  }
  if (windows.empty()) return absl::InvalidArgumentError("no windows");
  for (const auto& w : windows) {
    if (int(w.size()) != o.prefix_tokens + o.continuation_tokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a window of ", w.size(), " tokens; expected ", o.prefix_tokens + o.continuation_tokens));
    }
  }
  return absl::OkStatus();
}

// One model, a pool holding two sequences (exact, and the track's), and
// the scores gathered so far.
class Evaluation {
 public:
  Evaluation(Backend* backend, const EvalOptions& options)
      : inner_(backend), energy_(backend), round_trip_(&energy_), o_(options) {}

  absl::Status Load(const Checkpoint& checkpoint, int window_tokens);
  // Scores every track of every mode on one window.
  absl::Status Window(absl::Span<const int32_t> window);
  // Adds the window's queries (exact KV, every position) to the query
  // energy.
  absl::Status MeasureEnergy(absl::Span<const int32_t> window);
  ChannelEnergy Energy() const { return {energy_.MeanEnergy(), energy_.MeanKeyEnergy()}; }
  // Adds the window's exact KV, but its first position's, to `fitter`.
  absl::Status AddKv(absl::Span<const int32_t> window, kvcache::xl::KvBasisFitter* fitter);
  kvcache::ac::AcShape shape() const {
    const KvLayout& l = pool_->layout();
    return {l.num_layers, l.num_kv_heads, l.head_dim};
  }
  std::vector<TrackResult> Results(int windows) const;

 private:
  // Forwards window tokens [first, end) onto `pages` in group-sized chunks;
  // with `logits`, it ends holding every forwarded position's logits.
  absl::Status Run(absl::Span<const int32_t> window, int first, int end,
                   const std::vector<int32_t>& pages, std::vector<float>* logits);
  void Score(size_t key, const std::vector<float>& exact, const std::vector<float>& track,
             absl::Span<const int32_t> targets);
  // All-kv-token's continuation on the track's pages: one token a step,
  // each token's KV through the track after its step; *logits as Run's.
  absl::Status RunPublishingTokens(const HarnessTrack& track, absl::Span<const int32_t> window,
                                   std::vector<float>* logits);

  Backend* const inner_;
  QueryEnergyBackend energy_;
  RoundTripBackend round_trip_;  // the model's backend, over energy_
  const EvalOptions o_;
  std::unique_ptr<Transformer> model_;
  std::unique_ptr<KvPagePool> pool_;
  KvPages exact_pages_, track_pages_;
  std::vector<int32_t> exact_table_, track_table_;
  std::unique_ptr<TrackTransfer> transfer_;
  std::vector<HarnessTrack> tracks_;
  // Per (mode, track) index: windows' scores, and prefix bytes.
  std::vector<std::vector<std::vector<PositionScore>>> scores_;
  std::vector<size_t> bytes_;
  size_t token_values_ = 0;
};

absl::Status Evaluation::Load(const Checkpoint& checkpoint, int window_tokens) {
  for (const std::string& name : o_.tracks) {
    ASSIGN_OR_RETURN(HarnessTrack t,
                     ParseTrack(name, o_.ac_tuning ? &*o_.ac_tuning : nullptr));
    tracks_.push_back(t);
  }
  ASSIGN_OR_RETURN(model_, Transformer::Load(checkpoint, &round_trip_));
  KvLayout layout = model_->kv_layout(kPageTokens);
  layout.storage = inner_->Fp16KvStorage();  // as the workers keep KV
  token_values_ = layout.token_floats() * 2 * layout.num_layers;
  const int pages = (window_tokens + kPageTokens - 1) / kPageTokens;
  ASSIGN_OR_RETURN(pool_, KvPagePool::Create(inner_, layout, 2 * pages));
  ASSIGN_OR_RETURN(exact_pages_, pool_->Allocate(pages));
  ASSIGN_OR_RETURN(track_pages_, pool_->Allocate(pages));
  exact_table_.assign(exact_pages_.ids().begin(), exact_pages_.ids().end());
  track_table_.assign(track_pages_.ids().begin(), track_pages_.ids().end());
  transfer_ = std::make_unique<TrackTransfer>(layout, RopeInverseFrequencies(model_->config()),
                                               o_.kv_basis);
  const bool all_kv = std::count(o_.modes.begin(), o_.modes.end(), Mode::kAllKv) > 0;
  for (const auto& c : tracks_) {
    if (c.xl && o_.kv_basis == nullptr) {
      return absl::InvalidArgumentError("the xl tracks need the model's KV basis (--kv_basis)");
    }
    // Fails for what cannot run.
    if (all_kv) RETURN_IF_ERROR(round_trip_.SetTrack(c, pool_.get()));
  }
  RETURN_IF_ERROR(round_trip_.SetTrack(std::nullopt, nullptr));
  scores_.resize(o_.modes.size() * tracks_.size());
  bytes_.resize(tracks_.size());
  return absl::OkStatus();
}

absl::Status Evaluation::Run(absl::Span<const int32_t> window, int first, int end,
                             const std::vector<int32_t>& pages, std::vector<float>* logits) {
  std::vector<float> chunk;
  if (logits != nullptr) logits->clear();
  for (int start = first; start < end; start += o_.group_tokens) {
    const int n = std::min(o_.group_tokens, end - start);
    ForwardItem item{window.subspan(start, n), start, pages};
    RETURN_IF_ERROR(model_->Forward({&item, 1}, pool_.get(), logits != nullptr, &chunk));
    if (logits != nullptr) logits->insert(logits->end(), chunk.begin(), chunk.end());
  }
  return round_trip_.TakeError();
}

void Evaluation::Score(size_t key, const std::vector<float>& exact,
                       const std::vector<float>& track, absl::Span<const int32_t> targets) {
  scores_[key].push_back(
      ScorePositions(exact, track, model_->config().vocab_size, targets));
}

absl::Status Evaluation::RunPublishingTokens(const HarnessTrack& track,
                                             absl::Span<const int32_t> window,
                                             std::vector<float>* logits) {
  std::vector<float> row;
  logits->clear();
  for (int pos = o_.prefix_tokens; pos < int(window.size()); ++pos) {
    ForwardItem item{window.subspan(pos, 1), pos, track_table_};
    RETURN_IF_ERROR(model_->Forward({&item, 1}, pool_.get(), /*all_logits=*/true, &row));
    logits->insert(logits->end(), row.begin(), row.end());
    const auto slot = SlotsOf(track_table_, kPageTokens, pos, 1);
    RETURN_IF_ERROR(
        transfer_->Transfer(track, inner_, pool_.get(), slot, slot, 1, /*first_position=*/pos)
            .status());
  }
  return absl::OkStatus();
}

absl::Status Evaluation::Window(absl::Span<const int32_t> window) {
  const int p = o_.prefix_tokens, end = int(window.size());
  // Row r of the continuation's logits predicts token p + r + 1.
  const auto targets = window.subspan(p + 1);
  std::vector<float> exact, track;
  RETURN_IF_ERROR(Run(window, 0, p, exact_table_, nullptr));
  RETURN_IF_ERROR(Run(window, p, end, exact_table_, &exact));
  const auto exact_slots = SlotsOf(exact_table_, kPageTokens, 0, p);
  const auto track_slots = SlotsOf(track_table_, kPageTokens, 0, p);
  const bool has_product = std::count(o_.modes.begin(), o_.modes.end(), Mode::kProduct) > 0;
  for (size_t m = 0; m < o_.modes.size(); ++m) {
    const Mode mode = o_.modes[m];
    for (size_t t = 0; t < tracks_.size(); ++t) {
      if (mode == Mode::kAllKv) {
        RETURN_IF_ERROR(round_trip_.SetTrack(tracks_[t], pool_.get(), track_slots[0]));
        RETURN_IF_ERROR(Run(window, 0, p, track_table_, nullptr));
      } else {
        ASSIGN_OR_RETURN(size_t bytes, transfer_->Transfer(tracks_[t], inner_, pool_.get(),
                                                           exact_slots, track_slots,
                                                           o_.group_tokens));
        // The prefix's bytes once: product mode's (all-kv-token's are the same).
        if (mode == Mode::kProduct || !has_product) bytes_[t] += bytes;
      }
      const absl::Status run = mode == Mode::kAllKvToken
                                   ? RunPublishingTokens(tracks_[t], window, &track)
                                   : Run(window, p, end, track_table_, &track);
      RETURN_IF_ERROR(round_trip_.SetTrack(std::nullopt, nullptr));
      RETURN_IF_ERROR(run);
      Score(m * tracks_.size() + t, exact, track, targets);
    }
  }
  return absl::OkStatus();
}

absl::Status Evaluation::MeasureEnergy(absl::Span<const int32_t> window) {
  energy_.Measure(pool_.get());
  const absl::Status s = Run(window, 0, int(window.size()), exact_table_, nullptr);
  energy_.Measure(nullptr);
  return s;
}

absl::Status Evaluation::AddKv(absl::Span<const int32_t> window,
                               kvcache::xl::KvBasisFitter* fitter) {
  const int n = int(window.size());
  RETURN_IF_ERROR(Run(window, 0, n, exact_table_, nullptr));
  const auto slots = SlotsOf(exact_table_, kPageTokens, 0, n);
  ASSIGN_OR_RETURN(const std::vector<float> kv, transfer_->PreRopeTokens(inner_, *pool_, slots));
  const size_t token = kv.size() / n;
  fitter->Add(kv.data() + token, n - 1);
  return absl::OkStatus();
}

std::vector<TrackResult> Evaluation::Results(int windows) const {
  std::vector<TrackResult> out;
  const bool measured = std::count(o_.modes.begin(), o_.modes.end(), Mode::kProduct) > 0 ||
                        std::count(o_.modes.begin(), o_.modes.end(), Mode::kAllKvToken) > 0;
  for (size_t m = 0; m < o_.modes.size(); ++m) {
    for (size_t t = 0; t < tracks_.size(); ++t) {
      TrackResult r;
      r.track = o_.tracks[t];
      r.mode = o_.modes[m];
      // Sizes come from the prefix's real coder (product or all-kv-token
      // mode; all-kv codes layer by layer); without either, 0.
      if (measured) {
        r.bits_per_value = 8.0 * bytes_[t] / (double(windows) * o_.prefix_tokens * token_values_);
      }
      r.quality = Summarize(scores_[m * tracks_.size() + t], o_.resamples);
      out.push_back(r);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<TrackResult>> EvaluateTracks(
    const Checkpoint& checkpoint, Backend* backend,
    const std::vector<absl::Span<const int32_t>>& windows, const EvalOptions& options) {
  RETURN_IF_ERROR(CheckOptions(options, windows));
  Evaluation e(backend, options);
  RETURN_IF_ERROR(e.Load(checkpoint, options.prefix_tokens + options.continuation_tokens));
  for (size_t w = 0; w < windows.size(); ++w) {
    RETURN_IF_ERROR(e.Window(windows[w]));
    if (options.progress) options.progress(int(w + 1), int(windows.size()));
  }
  return e.Results(int(windows.size()));
}

absl::StatusOr<ChannelEnergy> MeasureChannelEnergy(
    const Checkpoint& checkpoint, Backend* backend,
    const std::vector<absl::Span<const int32_t>>& windows, const EvalOptions& options) {
  RETURN_IF_ERROR(CheckOptions(options, windows));
  Evaluation e(backend, options);
  RETURN_IF_ERROR(e.Load(checkpoint, options.prefix_tokens + options.continuation_tokens));
  for (absl::Span<const int32_t> w : windows) RETURN_IF_ERROR(e.MeasureEnergy(w));
  return e.Energy();
}

absl::StatusOr<kvcache::xl::KvBasis> FitKvBasis(
    const Checkpoint& checkpoint, Backend* backend,
    const std::vector<absl::Span<const int32_t>>& windows, const EvalOptions& options,
    int group_layers) {
  RETURN_IF_ERROR(CheckOptions(options, windows));
  EvalOptions o = options;
  o.tracks.clear();  // none are scored
  Evaluation e(backend, o);
  RETURN_IF_ERROR(e.Load(checkpoint, o.prefix_tokens + o.continuation_tokens));
  kvcache::xl::KvBasisFitter fitter(e.shape(), group_layers);
  for (size_t w = 0; w < windows.size(); ++w) {
    RETURN_IF_ERROR(e.AddKv(windows[w], &fitter));
    if (options.progress) options.progress(int(w + 1), int(windows.size()));
  }
  return fitter.Fit();
}

}  // namespace kvcast::kvquality
