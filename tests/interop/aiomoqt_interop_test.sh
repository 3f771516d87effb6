#!/usr/bin/env bash
# Bazel test: the aiomoqt interop matrix (run_interop.sh) against kvcast-relay,
# kvcast-moqt and kvcast-kvpub. Each case becomes one JUnit <testcase> in $XML_OUTPUT_FILE.
# Needs the aiomoqt venv (setup_aiomoqt.sh) passed as KVCAST_AIOMOQT_VENV;
# `./kvcast.sh test` provides it.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
RUNFILES=${TEST_SRCDIR:-$HERE/../..}/${TEST_WORKSPACE:-kvcast}
VENV=${KVCAST_AIOMOQT_VENV:-}
if [[ -z "$VENV" || ! -x "$VENV/bin/python" ]]; then
  # aiomoqt needs Python >= 3.12; without it the peer cannot run: say so.
  source "$RUNFILES/tests/testing/junit_skip.sh"
  junit_skip aiomoqt_interop "SKIPPED: KVCAST_AIOMOQT_VENV is not a venv made by tests/interop/setup_aiomoqt.sh (needs Python >= 3.12)"
fi
OUT=${TEST_TMPDIR:-$(mktemp -d)}/interop
"$RUNFILES/tests/interop/run_interop.sh" --venv "$VENV" \
  --relay-bin "$RUNFILES/services/relay/kvcast-relay" \
  --kvcast-moqt "$RUNFILES/transport/moqt/kvcast-moqt" \
  --kvpub "$RUNFILES/transport/kvcache/kvcast-kvpub" \
  --make-tiny-model "$RUNFILES/tools/tiny_model/make_tiny_model" --out "$OUT"
run_rc=$?
echo "run_interop exit code $run_rc"

xml_escape() { sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g' -e 's/"/\&quot;/g'; }
cases="" failures=0 tests=0 skipped=0
while IFS= read -r line; do
  status=${line:0:4}; part=${line:5:4}; rest=${line:10}
  name=$(echo "${rest:0:34}" | sed 's/ *$//'); detail=$(echo "${rest:35}" | xml_escape)
  [[ -z "$name" ]] && continue
  ename=$(echo "$part $name" | sed 's/ *$//' | xml_escape)
  tests=$((tests + 1))
  case "$status" in
    PASS) cases+="  <testcase classname=\"aiomoqt_interop\" name=\"$ename\"><system-out>$detail</system-out></testcase>"$'\n' ;;
    SKIP) skipped=$((skipped + 1))
          cases+="  <testcase classname=\"aiomoqt_interop\" name=\"$ename\"><skipped message=\"$detail\"/></testcase>"$'\n' ;;
    FAIL) failures=$((failures + 1))
          cases+="  <testcase classname=\"aiomoqt_interop\" name=\"$ename\"><failure message=\"$detail\"/></testcase>"$'\n' ;;
  esac
done < "$OUT/results.txt"
{
  echo '<?xml version="1.0" encoding="UTF-8"?>'
  echo "<testsuites><testsuite name=\"aiomoqt_interop\" tests=\"$tests\" failures=\"$failures\" skipped=\"$skipped\">"
  printf '%s' "$cases"
  echo "</testsuite></testsuites>"
} > "${XML_OUTPUT_FILE:-$OUT/test.xml}"
cat "$OUT/results.txt"
echo "interop: $tests cases, $failures failed, $skipped skipped"
# A runner that stopped early (crashed, killed) fails the test even when the
# cases it recorded passed.
[[ $run_rc -eq 0 ]] || echo "FAIL: run_interop exited $run_rc"
# Every case of the matrix ran: parts a-e record 14 + 2 + 3 + 12 + 10 cases
# (update with run_interop.sh); fewer means a part stopped early.
EXPECTED_CASES=41
[[ $tests -eq $EXPECTED_CASES ]] || echo "FAIL: $tests cases recorded, want $EXPECTED_CASES"
[[ $tests -eq $EXPECTED_CASES && $failures -eq 0 && $run_rc -eq 0 ]]
