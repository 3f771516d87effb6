#!/usr/bin/env python3
"""Counts test cases in Bazel's test.xml files and prints the closing line.

Usage: count_results.py BAZEL_TESTLOGS_DIR
Prints each failed case, then 'N passed, N failed' (and ', N skipped').
Exits non-zero when any case failed or no case ran.
"""
import pathlib
import sys
import xml.etree.ElementTree as ET


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "bazel-testlogs")
    passed = failed = skipped = 0
    for xml in sorted(root.rglob("test.xml")):
        try:
            tree = ET.parse(xml)
        except ET.ParseError as e:
            print(f"unreadable {xml}: {e}")
            failed += 1
            continue
        for case in tree.iter("testcase"):
            name = f"{case.get('classname', '')}.{case.get('name', '')}"
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
                print(f"FAILED {xml.parent.relative_to(root)}: {name}")
            elif case.find("skipped") is not None or case.get("result") == "skipped":
                skipped += 1
            else:
                passed += 1
    line = f"{passed} passed, {failed} failed"
    if skipped:
        line += f", {skipped} skipped"
    print(line)
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
