#!/usr/bin/env bash
# The checks that need a GPU, on the GPU machine (no Bazel there; binaries
# from tests/cuda/pack_gpu_checks.sh):
#  test    cuda_backend_test and sampling_test: every CUDA op against the CPU
#          backend;
#  oracle  the whole model against HF transformers (float32 on the GPU) on
#          random checkpoints of real shapes (Llama-3.2-1B, Qwen2-0.5B,
#          SmolLM2-135M), with HF's own bf16-GEMM-input run as the floor:
#          logits, teacher-forced top-1 and greedy tokens
#          (tools/golden/compare_logits.py);
#  bench   gpu_bench (decode roofline, prefill vs the GEMMs alone, KV landing),
#          its GPU time by op (decode, a 2K prompt), and HF generate on the
#          same checkpoint and GPU;
#  disagg  scheduler, relay, one prefill and one decode worker on the backend
#          sharing the GPU (KV as DISAGG_COMPRESSION, default fp16): two greedy requests with one 2K-token prefix equal
#          to the in-process run, a shared-prefix `kvcast bench` (TTFT, the KV
#          handoff's exposed share, landing GB/s, prefix hits), no page leaked;
#  sanitize  the attention kernels under compute-sanitizer racecheck and memcheck;
#  gemm    (not by default) decode GEMMs, cast + cuBLAS against the skinny
#          kernel (KVCAST_CUDA_GEMM=skinny), alternating, and both by op;
#  split   (not by default) decode attention's keys per KV split, alternating.
# Every step runs under its own time limit and the others run whatever it
# gives. Results: $OUT/summary.md (one line a step, then the key outputs) and
# $OUT/logs.tgz (every log and JSON file): two files, for the device tool.
#
# Usage: bash tests/cuda/run_gpu_checks.sh [PACK_DIR] [checks...]
#   (default: build/gpu, all of: test oracle bench disagg sanitize)
# Dry run on a machine without a GPU (scripts, flags, parsing), with a
# python3 that has torch and transformers:
#   BACKEND=cpu-f32 ORACLE_SHAPES="llama3:tiny" DISAGG_SHAPE=llama3:tiny DISAGG_PREFIX=256 \
#     bash tests/cuda/run_gpu_checks.sh build/gpu oracle disagg
set -uo pipefail
cd "$(dirname "$0")/../.."
PACK="$(realpath "${1:-build/gpu}")"
shift || true
CHECKS="${*:-test oracle bench disagg sanitize}"
OUT="${OUT:-/tmp/gpu_out}"
BACKEND="${BACKEND:-cuda}"
DEVICE="$([[ $BACKEND == cuda ]] && echo cuda || echo cpu)"  # torch's
ORACLE_SHAPES="${ORACLE_SHAPES:-llama3:1b qwen2:0.5b llama:135m}"
DISAGG_SHAPE="${DISAGG_SHAPE:-llama3:1b}"
DISAGG_PREFIX="${DISAGG_PREFIX:-2048}"
DISAGG_COMPRESSION="${DISAGG_COMPRESSION:-fp16}"  # the KV track; lossy ones skip the equality check
PY="${PYTHON:-python3}"
BUDGET_S="${BUDGET_S:-480}"  # the whole run, so that the results are packed in time
MODELS="${MODELS:-/tmp/kvcast_models}"
LOGS="$OUT/logs"
mkdir -p "$LOGS" "$MODELS"
# The packed libraries (an older libstdc++ among them) for our binaries only:
# python3 (torch) keeps the machine's own.
CUDA_LIBS=/usr/local/cuda/lib64
[[ -e $CUDA_LIBS/libcublasLt.so.13 ]] || CUDA_LIBS=$(dirname "$(find /usr/local /opt /usr/lib \
  -name 'libcublasLt.so.13*' 2>/dev/null | head -1)" 2>/dev/null)
export KVLIB="$PACK/lib:$CUDA_LIBS"
kv() { LD_LIBRARY_PATH="$KVLIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
export -f kv
export PYTHONUNBUFFERED=1 OUT BACKEND DEVICE DISAGG_SHAPE DISAGG_PREFIX DISAGG_COMPRESSION PY MODELS LOGS
export BIN="$PACK/bin"
SUMMARY="$OUT/summary.md"
status=0
T0=$(date +%s)
: >"$SUMMARY"

note() { echo "$*" | tee -a "$SUMMARY"; }
# step NAME SECONDS CMD...: runs CMD under a time limit (cut to what is left
# of $BUDGET_S for the whole run), output to $LOGS/NAME.log (and the console),
# one summary line.
step() {
  local name=$1 limit=$2 t rc left
  shift 2
  t=$(date +%s)
  left=$((BUDGET_S - (t - T0)))
  if ((left < 20)); then
    note "- SKIPPED $name: the run's budget of $BUDGET_S s is spent"
    status=1
    return 1
  fi
  ((limit > left)) && limit=$left
  echo "=== [$(($(date +%s) - T0))s] $name: $*"
  if declare -F "$1" >/dev/null; then  # a function of this script: in a child bash
    timeout -k 5 "$limit" bash -c '"$@"' _ "$@" >"$LOGS/$name.log" 2>&1
  else
    timeout -k 5 "$limit" "$@" >"$LOGS/$name.log" 2>&1
  fi
  rc=$?
  tail -n 15 "$LOGS/$name.log"
  if ((rc == 0)); then
    note "- PASS $name ($(($(date +%s) - t)) s)"
  else
    note "- FAIL $name: exit $rc$( ((rc == 124)) && echo " (over ${limit} s)") ($(($(date +%s) - t)) s)"
    status=1
  fi
  return $rc
}

make_model() {  # arch size dir
  [[ -f "$3/config.json" ]] || "$PY" tools/golden/make_random_checkpoint.py \
      --arch "$1" --size "$2" --dtype bfloat16 --seed 1 --device "$DEVICE" --out "$3"
}
export -f make_model

{
  echo "# GPU checks, $(date -u +%FT%TZ), backend $BACKEND"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || true
  "$PY" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' 2>&1
} | tee -a "$SUMMARY"

if [[ " $CHECKS " == *" test "* ]]; then
  for t in cuda_backend_test sampling_test; do
    step "$t" 150 kv "$BIN/$t" --gtest_output="xml:$LOGS/$t.xml"
    grep -E "^\[  (PASSED|FAILED) " "$LOGS/$t.log" | head -20 >>"$SUMMARY"
    # On a GPU a skipped test is a failed one (it skips only where no device runs it).
    if [[ $BACKEND == cuda ]] && grep -q "^\[  SKIPPED \] [0-9]* test" "$LOGS/$t.log"; then
      note "- FAIL $t: tests SKIPPED on the GPU machine"
      status=1
    fi
  done
  # A failure traced to the tiled attention kernel: the other checks measure
  # the per-row kernel instead, so that they still say something.
  if grep -q "KVCAST_CUDA_ATTENTION=tiled" "$LOGS/cuda_backend_test.log" 2>/dev/null; then
    export KVCAST_CUDA_ATTENTION=warp
    note "- the tiled attention kernel failed its test: the checks below use KVCAST_CUDA_ATTENTION=warp"
  fi
fi

oracle() {  # arch size
  local arch=$1 size=$2 dir="$MODELS/$1-$2" tokens o="$LOGS/$1-$2"
  make_model "$arch" "$size" "$dir" || return 1
  tokens=$("$PY" -c "import json; v = min(30000, json.load(open('$dir/config.json'))['vocab_size']); print(','.join(str((i * 7919 + 13) % v) for i in range(96)))")
  # HF float32: 64 greedy tokens, then the logits over prompt + those tokens;
  # HF again with every Linear input rounded to bf16 (what feeding bf16 GEMMs
  # costs: the floor), over the same tokens, and its own greedy tokens.
  "$PY" tools/golden/hf_logits.py --model "$dir" --device "$DEVICE" --tokens "$tokens" \
      --greedy 64 --teacher_forced --out "$o.hf32.json" --logits_file "$o.hf32.f32" || return 1
  "$PY" tools/golden/hf_logits.py --model "$dir" --device "$DEVICE" --tokens "$tokens" \
      --greedy 64 --teacher_forced --continuation_from "$o.hf32.json" \
      --linear_input_dtype bfloat16 --out "$o.hfbf16.json" --logits_file "$o.hfbf16.f32" || return 1
  # kvcast: the same teacher-forced tokens in one prefill, and its own 64
  # greedy tokens from the prompt (the decode path).
  kv "$BIN/kvcast_logits" --model "$dir" --backend "$BACKEND" \
      --tokens "$("$PY" -c "import json; print(','.join(map(str, json.load(open('$o.hf32.json'))['tokens'])))")" \
      --out "$o.kv_tf.json" --logits_file "$o.kv_tf.f32" || return 1
  kv "$BIN/kvcast_logits" --model "$dir" --backend "$BACKEND" --tokens "$tokens" --greedy 64 \
      --out "$o.kv_greedy.json" --logits_file "$o.kv_greedy.f32" || return 1
  "$PY" tools/golden/compare_logits.py --hf "$o.hf32.json" --hf_rounded "$o.hfbf16.json" \
      --kvcast "$o.kv_tf.json" --kvcast_greedy "$o.kv_greedy.json" --tol 0.05
}
export -f oracle
if [[ " $CHECKS " == *" oracle "* ]]; then
  for spec in $ORACLE_SHAPES; do
    step "oracle_${spec/:/-}" 240 oracle "${spec%%:*}" "${spec##*:}"
    grep -E "^(logits|teacher|greedy|PASS|FAIL)" "$LOGS/oracle_${spec/:/-}.log" >>"$SUMMARY"
    rm -f "$LOGS"/*.f32  # up to 80 MB each
  done
fi

if [[ " $CHECKS " == *" bench "* ]]; then
  dir="$MODELS/llama3-1b"
  make_model llama3 1b "$dir"
  step gpu_bench 180 kv "$BIN/gpu_bench" --model "$dir" --json "$OUT/gpu_bench.json" &&
    cat "$LOGS/gpu_bench.log" >>"$SUMMARY"
  # Where a decode step and a 2K prompt spend their GPU time, op by op.
  step gpu_op_times 120 kv "$BIN/gpu_bench" --model "$dir" --op_times --batches 1,32 \
      --prefill 2048 --landing_tokens 16 --steps 64 &&
    sed -n '/GPU time by op/,$p' "$LOGS/gpu_op_times.log" >>"$SUMMARY"
  step hf_bench 180 "$PY" tools/bench/hf_generate_bench.py --model "$dir" &&
    cat "$LOGS/hf_bench.log" >>"$SUMMARY"
fi

# The decode GEMM A/B: cast + cuBLAS against the skinny kernel
# (KVCAST_CUDA_GEMM=skinny), alternating, 3 rounds; then both by op.
gemm_ab() {
  local dir="$MODELS/llama3-1b" rep g
  make_model llama3 1b "$dir" || return 1
  for rep in 1 2 3; do
    for g in cublas skinny; do
      echo "KVCAST_CUDA_GEMM=$g, round $rep"
      KVCAST_CUDA_GEMM=$g kv "$BIN/gpu_bench" --model "$dir" --batches 1,8,32 --prefill 2048 \
        --landing_tokens 16 | grep "^| Llama" || return 1
    done
  done
  for g in cublas skinny; do
    echo "KVCAST_CUDA_GEMM=$g by op"
    KVCAST_CUDA_GEMM=$g kv "$BIN/gpu_bench" --model "$dir" --op_times --batches 1 --prefill 2048 \
      --landing_tokens 16 --steps 64 2>&1 | sed -n '/GPU time by op/,/^$/p' || return 1
  done
}
export -f gemm_ab
if [[ " $CHECKS " == *" gemm "* ]]; then
  step gemm 150 gemm_ab && cat "$LOGS/gemm.log" >>"$SUMMARY"
fi

# Decode attention's keys per KV split (KVCAST_CUDA_SPLIT_TOKENS), 2 rounds
# alternating, at a 512- and a 4096-token context; the attention test with
# the smallest (the most splits).
split_ab() {
  local dir="$MODELS/llama3-1b" rep t ctx
  make_model llama3 1b "$dir" || return 1
  KVCAST_CUDA_SPLIT_TOKENS=32 kv "$BIN/cuda_backend_test" --gtest_filter='*Attention*' |
    grep -E "^\[  (PASSED|FAILED)" || return 1
  for ctx in 512 4096; do
    for rep in 1 2; do
      for t in 256 64 32; do
        echo "KVCAST_CUDA_SPLIT_TOKENS=$t, context $ctx, round $rep"
        KVCAST_CUDA_SPLIT_TOKENS=$t kv "$BIN/gpu_bench" --model "$dir" --batches 1,8,32 \
          --context $ctx --prefill 128 --landing_tokens 16 | grep "^| Llama.* | [0-9]* | [0-9]* | [0-9.]* | [0-9.]* | [0-9.]* GB" ||
          return 1
      done
    done
  done
}
export -f split_ab
if [[ " $CHECKS " == *" split "* ]]; then
  step split 150 split_ab && cat "$LOGS/split.log" >>"$SUMMARY"
fi

# The disaggregated path: a local cluster on $BACKEND; two greedy requests
# sharing a prefix, then a shared-prefix bench; the in-process engine (same
# KV precision, fp16) on the same prompts afterwards.
disagg() {
  local arch=${DISAGG_SHAPE%%:*} size=${DISAGG_SHAPE##*:} dir work=$LOGS/cluster port
  dir="$MODELS/$arch-$size"
  make_model "$arch" "$size" "$dir" || return 1
  port=$((52000 + RANDOM % 1000))
  local prefix a b vocab
  vocab=$("$PY" -c "import json; print(min(32000, json.load(open('$dir/config.json'))['vocab_size']))")
  prefix=$("$PY" -c "print(','.join(str(10 + (i * 104729 + 7) % ($vocab - 10)) for i in range($DISAGG_PREFIX)))")
  a="$prefix,$("$PY" -c "print(','.join(str(10 + (100 + i) % ($vocab - 10)) for i in range(32)))")"
  b="$prefix,$("$PY" -c "print(','.join(str(10 + (5000 + 3 * i) % ($vocab - 10)) for i in range(32)))")"
  # The scheduler gets no --model: the random checkpoint has no tokenizer,
  # and these requests are token ids.
  LD_LIBRARY_PATH="$KVLIB" "$BIN/kvcast" cluster up --model "$dir" --backend "$BACKEND" --bin_dir "$BIN" \
    --work_dir "$work" --scheduler_port "$port" --http_port -1 --kv_cache_mb 4096 \
    --restart=false --scheduler_flags="--model= --kv_compression=$DISAGG_COMPRESSION" \
    --prefill_flags=--retain_s=2 >"$LOGS/cluster.out" 2>&1 &
  local pid=$! ok=0
  trap 'kill -INT $pid 2>/dev/null' EXIT TERM
  for _ in $(seq 1 240); do
    grep -q "^scheduler:" "$LOGS/cluster.out" && { ok=1; break; }
    kill -0 $pid 2>/dev/null || break
    sleep 0.5
  done
  cat "$LOGS/cluster.out"
  ((ok)) || { kill $pid 2>/dev/null; return 1; }
  local gen=(kv "$BIN/kvcast" generate --max_tokens 32 --ignore_eos --ids)
  "${gen[@]}" --scheduler "127.0.0.1:$port" --prompt_ids "$a" >"$LOGS/cluster_a.ids" 2>"$LOGS/cluster_a.err"
  local rc_a=$?
  "${gen[@]}" --scheduler "127.0.0.1:$port" --prompt_ids "$b" >"$LOGS/cluster_b.ids" 2>"$LOGS/cluster_b.err"
  local rc_b=$?
  echo "request a (fresh prefix):"; cat "$LOGS/cluster_a.err"
  echo "request b (same prefix):"; cat "$LOGS/cluster_b.err"
  kv "$BIN/kvcast" bench --scheduler "127.0.0.1:$port" --requests 32 --rate 0 --concurrency 4 \
    --prefixes 4 --prefix_tokens "$DISAGG_PREFIX" --suffix_tokens 32 --max_tokens 32 \
    --vocab "$vocab" --json "$LOGS/disagg_bench.json"
  local rc_bench=$?
  sleep 3
  # No page leaked: with nothing running and no published prompt retained
  # (--retain_s=2), a worker's pages in use are the prefix cache's chunks
  # (128 tokens: 8 pages of 16).
  local leaks=0 m
  for m in $(grep -o "metrics 127.0.0.1:[0-9]*" "$LOGS/cluster.out" | cut -d' ' -f2); do
    "$PY" - "$m" <<'PY' || leaks=1
import sys, urllib.request
text = urllib.request.urlopen(f"http://{sys.argv[1]}/metrics", timeout=5).read().decode()
v = {l.split()[0]: float(l.split()[1]) for l in text.splitlines()
     if l.startswith(("kvcast_kv_pages_used ", "kvcast_prefix_cache_chunks ", "kvcast_kv_pages_total "))}
if "kvcast_kv_pages_used" not in v:
    sys.exit(0)  # not a worker
used, chunks = v["kvcast_kv_pages_used"], v["kvcast_prefix_cache_chunks"]
print(f"{sys.argv[1]}: pages used {used:.0f} of {v['kvcast_kv_pages_total']:.0f}, "
      f"prefix cache {chunks:.0f} chunks ({8 * chunks:.0f} pages)")
sys.exit(0 if used == 8 * chunks else 1)
PY
  done
  kill -INT $pid; wait $pid
  tail -n 3 "$work"/logs/*.log
  "${gen[@]}" --model "$dir" --backend "$BACKEND" --kv_cache_precision fp16 --kv_cache_mb 4096 \
    --prompt_ids "$a" >"$LOGS/local_a.ids" 2>"$LOGS/local_a.err"
  "${gen[@]}" --model "$dir" --backend "$BACKEND" --kv_cache_precision fp16 --kv_cache_mb 4096 \
    --prompt_ids "$b" >"$LOGS/local_b.ids" 2>"$LOGS/local_b.err"
  cat "$LOGS/local_a.err"
  local same=1 x
  for x in a b; do
    echo "cluster $x: $(cat "$LOGS/cluster_$x.ids")"
    echo "local   $x: $(cat "$LOGS/local_$x.ids")"
    if [[ $DISAGG_COMPRESSION != fp16 ]]; then
      echo "request $x: KV sent as $DISAGG_COMPRESSION, so not compared with the fp16 in-process run"
    elif [[ -s $LOGS/local_$x.ids && "$(cat "$LOGS/cluster_$x.ids")" == "$(cat "$LOGS/local_$x.ids")" ]]; then
      echo "request $x: 32 greedy tokens equal to the in-process run"
    else
      echo "request $x: DIFFERS from the in-process run"; same=0
    fi
  done
  "$PY" - "$LOGS/disagg_bench.json" <<'PY'
import json, sys
x = json.load(open(sys.argv[1]))
gbs = x["mean_transfer_bytes"] / (x["mean_transfer_ms"] * 1e6) if x["mean_transfer_ms"] else 0
print(f"bench: TTFT p50 {x['ttft_ms']['p50']:.1f} ms p90 {x['ttft_ms']['p90']:.1f} ms; "
      f"e2e p50 {x['e2e_ms']['p50']:.1f} ms; cached share {100 * x['cached_share']:.0f}%; "
      f"KV {x['mean_transfer_bytes'] / 1e6:.1f} MB/request landed in {x['mean_transfer_ms']:.1f} ms "
      f"({gbs:.2f} GB/s); exposed handoff {100 * x['handoff_share_of_ttft']:.1f}% of TTFT")
PY
  ((rc_a == 0 && rc_b == 0 && rc_bench == 0 && leaks == 0 && same == 1))
}
export -f disagg
if [[ " $CHECKS " == *" disagg "* ]]; then
  step disagg 300 disagg
  grep -E "^(request|TTFT|KV transfer|bench:|127\.0\.0\.1|prompt)" "$LOGS/disagg.log" >>"$SUMMARY"
fi

# The attention kernels under compute-sanitizer: shared-memory races in the
# tiled kernel's barrier discipline, and out-of-bounds accesses.
if [[ " $CHECKS " == *" sanitize "* ]]; then
  CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for tool in racecheck memcheck; do
    step "sanitize_$tool" 90 kv "$CS" --tool "$tool" --error-exitcode 3 \
      "$BIN/cuda_backend_test" --gtest_filter='Shapes/CudaAttentionTest.PagedAttentionMatchesCpu/0'
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard" "$LOGS/sanitize_$tool.log" | head -5 >>"$SUMMARY"
  done
fi

note "total $(($(date +%s) - T0)) s, status $status"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$LOGS"
exit $status
