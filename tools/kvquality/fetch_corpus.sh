#!/usr/bin/env bash
# Fetches the KV quality harness's natural text (docs/kv-quality.md):
# gensim's wheel ships the Lee corpus (news articles, one per line) as test
# data. The wheel is downloaded from the package index pip is configured
# with, the two files are taken out of it and checked against their
# SHA-256; the text is never committed.
#
#   tools/kvquality/fetch_corpus.sh [OUT_DIR]      (default build/corpus)
#
# Writes OUT_DIR/lee_background.cor (evaluation: 300 articles) and
# OUT_DIR/lee.cor (calibration: 50 other articles). Needs a Python with pip
# ($KVCAST_PYTHON, else .venv/bin/python, else python3).
set -euo pipefail
out=${1:-build/corpus}
py=${KVCAST_PYTHON:-.venv/bin/python}
[[ -x "$py" ]] || py=python3
declare -A sha=(
  [lee_background.cor]=5d78d6dafd953bbf65797bef09a9ffb9ec430583381be705f8fd460000f370fb
  [lee.cor]=a878f9a58f6743c32985c56c2f2f75988386216b38a4023a01fd3bcf7884d93e
)
ok=1
for f in "${!sha[@]}"; do
  [[ -f "$out/$f" ]] && echo "${sha[$f]}  $out/$f" | sha256sum -c --quiet 2>/dev/null || ok=0
done
if (( ok )); then echo "corpus: $out is up to date"; exit 0; fi
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "corpus: downloading gensim 4.4.0's wheel (28 MB) for its test corpus"
"$py" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
  --platform manylinux_2_28_x86_64 -d "$tmp" gensim==4.4.0
"$py" - "$tmp" "$out" <<'PY'
import glob, sys, zipfile
tmp, out = sys.argv[1:]
wheel = zipfile.ZipFile(glob.glob(tmp + "/gensim-*.whl")[0])
for name in ("lee_background.cor", "lee.cor"):
    with open(f"{out}/{name}", "wb") as f:
        f.write(wheel.read("gensim/test/test_data/" + name))
PY
for f in "${!sha[@]}"; do
  echo "${sha[$f]}  $out/$f" | sha256sum -c --quiet || { echo "corpus: $out/$f: SHA-256 differs" >&2; exit 1; }
done
echo "corpus: wrote $out/lee_background.cor and $out/lee.cor"
