// Router: cost-based choice of the prefill and decode worker for a request.
//
// Prefill cost of worker w, in prompt-token equivalents (time to the first
// token, in units of one token's compute):
//     work(w) + miss_weight * (work(w) - least work) + backlog(w)
//       + load_weight * active(w)
//     work(w) = uncached(w) + fetch_weight * fetched(w)
//               + host_weight * in_host(w) + disk_weight * on_disk(w)
// where uncached(w) is the prompt tokens w must compute given the chunks it
// holds (PrefixIndex) and those a relay can serve (PublishedPrefixes),
// fetched(w) the tokens it would fetch instead of computing, in_host(w) and
// on_disk(w) the reused tokens it holds below its page pool (promoted back
// before use), backlog(w) the
// work queued on w ahead of this prompt, and active(w) its prompts in
// flight. The backlog term makes a hot prefix spill onto other workers once
// queueing on its holder costs more than recomputing it elsewhere (which
// then holds it too). The miss term charges a spill for the work it adds
// to the cluster (the requests queued behind it wait for that too): without
// it, a loaded cluster spills everything, every worker recomputes every
// prefix, and the load grows faster than the spilling relieves it
// (tools/sim shows the collapse).
//
// Decode: prefer workers with free pages for prompt + max_tokens, then the
// least loaded (running + dispatched sequences), then the one holding more
// of the prompt, then more free pages; chunks it already holds need not be
// transferred.
//
// PD fusion: when the chosen decode worker would compute at most
// `fuse_tokens` of the prompt itself (a short prompt, or a prefix it holds,
// such as the previous turn of a conversation), the request runs there
// alone: no prefill call, no KV handoff.
//
// Pure functions over a snapshot; thread-safe.
#ifndef KVCAST_SERVICES_SCHEDULER_ROUTER_H_
#define KVCAST_SERVICES_SCHEDULER_ROUTER_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "services/scheduler/prefix_index.h"

namespace kvcast::scheduler {

struct Candidate {
  WorkerSlot slot = 0;
  int free_pages = 0;
  int page_tokens = 16;
  int64_t backlog_tokens = 0;  // work (token equivalents) waiting on the worker
  int active = 0;              // requests running or dispatched
};

struct RouterOptions {
  double fetch_weight = 0.1;    // cost of fetching a token relative to computing it
  // Promoting a token's KV from the host / disk tier relative to computing
  // it: kv_tier_bench on the 2-core CPU (a 2K prefix: +20 / +22 ms over the
  // pool, against 8.4 s of compute). On a GPU compute is far faster and
  // these weigh more (--router_host_weight, --router_disk_weight).
  double host_weight = 0.0024;
  double disk_weight = 0.0026;
  double load_weight = 64;      // tokens of cost per request in flight
  double miss_weight = 4;       // extra charge per token of work above the least
  // PD fusion threshold in prompt tokens; 0: always disaggregate. 32 is
  // this CPU's crossover (docs/benchmarks.md, "PD fusion"); on a GPU a short
  // prefill costs about one decode step and a few hundred fit.
  int fuse_tokens = 32;
  int chunk_tokens = 128;
};

struct PrefillPlan {
  WorkerSlot slot = 0;
  int cached_chunks = 0;   // held by the worker itself
  int fetched_chunks = 0;  // to fetch from the published track (beyond cached)
  double work = 0;         // this prompt's own work(w), token equivalents
  double cost = 0;
};

// `held` = PrefixIndex::Match of the prompt's chain; `published_chunks` =
// PublishedPrefixes::Longest(...).groups; `below` = PrefixIndex::Below of
// each holder's reusable run (absent: all in the pool). nullopt when no
// candidate. Reuse never covers the whole prompt: the last token is always
// computed.
std::optional<PrefillPlan> ChoosePrefill(
    const std::vector<Candidate>& prefill, int prompt_tokens,
    const absl::flat_hash_map<WorkerSlot, int>& held, int published_chunks,
    const RouterOptions& options,
    const absl::flat_hash_map<WorkerSlot, PrefixIndex::BelowPool>& below = {});

struct DecodePlan {
  WorkerSlot slot = 0;
  int cached_chunks = 0;
  bool fused = false;  // the decode worker computes the prompt (PD fusion)
};

// nullopt only when there is no candidate.
std::optional<DecodePlan> ChooseDecode(const std::vector<Candidate>& decode, int prompt_tokens,
                                       int max_tokens,
                                       const absl::flat_hash_map<WorkerSlot, int>& held,
                                       const RouterOptions& options);

}  // namespace kvcast::scheduler

#endif  // KVCAST_SERVICES_SCHEDULER_ROUTER_H_
