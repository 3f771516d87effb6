"""Gathers a benchmark script's per-run JSON files into one result file.

    python3 tools/report/collect_results.py TOOL OUT.json DIR "COMMAND" [KEY=VALUE ...]

Every DIR/*.json that holds one JSON object (or JSON lines: the last one) is
a run, named by its file's stem; the result file (tools/report/results.py)
carries them under "results" as [{"run": NAME, ...the run's fields}], with
the script's command line and any KEY=VALUE settings (numbers as numbers).
The shell benchmarks call it when JSON=FILE is set. System python3 only.
"""
import json
import os
import pathlib
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results  # noqa: E402


def runs(directory):
    out = []
    for path in sorted(pathlib.Path(directory).glob("*.json")):
        text = path.read_text()
        lines = [line for line in text.splitlines() if line.strip()]
        try:
            doc = json.loads(text) if lines else None
        except json.JSONDecodeError:  # JSON lines: the last is the result
            doc = json.loads(lines[-1])
        if isinstance(doc, dict):
            out.append(dict(doc, run=path.stem))
    return out


def setting(text):
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"'{text}' is not KEY=VALUE")
    try:
        return key, float(value) if "." in value else int(value)
    except ValueError:
        return key, value


def main(argv):
    if len(argv) < 4:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    tool, out, directory, command = argv[:4]
    try:
        extra = dict(setting(a) for a in argv[4:])
    except ValueError as e:
        print(f"collect_results: {e}", file=sys.stderr)
        return 2
    found = runs(directory)
    if not found:
        print(f"collect_results: no JSON runs in {directory}", file=sys.stderr)
        return 1
    results.write(out, results.header(tool, shlex.split(command)), found, **extra)
    print(f"result file: {out} ({len(found)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
