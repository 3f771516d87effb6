"""Result files: what every benchmark tool writes beside its text tables.

A result file is one JSON object: {"tool", "date", "cpu", "command",
"commit", "results", ...}. The C++ tools write it with
tools/bench/result_file.h; Python tools and the comparison scripts with
header() and write() here. tools/report/make_plots.py reads them with load().
"""
import datetime
import json
import os
import shlex
import subprocess
import sys

REQUIRED = ("tool", "date", "cpu", "command", "commit", "results")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def source_commit(cwd=None):
    """The checkout's commit (12 hex digits), "-dirty" when tracked files other
    than documents differ (docs/, with the result files and plots, and any *.md
    do not change what runs)."""
    def git(*args):
        return subprocess.run(("git",) + args, cwd=cwd, capture_output=True, text=True,
                              check=True).stdout.strip()
    try:
        commit = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    code = [line for line in dirty.splitlines()
            if not (line[3:].startswith("docs/") or line[3:].endswith(".md"))]
    return commit + ("-dirty" if code else "")


def header(tool, argv=None):
    argv = sys.argv if argv is None else argv
    return {"tool": tool, "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
            "cpu": cpu_model(), "cores": os.cpu_count(), "command": " ".join(shlex.quote(a) for a in argv),
            # The checkout this file is in (through a Bazel runfiles link too).
            "commit": source_commit(os.path.dirname(os.path.realpath(__file__)))}


def write(path, head, results, **extra):
    doc = dict(head)
    doc.update(extra)
    doc["results"] = results
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


class ResultError(ValueError):
    pass


def load(path):
    """A result file, its header checked: a plot must say where its numbers came from."""
    with open(path) as f:
        doc = json.load(f)
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        raise ResultError(f"{path}: result file lacks {', '.join(missing)}")
    return doc
