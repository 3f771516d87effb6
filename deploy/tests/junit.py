"""unittest cases -> Bazel's JUnit XML ($XML_OUTPUT_FILE), one <testcase>
per test method (skips included), so that tests/count_results.py counts
each. Standard library only: used by the chart tests (in their venv) and by
deploy/docker/image_libs_test.py (system python3).
"""
import os
import pathlib
import sys
import time
import unittest
from xml.sax.saxutils import escape, quoteattr


class _Result(unittest.TextTestResult):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cases = []  # (class, name, status, message, seconds)
        self._start = 0.0
        self._sub_failures = []

    def startTest(self, test):
        self._start = time.monotonic()
        super().startTest(test)

    def _record(self, test, status, message=""):
        if status in ("failure", "error") and self._sub_failures:
            message = "\n".join(self._sub_failures + [message]).strip()
            self._sub_failures = []
        cls, _, name = test.id().rpartition(".")
        self.cases.append((cls.rpartition(".")[2], name, status, message,
                           time.monotonic() - self._start))

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "failure", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "error", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "skipped", reason)

    def addExpectedFailure(self, test, err):
        # A known bug (unittest.expectedFailure): reported as skipped, with why.
        super().addExpectedFailure(test, err)
        self._record(test, "skipped", "expected failure (a known bug): "
                     + self._exc_info_to_string(err, test).strip().splitlines()[-1])

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._record(test, "failure", "unexpected success: the known bug is fixed; "
                     "remove its @unittest.expectedFailure")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:  # one failed subtest fails its test: one <testcase>
            self._sub_failures.append(f"{subtest}: {self._exc_info_to_string(err, test)}")

    def stopTest(self, test):
        if self._sub_failures:
            self._record(test, "failure")
        super().stopTest(test)


def write_junit(suite_name: str, cases: list, path: str) -> None:
    fails = sum(c[2] in ("failure", "error") for c in cases)
    skips = sum(c[2] == "skipped" for c in cases)
    lines = ['<?xml version="1.0" encoding="UTF-8"?>',
             f'<testsuites><testsuite name={quoteattr(suite_name)} tests="{len(cases)}" '
             f'failures="{fails}" skipped="{skips}">']
    for cls, name, status, message, secs in cases:
        head = f'  <testcase classname={quoteattr(cls)} name={quoteattr(name)} time="{secs:.3f}"'
        if status == "passed":
            lines.append(head + "/>")
        elif status == "skipped":
            lines.append(head + f"><skipped message={quoteattr(message)}/></testcase>")
        else:
            lines.append(head + f"><{status} message={quoteattr(message.splitlines()[-1])}>"
                         f"{escape(message)}</{status}></testcase>")
    lines.append("</testsuite></testsuites>")
    pathlib.Path(path).write_text("\n".join(lines) + "\n")


def main(module_name: str) -> None:
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[module_name])
    runner = unittest.TextTestRunner(stream=sys.stdout, verbosity=2, resultclass=_Result)
    result = runner.run(suite)
    out = os.environ.get("XML_OUTPUT_FILE")
    if out:
        write_junit(pathlib.Path(sys.argv[0]).stem, result.cases, out)
    sys.exit(0 if result.wasSuccessful() and result.testsRun else 1)
