#!/usr/bin/env python3
"""No include of a higher layer from a lower one, no package public by default.

Layers, lowest first: common < kernels < engine < transport < services <
tools, tests, deploy. A product source (.h, .cc, .cu) of one layer may
include its own layer and those below it. Tests, test support (testing/,
*_test_util*), fuzzers and benchmarks may also use tools/ (certificates,
the tiny model) and, for cross-checks, the layer above.

Reads the source tree the test's own file links back to (the test is
tagged external: it must see every file as it is now). Usage outside Bazel:
    python3 tests/layering/layering_test.py [ROOT]
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
import source_tree  # noqa: E402

LAYERS = ["common", "kernels", "engine", "transport", "services"]
ABOVE = {"tools", "tests", "deploy"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_0-9]+)/')


def is_product(path):
    name = os.path.basename(path)
    return not (name.endswith(("_test.cc", "_test.h", "_benchmark.cc", "_fuzzer.cc"))
                or "_test_util" in name or "/testing/" in path or "/fuzz/" in path)


def violations(root):
    found = []
    for rank, layer in enumerate(LAYERS):
        for dirpath, _, files in os.walk(os.path.join(root, layer)):
            for f in files:
                if not f.endswith((".h", ".cc", ".cu")):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                if not is_product(rel):
                    continue
                with open(path, errors="replace") as src:
                    for n, line in enumerate(src, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = m.group(1)
                        higher = (target in LAYERS and LAYERS.index(target) > rank) or \
                            target in ABOVE
                        if higher:
                            found.append(f"{rel}:{n}: {layer} includes {target}: {line.strip()}")
    return found


def public_packages(root):
    """BUILD files of the layers that default their targets to public: each
    exported target lists who may depend on it instead (issue 39)."""
    found = []
    for layer in LAYERS:
        for dirpath, _, files in os.walk(os.path.join(root, layer)):
            if "BUILD" in files:
                path = os.path.join(dirpath, "BUILD")
                with open(path) as f:
                    if re.search(r'default_visibility\s*=\s*\["//visibility:public"\]', f.read()):
                        found.append(f"{os.path.relpath(path, root)}: defaults to public visibility")
    return found


def main():
    root = source_tree.root(__file__, "engine")
    if root is None:
        return 1
    found = violations(root)
    public = public_packages(root)
    for v in found + public:
        print(v)
    print(f"layering_test: {len(found)} includes of a higher layer "
          f"({', '.join(LAYERS)}, then tools/tests/deploy), {len(public)} packages "
          f"public by default")
    return 1 if found or public else 0


if __name__ == "__main__":
    sys.exit(main())
