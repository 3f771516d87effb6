#!/usr/bin/env bash
# kvcast developer entry point. Each command installs what it needs first.
#   ./kvcast.sh demo    build, make the tiny model, start a local cluster, send two
#                       requests sharing a prefix (the second shows cached tokens)
#   ./kvcast.sh test    build and run every test; ends with "N passed, N failed"
set -euo pipefail
cd "$(dirname "$0")"

APT_PACKAGES=(
  bazel-bootstrap bazel-rules-java bazel-rules-proto bazel-skylib bazel-platforms
  pkg-config g++ python3 python3-venv
  libabsl-dev libgtest-dev libbenchmark-dev libopenblas-dev libsentencepiece-dev
  nlohmann-json3-dev libpcre2-dev libxxhash-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libngtcp2-dev libngtcp2-crypto-gnutls-dev libgnutls28-dev
  openssl iproute2 clang-14 libclang-rt-14-dev
)
PY_PACKAGES=(tokenizers==0.23.3 ml_dtypes==0.6.0 grpcio==1.85.1 protobuf==5.29.6 prometheus_client==0.26.0)
VENV=.venv
MOQ_VENV=.venv-moq   # aiomoqt, the independent MoQT peer (Python >= 3.12)
DEPLOY_VENV=build/venv-deploy   # Helm engine, Kubernetes schemas, linters for deploy/ tests
TINY_MODEL=build/tiny-model

log() { printf '\033[1m[kvcast]\033[0m %s\n' "$*" >&2; }

setup_apt() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return
  log "installing Debian packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
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
  //services/decode:kvcast-decode //transport/moqt:kvcast-relay)

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

demo() {
  setup_apt
  log "building (first build takes a few minutes)"
  bazel_cmd build "${SERVICE_TARGETS[@]}"
  if [ ! -f "$TINY_MODEL/config.json" ]; then
    log "writing the tiny random Llama checkpoint to $TINY_MODEL"
    bazel-bin/tools/tiny_model/make_tiny_model --out "$TINY_MODEL"
  fi
  log "starting a local cluster: scheduler, relay, 1 prefill, 1 decode worker (logs in build/cluster)"
  trap stop_cluster EXIT
  start_cluster "$TINY_MODEL" build/cluster.log --work_dir build/cluster
  sed 's/^/  /' build/cluster.log >&2
  # Two requests sharing a system prompt longer than one 128-token chunk:
  # the second reuses its KV (cached tokens) and reaches its first token sooner.
  local system="You are kvcast, a disaggregated inference service. Prefill workers compute the KV cache of a prompt and publish it chunk by chunk over MoQT; decode workers land it in their page pool and generate tokens with continuous batching. Relays cache the chunks so that later requests with the same prefix fetch instead of recomputing. Answer briefly."
  for question in "What does the prefill worker do?" "Where does the decode worker keep KV?"; do
    log "kvcast generate --scheduler 127.0.0.1:50051 --prompt \"<system prompt> $question\" (random weights: gibberish by design)"
    bazel-bin/tools/cli/kvcast generate --scheduler 127.0.0.1:50051 \
      --prompt "$system $question" --max_tokens 24 --ignore_eos
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
  setup_apt
  setup_venv
  local moq_venv deploy_venv rc=0
  moq_venv=$(setup_moq_venv)
  deploy_venv=$(setup_deploy_venv)
  bazel_cmd test //... --test_env=KVCAST_PYTHON="$PWD/$VENV/bin/python" \
    --test_env=KVCAST_AIOMOQT_VENV="$moq_venv" \
    --test_env=KVCAST_DEPLOY_VENV="$deploy_venv" || rc=$?
  python3 tests/count_results.py bazel-testlogs
  return $rc
}

case "${1:-}" in
  demo) demo ;;
  test) test_all ;;
  *) echo "usage: $0 demo|test" >&2; exit 2 ;;
esac
