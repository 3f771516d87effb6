# Sourced by the sh_tests that need something Bazel does not provide (a
# Python venv from ./kvcast.sh test): `junit_skip SUITE MESSAGE` prints
# MESSAGE, records one SKIPPED case in $XML_OUTPUT_FILE, so that the run
# counts the test as skipped rather than passed, and exits 0.
junit_skip() {
  local suite=$1 msg=$2 escaped
  echo "$msg"
  escaped=$(printf '%s' "$msg" | sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g' -e 's/"/\&quot;/g')
  cat > "${XML_OUTPUT_FILE:-/dev/null}" <<XML
<?xml version="1.0" encoding="UTF-8"?>
<testsuites><testsuite name="$suite" tests="1" skipped="1">
  <testcase classname="$suite" name="all"><skipped message="$escaped"/></testcase>
</testsuite></testsuites>
XML
  exit 0
}
