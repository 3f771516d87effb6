#!/usr/bin/env python3
"""No function in the services layer (and the MoQT session) over 100 lines.

Where features pile up, long functions hide the states a reader must hold
(issue 39: a 225-line request function, 356-line message visit). Counts the
lines of each function defined at namespace scope in the product .cc files
under services/ and transport/moqt/session*.cc, from the first line of its
signature to its closing brace; functions defined inside a class body are
not measured. Never cached (tag external): it reads the tree as it is.
Usage outside Bazel:
    python3 tests/layering/function_length_test.py [ROOT]
"""
import glob
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
import source_tree  # noqa: E402

LIMIT = 100
SIGNATURE = re.compile(r"^[A-Za-z_].*\(")  # at column 0, a call-like line
NOT_A_FUNCTION = re.compile(r"^(namespace|class|struct|enum|union|using|typedef|template|#|//|ABSL_FLAG)\b")


def is_product(path):
    name = os.path.basename(path)
    return not (name.endswith(("_test.cc", "_benchmark.cc", "_fuzzer.cc"))
                or "/testing/" in path or "/fuzz/" in path)


def functions(path):
    """(first line, length, signature) of each namespace-scope function."""
    out = []
    start = None
    with open(path, errors="replace") as src:
        lines = src.read().split("\n")
    for n, line in enumerate(lines, 1):
        if start is None:
            if SIGNATURE.match(line) and not NOT_A_FUNCTION.match(line) and \
                    not line.rstrip().endswith(";"):
                start = n
        elif line.startswith("}"):
            if line.rstrip() == "}":
                out.append((start, n - start + 1, lines[start - 1].strip()))
            start = None
        elif line.rstrip().endswith(";") and not line.startswith((" ", "\t")):
            start = None  # a declaration spanning lines
    return out


def long_functions(root):
    paths = [p for p in glob.glob(os.path.join(root, "services", "**", "*.cc"), recursive=True)
             if is_product(os.path.relpath(p, root))]
    paths += glob.glob(os.path.join(root, "transport", "moqt", "session*.cc"))
    found = []
    for path in sorted(paths):
        if not is_product(os.path.relpath(path, root)):
            continue
        for first, length, signature in functions(path):
            if length > LIMIT:
                found.append(f"{os.path.relpath(path, root)}:{first}: {length} lines: {signature}")
    return found, len(paths)


def main():
    root = source_tree.root(__file__, "services")
    if root is None:
        return 1
    found, files = long_functions(root)
    for f in found:
        print(f)
    print(f"function_length_test: {len(found)} functions over {LIMIT} lines in {files} files")
    return 1 if found or files < 20 else 0


if __name__ == "__main__":
    sys.exit(main())
