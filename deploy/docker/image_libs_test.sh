#!/usr/bin/env bash
# Bazel sh_test: image_libs_test.py with the system python3 (standard library
# only), on the binaries in this test's runfiles.
set -uo pipefail
RUNFILES=${TEST_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}/${TEST_WORKSPACE:-kvcast}
export KVCAST_ROOT=$RUNFILES PYTHONDONTWRITEBYTECODE=1
exec python3 "$RUNFILES/deploy/docker/image_libs_test.py"
