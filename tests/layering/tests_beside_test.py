#!/usr/bin/env python3
"""Every product source file in the services layer has a test beside it.

Issue 39's target: a service file is tested on its own (FILE_test.cc next
to FILE.cc), not only through other services or processes. Exempt: the
binaries' mains (`*_main.cc`, run by the e2e tests), benchmarks, fuzzers,
testing helpers, and the tools a test runs (EXEMPT). Never cached (tag
external): it reads the tree as it is.
Usage outside Bazel:
    python3 tests/layering/tests_beside_test.py [ROOT]
"""
import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
import source_tree  # noqa: E402

# Programs, not libraries: each is what a test of its own runs.
EXEMPT = {
    "services/common/metrics_oracle_tool.cc",  # run by metrics_oracle_test.sh
}


def untested(root):
    missing, checked = [], 0
    for path in sorted(glob.glob(os.path.join(root, "services", "**", "*.cc"), recursive=True)):
        rel = os.path.relpath(path, root)
        name = os.path.basename(rel)
        if (name.endswith(("_test.cc", "_main.cc", "_benchmark.cc", "_fuzzer.cc"))
                or "/testing/" in rel or "/fuzz/" in rel or rel in EXEMPT):
            continue
        checked += 1
        if not os.path.exists(path[:-len(".cc")] + "_test.cc"):
            missing.append(rel)
    return missing, checked


def main():
    root = source_tree.root(__file__, "services")
    if root is None:
        return 1
    missing, checked = untested(root)
    for m in missing:
        print(f"{m}: no {os.path.basename(m)[:-3]}_test.cc beside it")
    print(f"tests_beside_test: {checked - len(missing)} of {checked} service files have a test beside them")
    return 1 if missing or checked < 20 else 0


if __name__ == "__main__":
    sys.exit(main())
