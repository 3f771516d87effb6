#!/usr/bin/env bash
# `kvcast --help` lists the commands (exit 0); `kvcast COMMAND --help` lists
# that command's flags with their defaults; an unknown command is exit 2
# with the usage.
set -euo pipefail
RUNFILES="${TEST_SRCDIR:-$0.runfiles}/${TEST_WORKSPACE:-kvcast}"
KVCAST="$RUNFILES/tools/cli/kvcast"
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$("$KVCAST" --help) || fail "kvcast --help exited $?"
for c in "kvcast generate:" "kvcast cluster up:" "kvcast bench:"; do
  grep -qF "$c" <<<"$out" || fail "kvcast --help does not list '$c': $out"
done
[ "$("$KVCAST" -h)" = "$out" ] || fail "-h differs from --help"

out=$("$KVCAST" cluster up --help)
for f in --prefill --decode --http_tls --relay_flags; do
  grep -q -- "^  $f " <<<"$out" || fail "cluster up --help lacks $f: $out"
done
grep -q -- "--prefill  prefill workers (default: 1)" <<<"$out" || fail "no default shown: $out"
grep -q -- "--requests" <<<"$out" && fail "cluster up --help lists bench's --requests"
out=$("$KVCAST" bench --help)
grep -q -- "^  --concurrency " <<<"$out" || fail "bench --help lacks --concurrency: $out"
out=$("$KVCAST" help generate)
grep -q -- "^  --prompt_ids " <<<"$out" || fail "help generate lacks --prompt_ids: $out"

set +e
err=$("$KVCAST" frob --help 2>&1)
rc=$?
set -e
[ $rc -eq 2 ] || fail "unknown command: exit $rc, want 2"
grep -q "unknown command 'frob'" <<<"$err" || fail "unclear error: $err"
echo "PASS"
