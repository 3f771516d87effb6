#!/usr/bin/env python3
"""Counts test cases in Bazel's test.xml files and prints the closing line.

Usage: count_results.py [--bep BEP.json] BAZEL_TESTLOGS_DIR

With --bep (the `bazel test --build_event_json_file` of the run), only the
test.xml files that run reported are counted: results of targets the run did
not test (stale files under bazel-testlogs) are not. Without it, every
test.xml under the directory counts.

Prints each failed case, then each skipped case with its reason, then
'N passed, N failed' (and ', N skipped') as the closing line. Exits non-zero
when any case failed or no case ran.
"""
import argparse
import json
import pathlib
import sys
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET


def bep_test_xmls(bep_path):
    """(test.xml paths, labels whose result has no test.xml) of a BEP file."""
    xmls, missing = [], []
    with open(bep_path) as f:
        for line in f:
            event = json.loads(line)
            result = event.get("testResult")
            if result is None:
                continue
            label = event.get("id", {}).get("testResult", {}).get("label", "?")
            uris = [o["uri"] for o in result.get("testActionOutput", [])
                    if o.get("name") == "test.xml" and o.get("uri", "").startswith("file://")]
            if not uris:
                missing.append(label)
            for uri in uris:
                xmls.append(pathlib.Path(urllib.request.url2pathname(
                    urllib.parse.urlparse(uri).path)))
    return xmls, missing


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bep", default="", help="the run's build event JSON file")
    p.add_argument("testlogs", nargs="?", default="bazel-testlogs")
    args = p.parse_args()
    root = pathlib.Path(args.testlogs)
    passed = failed = skipped = 0
    skips = []
    if args.bep:
        xmls, missing = bep_test_xmls(args.bep)
        for label in missing:
            print(f"FAILED {label}: no test.xml")
            failed += 1
    else:
        xmls = sorted(root.rglob("test.xml"))
    for xml in sorted(set(xmls)):
        where = xml.parent.name if not xml.is_relative_to(root) else xml.parent.relative_to(root)
        try:
            tree = ET.parse(xml)
        except (ET.ParseError, OSError) as e:
            print(f"unreadable {xml}: {e}")
            failed += 1
            continue
        for case in tree.iter("testcase"):
            name = f"{case.get('classname', '')}.{case.get('name', '')}"
            skip = case.find("skipped")
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
                print(f"FAILED {where}: {name}")
            elif skip is not None or case.get("result") == "skipped":
                skipped += 1
                reason = (skip.get("message") or skip.text or "") if skip is not None else ""
                reason = " ".join(reason.split())  # one line a case
                skips.append(f"SKIPPED {where}: {name}" + (f": {reason}" if reason else ""))
            else:
                passed += 1
    for line in skips:
        print(line)
    line = f"{passed} passed, {failed} failed"
    if skipped:
        line += f", {skipped} skipped"
    print(line)
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
