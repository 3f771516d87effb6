#!/usr/bin/env bash
# `kvcast cluster up --backend`: the flag reaches the workers. A backend no
# worker has makes the first worker exit naming it, and cluster up fails at
# once (exit 1) instead of serving on the default backend.
set -euo pipefail
RUNFILES="${TEST_SRCDIR:-$0.runfiles}/${TEST_WORKSPACE:-kvcast}"
KVCAST="$RUNFILES/tools/cli/kvcast"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*" >&2; exit 1; }

"$RUNFILES/tools/tiny_model/make_tiny_model" --out "$TMP/model" >/dev/null
rc=0
timeout 60 "$KVCAST" cluster up --model "$TMP/model" --backend tpu --restart=false \
  --work_dir "$TMP/cluster" --scheduler_port 0 --http_port -1 >"$TMP/out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || fail "cluster up --backend tpu: exit $rc (want 1): $(cat "$TMP/out")"
grep -q -- "--backend=tpu: expected cpu" "$TMP/out" ||
  fail "the failure does not name the workers' --backend: $(cat "$TMP/out")"
echo PASS
