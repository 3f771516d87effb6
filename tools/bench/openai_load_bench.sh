#!/usr/bin/env bash
# Load generators users point at OpenAI-compatible servers, against
# `kvcast cluster up` serving SmolLM2-135M-Instruct: aiperf and guidellm,
# chat completions, streaming, at concurrency 1, 4 and 16 (docs/benchmarks.md).
#
#   tools/bench/openai_load_bench.sh [aiperf|guidellm|both] [OUT_DIR]
#
# Creates (once) build/venv-aiperf (PyPI aiperf; needs Python 3.11-3.13) and
# build/venv-guidellm (PyPI guidellm 0.8's `run` CLI; it pulls torch: several GB, so this
# is a benchmark script, not a test). The tokenizer directory both tools
# need is exported from the GGUF with transformers (in the guidellm venv)
# into build/models/smollm2/tokenizer. Prints one line per run: TTFT,
# inter-token latency, output tokens/s and the cached tokens the tools read
# from usage.prompt_tokens_details. Workload: synthetic prompts of
# $INPUT_TOKENS tokens (default 256), $OUTPUT_TOKENS out (64, ignore_eos),
# $REQUESTS_PER_USER requests per concurrent user (4, at least 8 in all).
# JSON=FILE also writes the runs' numbers as one result file
# (tools/report/results.py; tools/bench/load_summary.py reads each report).
# The workers run with OMP_WAIT_POLICY=PASSIVE: on one small host the
# prefill and decode engines and the load generator share the cores, and
# spinning OpenMP threads steal them from each other (measured on 2 cores,
# aiperf concurrency 4: 43 instead of 34 output tokens/s).
set -euo pipefail
cd "$(dirname "$0")/../.."
WHICH=${1:-both}
OUT=${2:-build/openai-load-bench}
INPUT_TOKENS=${INPUT_TOKENS:-256}
OUTPUT_TOKENS=${OUTPUT_TOKENS:-64}
REQUESTS_PER_USER=${REQUESTS_PER_USER:-4}
CONCURRENCY=${CONCURRENCY:-1 4 16}
HTTP_PORT=${HTTP_PORT:-18080}
PY=${PYTHON:-python3}

log() { printf '\033[1m[load-bench]\033[0m %s\n' "$*" >&2; }

case "$WHICH" in aiperf|guidellm|both) ;; *) echo "usage: $0 [aiperf|guidellm|both] [OUT_DIR]" >&2; exit 2 ;; esac

venv() {  # $1 dir, rest: packages
  local dir=$1
  shift
  if [ ! -x "$dir/bin/python" ]; then
    log "creating $dir ($*)"
    "$PY" -m venv "$dir"
  fi
  "$dir/bin/python" -m pip install -q --disable-pip-version-check "$@"
}

MODEL=$(tools/models/fetch_smollm2.sh build/models/smollm2)
TOKENIZER=build/models/smollm2/tokenizer
venv build/venv-guidellm guidellm==0.8.1 gguf==0.19.0
if [ ! -f "$TOKENIZER/tokenizer.json" ]; then
  log "exporting the tokenizer of $MODEL to $TOKENIZER"
  build/venv-guidellm/bin/python - "$MODEL" "$TOKENIZER" <<'EOF'
import os, sys
from transformers import AutoTokenizer
model, out = sys.argv[1], sys.argv[2]
AutoTokenizer.from_pretrained(os.path.dirname(model), gguf_file=os.path.basename(model)).save_pretrained(out)
EOF
fi
[ "$WHICH" = guidellm ] || venv build/venv-aiperf aiperf==0.13.0

bazel build --jobs="${KVCAST_JOBS:-2}" //tools/cli:kvcast //services/scheduler:kvcast-scheduler \
  //services/prefill:kvcast-prefill //services/decode:kvcast-decode //services/relay:kvcast-relay
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
rm -rf "$OUT/runs" && mkdir "$OUT/runs"
ROOT=$PWD
OMP_WAIT_POLICY=PASSIVE bazel-bin/tools/cli/kvcast cluster up --model "$MODEL" --scheduler_port 0 --http_port "$HTTP_PORT" \
  --work_dir "$OUT/cluster" >"$OUT/cluster.log" 2>&1 &
CLUSTER=$!
trap 'kill $CLUSTER 2>/dev/null; wait $CLUSTER 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$HTTP_PORT/health" >/dev/null && break
  kill -0 $CLUSTER 2>/dev/null || { cat "$OUT/cluster.log" >&2; exit 1; }
  sleep 0.5
done
NAME=$(curl -sf "http://127.0.0.1:$HTTP_PORT/v1/models" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
log "serving $NAME at http://127.0.0.1:$HTTP_PORT/v1"

for c in $CONCURRENCY; do
  n=$((c * REQUESTS_PER_USER)); [ $n -lt 8 ] && n=8
  if [ "$WHICH" != guidellm ]; then
    dir="$OUT/aiperf-c$c"
    log "aiperf: concurrency $c, $n requests"
    build/venv-aiperf/bin/aiperf profile --model "$NAME" \
      --url "http://127.0.0.1:$HTTP_PORT" --endpoint-type chat --streaming \
      --tokenizer "$ROOT/$TOKENIZER" --concurrency "$c" --request-count "$n" \
      --warmup-request-count 1 --synthetic-input-tokens-mean "$INPUT_TOKENS" \
      --output-tokens-mean "$OUTPUT_TOKENS" --extra-inputs ignore_eos:true \
      --use-server-token-count --ui-type none --artifact-dir "$dir" >"$dir.log" 2>&1
    "$PY" tools/bench/load_summary.py aiperf "$dir/profile_export_aiperf.json" "$c" "$OUT/runs/aiperf-c$c.json"
  fi
  if [ "$WHICH" != aiperf ]; then
    log "guidellm: concurrency $c, $n requests"
    build/venv-guidellm/bin/guidellm run \
      --backend "kind=openai_http,target=http://127.0.0.1:$HTTP_PORT,model=$NAME" \
      --profile "kind=concurrent,streams=$c" --constraint "kind=max_requests,count=$n" \
      --data "kind=synthetic_text,prompt_tokens=$INPUT_TOKENS,output_tokens=$OUTPUT_TOKENS" \
      --tokenizer "kind=huggingface_auto,model=$ROOT/$TOKENIZER" \
      --output "kind=json,path=$OUT/guidellm-c$c.json" --disable-progress >"$OUT/guidellm-c$c.log" 2>&1
    "$PY" tools/bench/load_summary.py guidellm "$OUT/guidellm-c$c.json" "$c" "$OUT/runs/guidellm-c$c.json"
  fi
done
if [ -n "${JSON:-}" ]; then
  python3 tools/report/collect_results.py openai_load_bench "$JSON" "$OUT/runs" "$0 $*" \
    INPUT_TOKENS="$INPUT_TOKENS" OUTPUT_TOKENS="$OUTPUT_TOKENS" REQUESTS_PER_USER="$REQUESTS_PER_USER"
fi
