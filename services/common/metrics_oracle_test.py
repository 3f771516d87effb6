"""Checks kvcast's Prometheus exposition against PyPI's prometheus_client.

Starts metrics_oracle_tool, fetches /metrics, /healthz and a 404 path with
Python's own HTTP client, and parses the body with
prometheus_client.parser.text_string_to_metric_families (an independent
parser of text format 0.0.4). Expected values are recomputed here.

Usage: metrics_oracle_test.py METRICS_ORACLE_TOOL XML_OUT
Writes one JUnit <testcase> per check to XML_OUT; exits 1 if any failed.
"""
import subprocess
import sys
import traceback
import urllib.error
import urllib.request
import xml.sax.saxutils

from prometheus_client.parser import text_string_to_metric_families

TOOL, XML_OUT = sys.argv[1], sys.argv[2]
BUCKETS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60]
OBSERVED = [0.0005, 0.003, 0.003, 0.7, 100.0]


def fetch(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def families(body):
    return {f.name: f for f in text_string_to_metric_families(body)}


def samples(fam):
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for s in fam.samples}


def check_http(port):
    status, headers, body = fetch(port, "/metrics")
    assert status == 200, status
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4"), headers
    assert headers["Connection"] == "close", headers
    assert int(headers["Content-Length"]) == len(body.encode()), headers
    assert fetch(port, "/healthz")[:1] == (200,) and fetch(port, "/healthz")[2] == "ok"
    assert fetch(port, "/nope")[0] == 404
    return body


def check_counter(body):
    f = families(body)["kvcast_requests"]  # the parser strips _total
    assert f.type == "counter", f.type
    assert f.documentation == "Requests received.", f.documentation
    got = samples(f)
    want = {
        ("kvcast_requests_total", (("note", 'a"b\\c\nd'), ("role", "prefill"))): 3.0,
        ("kvcast_requests_total", (("role", "decode"),)): 1.5,
    }
    assert got == want, got


def check_gauges(body):
    fams = families(body)
    g = fams["kvcast_inflight_requests"]
    assert g.type == "gauge" and g.documentation == "In flight; help with \\ and\nnewline.", g
    assert samples(g) == {("kvcast_inflight_requests", ()): -2.5}, samples(g)
    assert samples(fams["kvcast_unbounded"]) == {("kvcast_unbounded", ()): float("inf")}
    cb = fams["kvcast_kv_free_pages"]
    assert cb.type == "gauge", cb.type
    assert samples(cb) == {("kvcast_kv_free_pages", (("pool", "gpu0"),)): 1234.0}, samples(cb)


def check_histogram(body):
    fams = families(body)
    h = fams["kvcast_ttft_seconds"]
    assert h.type == "histogram", h.type
    want = {}
    for le in BUCKETS + [float("inf")]:
        label = "+Inf" if le == float("inf") else repr(float(le))
        count = sum(1 for v in OBSERVED if v <= le)
        want[("kvcast_ttft_seconds_bucket", (("le", label), ("model", "tiny")))] = count
    want[("kvcast_ttft_seconds_sum", (("model", "tiny"),))] = sum(OBSERVED)
    want[("kvcast_ttft_seconds_count", (("model", "tiny"),))] = len(OBSERVED)
    got = samples(h)
    # le strings compare by value: the exposition may print 1 where Python prints 1.0.
    norm = lambda d: {(n, tuple((k, float(v) if k == "le" else v) for k, v in l)): x
                      for (n, l), x in d.items()}
    assert norm(got) == norm(want), (sorted(got.items()), sorted(want.items()))
    e = samples(fams["kvcast_empty_seconds"])
    assert e[("kvcast_empty_seconds_bucket", (("le", "+Inf"),))] == 0 and len(e) == 5, e


def main():
    proc = subprocess.Popen([TOOL], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    results = []
    try:
        port = int(proc.stdout.readline())
        body = None
        for name, fn in [("http", check_http), ("counter", check_counter),
                         ("gauges", check_gauges), ("histogram", check_histogram)]:
            try:
                if name == "http":
                    body = fn(port)
                else:
                    fn(body)
                results.append((name, None))
            except Exception:  # noqa: BLE001 - every failure becomes a test case
                results.append((name, traceback.format_exc()))
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)
    entries = []
    for name, err in results:
        print(("FAIL " if err else "ok   ") + name + ("\n" + err if err else ""))
        entry = f'<testcase classname="metrics_oracle" name="{name}">'
        if err:
            msg = xml.sax.saxutils.escape(err.strip().splitlines()[-1][:300], {'"': "&quot;"})
            entry += f'<failure message="{msg}">{xml.sax.saxutils.escape(err)}</failure>'
        entries.append(entry + "</testcase>")
    failed = sum(1 for _, e in results if e)
    with open(XML_OUT, "w") as f:
        f.write('<?xml version="1.0" encoding="UTF-8"?>\n<testsuites>'
                f'<testsuite name="metrics_oracle" tests="{len(results)}" failures="{failed}">'
                + "".join(entries) + "</testsuite></testsuites>\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
