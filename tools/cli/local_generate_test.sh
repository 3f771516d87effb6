#!/usr/bin/env bash
# `kvcast generate --model`: the in-process engine on the backend asked for.
#  - cpu: greedy and seeded sampling print --max_tokens ids, the same ids run
#    to run, and sampling differs from greedy; fp16 KV values are the
#    default, fp32 works, an unknown precision is bad usage;
#  - an unknown backend fails (exit 1) naming the backends built in;
#  - cuda: fails with the reason (no GPU here, or, with one, the tiny
#    model's head_dim 16, which the CUDA attention kernels do not take).
set -euo pipefail
RUNFILES="${TEST_SRCDIR:-$0.runfiles}/${TEST_WORKSPACE:-kvcast}"
KVCAST="$RUNFILES/tools/cli/kvcast"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*" >&2; exit 1; }

"$RUNFILES/tools/tiny_model/make_tiny_model" --out "$TMP/model" >/dev/null
gen() { "$KVCAST" generate --model "$TMP/model" --prompt_ids 5,6,7,8 --max_tokens 12 --ids \
          --ignore_eos "$@" 2>"$TMP/stderr"; }

greedy=$(gen --backend cpu)
[ "$(wc -w <<<"$greedy")" -eq 12 ] || fail "greedy printed '$greedy', not 12 ids"
grep -q "on cpu" "$TMP/stderr" || fail "stderr does not name the backend: $(cat "$TMP/stderr")"
[ "$(gen --backend cpu)" = "$greedy" ] || fail "greedy differs run to run"
sampled=$(gen --temperature 1.5 --seed 9)
[ "$(gen --temperature 1.5 --seed 9)" = "$sampled" ] || fail "seeded sampling differs run to run"
[ "$sampled" != "$greedy" ] || fail "sampling at temperature 1.5 gave the greedy ids"

# fp16 KV values are the default (the workers'), on a prompt long enough that
# fp16 and float32 KV give other greedy tokens (they do at the 7th); a
# precision the engine lacks is bad usage (exit 2) naming the flag.
LONG=$(seq 0 302 | awk '{printf "%s%d", (NR > 1 ? "," : ""), 10 + ($1 * 37) % 490}')
long() { "$KVCAST" generate --model "$TMP/model" --prompt_ids "$LONG" --max_tokens 24 --ids \
           --ignore_eos "$@" 2>"$TMP/stderr"; }
default=$(long)
[ "$(long --kv_cache_precision fp16)" = "$default" ] || fail "--kv_cache_precision fp16 is not the default"
fp32=$(long --kv_cache_precision fp32)
[ "$(wc -w <<<"$fp32")" -eq 24 ] || fail "--kv_cache_precision fp32: '$fp32'"
[ "$fp32" != "$default" ] || fail "fp32 and fp16 KV gave the same tokens: the check above says nothing"
rc=0
gen --kv_cache_precision int8 >/dev/null || rc=$?
[ "$rc" -eq 2 ] || fail "--kv_cache_precision int8: exit $rc, want 2"
grep -q "kv_cache_precision: 'int8'" "$TMP/stderr" || fail "unclear error: $(cat "$TMP/stderr")"

if gen --backend tpu >/dev/null; then fail "--backend tpu succeeded"; fi
grep -q "no backend 'tpu'.*built in: cpu" "$TMP/stderr" || fail "unclear error: $(cat "$TMP/stderr")"

# The tiny model's heads (head_dim 16) are refused by the CUDA kernels, and a
# machine without a GPU has no device: either way a clear message, exit 1.
if gen --backend cuda >/dev/null; then fail "--backend cuda ran a head_dim-16 model"; fi
grep -Eq "cuda backend: (no CUDA device|.*head_dim)|no backend 'cuda'" "$TMP/stderr" ||
  fail "unclear cuda error: $(cat "$TMP/stderr")"
echo PASS
