#!/usr/bin/env bash
# Generates the kvcast.v1 Python modules from proto/kvcast/v1/*.proto with
# Debian's protoc (3.21.12) and grpc_python_plugin (gRPC 1.51.1); no Bazel.
#   tests/grpc/gen_python_stubs.sh OUT_DIR
# Writes OUT_DIR/kvcast/v1/{generation,worker}_pb2{,_grpc}.py (plus empty
# __init__.py files); with OUT_DIR on sys.path:
#   from kvcast.v1 import generation_pb2, generation_pb2_grpc
# The runtime needs `grpcio` and `protobuf` (kvcast.sh's PY_PACKAGES, in
# .venv). Environment: PROTO_ROOT (default: this repo's proto/), PROTOC,
# GRPC_PYTHON_PLUGIN.
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 OUT_DIR" >&2
  exit 2
fi
out=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
proto_root=${PROTO_ROOT:-$here/../../proto}
protoc=${PROTOC:-/usr/bin/protoc}
plugin=${GRPC_PYTHON_PLUGIN:-/usr/bin/grpc_python_plugin}

for tool in "$protoc" "$plugin"; do
  if [ ! -x "$tool" ]; then
    echo "$0: $tool not found (apt-get install protobuf-compiler protobuf-compiler-grpc)" >&2
    exit 1
  fi
done

mkdir -p "$out"
"$protoc" \
  --proto_path="$proto_root" \
  --python_out="$out" \
  --grpc_python_out="$out" \
  --plugin=protoc-gen-grpc_python="$plugin" \
  "$proto_root/kvcast/v1/generation.proto" \
  "$proto_root/kvcast/v1/worker.proto"
# Regular packages, so `import kvcast.v1...` works without namespace-package
# lookups (and does not mix with another "kvcast" on sys.path).
touch "$out/kvcast/__init__.py" "$out/kvcast/v1/__init__.py"
