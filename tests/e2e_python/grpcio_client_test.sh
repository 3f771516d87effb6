#!/usr/bin/env bash
# Bazel test: grpcio_client_test.py, an independent gRPC client (PyPI's
# grpcio, stubs generated from proto/kvcast/v1 by
# tests/grpc/gen_python_stubs.sh) against `kvcast cluster up`. The Python
# comes from KVCAST_PYTHON (`./kvcast.sh test` creates .venv with grpcio and
# protobuf and passes it); without it, or without grpcio/protobuf there, the
# test reports SKIPPED. By hand:
#   bazel test //tests/e2e_python:grpcio_client_test \
#       --test_env=KVCAST_PYTHON=$PWD/.venv/bin/python
# An argument names another script taking the same flags (chaos_test.py).
set -uo pipefail
SCRIPT=${1:-tests/e2e_python/grpcio_client_test.py}
SUITE=$(basename "$SCRIPT" _test.py)
# The working directory is the runfiles root of workspace "kvcast".
if [[ -n "${TEST_SRCDIR:-}" && -d "$TEST_SRCDIR/kvcast" ]]; then
  cd "$TEST_SRCDIR/kvcast"
fi
WORK=${TEST_TMPDIR:-$(mktemp -d)}
XML=${XML_OUTPUT_FILE:-$WORK/test.xml}

source tests/testing/junit_skip.sh
skip() { junit_skip "$SUITE" "SKIPPED: $1 (./kvcast.sh test provides a venv with grpcio and protobuf)"; }

PY=${KVCAST_PYTHON:-}
[[ -n "$PY" ]] || skip "KVCAST_PYTHON is not set"
[[ -x "$PY" ]] || skip "KVCAST_PYTHON=$PY is not an executable file"
"$PY" -c 'import grpc, google.protobuf' 2>/dev/null ||
  skip "KVCAST_PYTHON=$PY cannot import grpc (grpcio) and google.protobuf"

# The stub generator: from runfiles when it is a data dependency, else from
# the source tree next to this script (tests/grpc is not a Bazel package yet).
STUBS=tests/grpc/gen_python_stubs.sh
if [[ ! -f "$STUBS" ]]; then
  src=$(readlink -f "${BASH_SOURCE[0]}")
  STUBS=$(dirname "$src")/../grpc/gen_python_stubs.sh
fi

exec "$PY" "$SCRIPT" \
  --xml "$XML" \
  --work "$WORK" \
  --gen_stubs "$STUBS" \
  --proto_root "$PWD/proto" \
  --kvcast "$PWD/tools/cli/kvcast" \
  --make_tiny_model "$PWD/tools/tiny_model/make_tiny_model" \
  --scheduler "$PWD/services/scheduler/kvcast-scheduler" \
  --prefill "$PWD/services/prefill/kvcast-prefill" \
  --decode "$PWD/services/decode/kvcast-decode" \
  --relay "$PWD/services/relay/kvcast-relay"
