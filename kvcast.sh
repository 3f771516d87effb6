#!/usr/bin/env bash
# kvcast developer entry point. Each command installs what it needs first.
#   ./kvcast.sh demo    build, fetch SmolLM2-135M-Instruct (GGUF), start a local
#                       cluster, ask two chat questions sharing a system prompt
#                       (the second shows cached tokens)
#   ./kvcast.sh demo tiny   the same on the tiny random model (gibberish by design)
#   ./kvcast.sh test    build and run every test; lists failed and skipped cases
#                       (with the reason), then ends with "N passed, N failed"
#   ./kvcast.sh report  regenerate docs/images (plots from docs/results, the
#                       architecture diagram from docs/architecture.dot)
set -euo pipefail
cd "$(dirname "$0")"

APT_PACKAGES=(
  bazel-bootstrap bazel-rules-java bazel-rules-proto bazel-skylib bazel-platforms
  pkg-config g++ python3 python3-venv
  libabsl-dev libgtest-dev libbenchmark-dev libopenblas-dev libsentencepiece-dev
  nlohmann-json3-dev libpcre2-dev libxxhash-dev libboost1.74-dev libssl-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libgnutls28-dev libspdlog-dev libfmt-dev
  openssl iproute2 nftables clang-14 libclang-rt-14-dev
)
# For the plots and the diagram (./kvcast.sh report and its test), not the
# build: Graphviz renders docs/architecture.dot.
REPORT_APT_PACKAGES=(graphviz)
# From the release's backports suite (tools/setup/apt_backports.sh adds it):
# ngtcp2 1.x, which bookworm's own archive does not have (it has 0.12).
BACKPORTS_PACKAGES=(libngtcp2-dev libngtcp2-crypto-gnutls-dev)
BACKPORTS_MIN_VERSION=1.11
PY_PACKAGES=(tokenizers==0.23.3 ml_dtypes==0.6.0 grpcio==1.85.1 protobuf==5.29.6 prometheus_client==0.26.0
  openai==3.57.0 jinja2==3.1.6 transformers==5.17.0 jsonschema==4.26.0 matplotlib==3.11.2)
VENV=.venv
MOQ_VENV=.venv-moq   # aiomoqt, the independent MoQT peer (Python >= 3.12)
DEPLOY_VENV=build/venv-deploy   # Helm engine, Kubernetes schemas, linters for deploy/ tests
TINY_MODEL=build/tiny-model
MODELS_DIR=build/models/smollm2   # SmolLM2-135M-Instruct GGUF (tools/models/fetch_smollm2.sh)

log() { printf '\033[1m[kvcast]\033[0m %s\n' "$*" >&2; }

setup_apt() {  # [extra packages]
  local missing=()
  for p in "${APT_PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing Debian packages: ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  local old=()
  for p in "${BACKPORTS_PACKAGES[@]}"; do
    dpkg --compare-versions "$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || echo 0)" \
      ge "$BACKPORTS_MIN_VERSION" || old+=("$p")
  done
  [ ${#old[@]} -eq 0 ] && return
  local codename
  codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
  log "installing from $codename-backports: ${old[*]}"
  tools/setup/apt_backports.sh
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    -t "$codename-backports" "${old[@]}" >/dev/null
}

setup_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV (independent oracles from PyPI: ${PY_PACKAGES[*]})"
    python3 -m venv "$VENV"
  fi
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${PY_PACKAGES[@]}"
}

bazel_cmd() { bazel "$@" --jobs="${KVCAST_JOBS:-2}"; }

SERVICE_TARGETS=(//tools/cli:kvcast //tools/tiny_model:make_tiny_model
  //services/scheduler:kvcast-scheduler //services/prefill:kvcast-prefill
  //services/decode:kvcast-decode //services/relay:kvcast-relay)

# Starts `kvcast cluster up` in the background; waits until it serves.
start_cluster() {  # $1: model dir, $2: log file, rest: extra cluster flags
  local model=$1 log=$2
  shift 2
  bazel-bin/tools/cli/kvcast cluster up --model "$model" --scheduler_port 50051 "$@" >"$log" 2>&1 &
  CLUSTER_PID=$!
  for _ in $(seq 1 120); do
    grep -q "^scheduler:" "$log" && return 0
    kill -0 "$CLUSTER_PID" 2>/dev/null || { cat "$log" >&2; return 1; }
    sleep 0.5
  done
  cat "$log" >&2
  return 1
}
stop_cluster() { [ -n "${CLUSTER_PID:-}" ] && kill "$CLUSTER_PID" 2>/dev/null && wait "$CLUSTER_PID" || true; }

# The demo's system prompt: longer than one 128-token KV chunk, so the
# second question reuses its KV (cached tokens) and reaches its first token sooner.
DEMO_SYSTEM="You are kvcast, the assistant of a disaggregated LLM inference service. kvcast splits each request in two: a prefill worker computes the attention keys and values (the KV cache) of the prompt, and a decode worker generates the answer one token at a time. The prefill worker publishes the KV cache in chunks of 128 tokens over MoQT, a publish and subscribe protocol that runs on QUIC. Relays between the workers keep a copy of every chunk, so a later request that starts with the same text, such as this system prompt, fetches its KV cache instead of computing it again. The scheduler sends each request to the prefill worker that already holds the longest part of its prompt and to the least loaded decode worker. Keep your answers short and accurate."
DEMO_QUESTIONS=("What does the prefill worker do?" "Why do relays keep a copy of every chunk?")

demo() {
  local which=${1:-smollm2} model
  setup_apt
  log "building (first build takes a few minutes)"
  bazel_cmd build "${SERVICE_TARGETS[@]}"
  case "$which" in
    smollm2) model=$(tools/models/fetch_smollm2.sh "$MODELS_DIR") ;;
    tiny)
      model=$TINY_MODEL
      if [ ! -f "$TINY_MODEL/config.json" ]; then
        log "writing the tiny random Llama checkpoint to $TINY_MODEL"
        bazel-bin/tools/tiny_model/make_tiny_model --out "$TINY_MODEL"
      fi ;;
    *) echo "usage: $0 demo [smollm2|tiny]" >&2; exit 2 ;;
  esac
  log "starting a local cluster on $model: scheduler, relay, 1 prefill, 1 decode worker (logs in build/cluster)"
  trap stop_cluster EXIT
  start_cluster "$model" build/cluster.log --work_dir build/cluster
  sed 's/^/  /' build/cluster.log >&2
  for question in "${DEMO_QUESTIONS[@]}"; do
    log "question: $question"
    if [ "$which" = tiny ]; then
      log "(random weights: gibberish by design)"
      bazel-bin/tools/cli/kvcast generate --scheduler 127.0.0.1:50051 \
        --prompt "$DEMO_SYSTEM $question" --max_tokens 24 --ignore_eos
    else
      # Through the OpenAI-compatible API: the scheduler renders the GGUF's chat template.
      python3 tools/demo/openai_chat.py --url http://127.0.0.1:8000/v1 --max_tokens 96 \
        --repetition_penalty 1.2 --system "$DEMO_SYSTEM" "$question"
    fi
    echo
  done
}

setup_moq_venv() {
  if tests/interop/setup_aiomoqt.sh "$MOQ_VENV" >&2; then
    echo "$PWD/$MOQ_VENV"
  else
    log "no Python >= 3.12 for aiomoqt: the MoQT interop test will report SKIPPED"
  fi
}

setup_deploy_venv() {
  if deploy/tests/setup_deploy_venv.sh "$DEPLOY_VENV" >&2; then
    echo "$PWD/$DEPLOY_VENV"
  else
    log "could not create $DEPLOY_VENV: the chart tests will report SKIPPED"
  fi
}

test_all() {
  setup_apt "${REPORT_APT_PACKAGES[@]}"
  setup_venv
  local moq_venv deploy_venv rc=0
  moq_venv=$(setup_moq_venv)
  deploy_venv=$(setup_deploy_venv)
  local smollm2
  smollm2=$(tools/models/fetch_smollm2.sh "$MODELS_DIR" "$PWD/$VENV/bin/python")
  mkdir -p build
  # The run's build events name the test.xml files it produced: stale ones
  # under bazel-testlogs (targets this run did not test) are not counted.
  bazel_cmd test //... --test_env=KVCAST_PYTHON="$PWD/$VENV/bin/python" \
    --test_env=KVCAST_SMOLLM2="$PWD/$smollm2" \
    --test_env=KVCAST_AIOMOQT_VENV="$moq_venv" \
    --test_env=KVCAST_DEPLOY_VENV="$deploy_venv" \
    --build_event_json_file="$PWD/build/test_events.json" || rc=$?
  python3 tests/count_results.py --bep build/test_events.json bazel-testlogs || { [ "$rc" -ne 0 ] || rc=1; }
  return $rc
}

report() {
  setup_apt "${REPORT_APT_PACKAGES[@]}"
  setup_venv
  MPLCONFIGDIR=$(mktemp -d) "$VENV/bin/python" tools/report/make_plots.py "$@"
}

case "${1:-}" in
  demo) demo "${2:-}" ;;
  test) test_all ;;
  report) shift; report "$@" ;;
  *) echo "usage: $0 demo|test|report" >&2; exit 2 ;;
esac
