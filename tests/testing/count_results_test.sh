#!/usr/bin/env bash
# count_results.py: with the run's build events it counts only the test.xml
# files that run reported (a stale failing one under bazel-testlogs does not
# count), lists each skipped case with its reason before the closing line,
# and exits non-zero on a failure or when no case ran.
set -euo pipefail
RUNFILES="${TEST_SRCDIR:-$0.runfiles}/${TEST_WORKSPACE:-kvcast}"
COUNT="$RUNFILES/tests/count_results.py"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*" >&2; exit 1; }

logs="$TMP/testlogs"
mkdir -p "$logs/a/fresh" "$logs/a/stale"
cat >"$logs/a/fresh/test.xml" <<'XML'
<testsuites><testsuite name="s">
<testcase classname="s" name="one"/><testcase classname="s" name="two"/>
<testcase classname="s" name="three"><skipped message="no namespaces here"/></testcase>
</testsuite></testsuites>
XML
cat >"$logs/a/stale/test.xml" <<'XML'
<testsuites><testsuite name="old"><testcase classname="old" name="gone"><failure message="x"/></testcase></testsuite></testsuites>
XML
printf '{"id":{"testResult":{"label":"//a:fresh"}},"testResult":{"testActionOutput":[{"name":"test.log","uri":"file://%s"},{"name":"test.xml","uri":"file://%s"}]}}\n{"id":{"progress":{}},"progress":{}}\n' \
  "$logs/a/fresh/test.log" "$logs/a/fresh/test.xml" >"$TMP/bep.json"

out=$(python3 "$COUNT" --bep "$TMP/bep.json" "$logs") || fail "exit $? with only fresh results: $out"
[ "$(tail -1 <<<"$out")" = "2 passed, 0 failed, 1 skipped" ] || fail "closing line: $out"
grep -q "^SKIPPED a/fresh: s.three: no namespaces here$" <<<"$out" || fail "skip reason: $out"

if out=$(python3 "$COUNT" "$logs"); then fail "the stale failure passed without --bep: $out"; fi
[ "$(tail -1 <<<"$out")" = "2 passed, 1 failed, 1 skipped" ] || fail "without --bep: $out"

printf '{"id":{"testResult":{"label":"//a:broken"}},"testResult":{"testActionOutput":[]}}\n' >"$TMP/bep2.json"
if out=$(python3 "$COUNT" --bep "$TMP/bep2.json" "$logs"); then fail "a result without test.xml passed: $out"; fi
grep -q "FAILED //a:broken: no test.xml" <<<"$out" || fail "missing test.xml: $out"
echo PASS
