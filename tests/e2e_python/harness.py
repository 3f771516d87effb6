"""Shared by the Python end-to-end tests: `kvcast cluster up` started and
stopped with bounded waits, metrics scraping, and one JUnit <testcase> per
check (see grpcio_client_test.py, openai_client_test.py)."""
import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import time
import traceback
import urllib.request
import xml.sax.saxutils

START_TIMEOUT_S = 90  # `cluster up` until it prints its last start-up line
STOP_TIMEOUT_S = 40   # SIGTERM to exit (LocalCluster's stop_timeout is 20 s)

T0 = time.monotonic()

def log(msg):
    print(f"[{time.monotonic() - T0:7.2f}s] {msg}", flush=True)

class CheckError(AssertionError):
    pass

def expect(cond, msg):
    if not cond:
        raise CheckError(msg)

def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """`kvcast cluster up` with 1 prefill + 1 decode worker and a relay.

    `args` names the binaries (kvcast, scheduler, prefill, decode, relay);
    `extra` are more `cluster up` flags. After start(): `address` (gRPC),
    `http` (the OpenAI-compatible API, HOST:PORT) and `metrics`."""

    def __init__(self, args, model, work, extra=()):
        self.work = work
        self.dir = work / "cluster"
        self.bin_dir = work / "bin"
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        for name, path in [("kvcast-scheduler", args.scheduler), ("kvcast-prefill", args.prefill),
                           ("kvcast-decode", args.decode), ("kvcast-relay", args.relay)]:
            link = self.bin_dir / name
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(os.path.realpath(path))
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.http = None
        self.stdout_path = work / "cluster_up.stdout"
        self.stderr_path = work / "cluster_up.stderr"
        self.cmd = [args.kvcast, "cluster", "up", "--model", str(model), "--prefill", "1",
                    "--decode", "1", "--work_dir", str(self.dir), "--scheduler_port",
                    str(self.port), "--http_port", "0", "--bin_dir", str(self.bin_dir), *extra]
        self.proc = None
        self.metrics = {}  # process name -> HOST:PORT of /metrics
        self.grpc = {}     # worker name -> HOST:PORT of its gRPC server
        self.pids = {}     # process name -> pid
        self.moqt = {}     # process name (relay, workers) -> HOST:PORT (UDP)

    def start(self):
        log("starting: " + " ".join(self.cmd))
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                         start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            text = self.stdout_path.read_text(errors="replace")
            if "Ctrl-C" in text:  # the last line cluster up prints once started
                break
            if self.proc.poll() is not None:
                raise CheckError(f"kvcast cluster up exited with {self.proc.returncode} during start-up")
            if time.monotonic() > deadline:
                raise CheckError(f"kvcast cluster up did not start within {START_TIMEOUT_S} s")
            time.sleep(0.1)
        m = re.search(r"^scheduler: (\S+) \(metrics http://(\S+)/metrics\)", text, re.M)
        expect(m, f"no scheduler line in cluster up's output:\n{text}")
        expect(m.group(1) == self.address, f"scheduler at {m.group(1)}, asked for {self.address}")
        self.metrics["scheduler"] = m.group(2)
        h = re.search(r"^OpenAI-compatible API: (https?)://(\S+)/v1( \(CA (\S+)\))?$", text,
                      re.M)
        self.http = h.group(2) if h else None
        self.http_scheme = h.group(1) if h else None
        self.http_ca = h.group(4) if h else None  # with --http_tls
        for line in text.splitlines():
            w = re.match(r"^\s+(\S+)\s+pid\s+\d+\s.*metrics (\S+?)[\s,]", line + " ")
            if w:
                self.metrics[w.group(1)] = w.group(2)
            g = re.match(r"^\s+(\S+)\s+pid\s+\d+\s+grpc (\S+?),", line)
            if g:
                self.grpc[g.group(1)] = g.group(2)
            p = re.match(r"^\s+(\S+)\s+pid\s+(\d+)\s", line)
            if p:
                self.pids[p.group(1)] = int(p.group(2))
            q = re.search(r"moqt (\S+)/udp", line)
            if p and q:
                self.moqt[p.group(1)] = q.group(1)
        log(f"cluster up: scheduler {self.address}, metrics {self.metrics}")

    def restarted_pid(self, name, timeout=10):
        """The pid `cluster up` reports for `name` after restarting it."""
        pat = re.compile(rf"^kvcast cluster: {re.escape(name)} restarted \(pid (\d+)\)$", re.M)
        found = []
        wait_for(f"cluster up restarting {name}",
                 lambda: found.extend(pat.findall(self.stderr_path.read_text(errors="replace")))
                 or found, timeout)
        self.pids[name] = int(found[-1])
        return self.pids[name]

    def stop(self):
        """SIGTERM; returns (exit code, seconds) or raises if it had exited or had to be killed."""
        if self.proc is None:
            return None, 0.0
        if self.proc.poll() is not None:
            raise CheckError(f"kvcast cluster up had already exited with {self.proc.returncode}")
        t = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its children die with it (PDEATHSIG)
            self.proc.wait(timeout=10)
            raise CheckError(f"kvcast cluster up did not exit within {STOP_TIMEOUT_S} s of SIGTERM; killed")
        return rc, time.monotonic() - t

    def dump_logs(self):
        print("=" * 30 + " cluster logs " + "=" * 30)
        for p in [self.stdout_path, self.stderr_path] + sorted((self.dir / "logs").glob("*.log")):
            try:
                data = p.read_text(errors="replace")
            except OSError:
                continue
            if len(data) > 6000:
                data = "...\n" + data[-6000:]
            print(f"----- {p} -----\n{data}")
        sys.stdout.flush()


def parse_cluster_test_args():
    """The flags grpcio_client_test.sh passes every cluster test script."""
    ap = argparse.ArgumentParser()
    for flag in ("xml", "work", "gen_stubs", "proto_root", "kvcast", "make_tiny_model", "scheduler",
                 "prefill", "decode", "relay"):
        ap.add_argument("--" + flag, required=True)
    return ap.parse_args()


def scrape(address, name, labels=None, tls=None):
    """Sum of the samples of metric `name` (matching `labels`) at
    http://address/metrics (https with `tls`, an ssl.SSLContext)."""
    scheme = "https" if tls else "http"
    with urllib.request.urlopen(f"{scheme}://{address}/metrics", timeout=5, context=tls) as r:
        body = r.read().decode()
    total, seen = 0.0, False
    for line in body.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if not m or m.group(1) != name:
            continue
        if labels and not all(f'{k}="{v}"' in (m.group(2) or "") for k, v in labels.items()):
            continue
        total += float(m.group(3))
        seen = True
    if not seen:
        raise CheckError(f"no {name}{labels or ''} at http://{address}/metrics")
    return total


def wait_for(what, cond, timeout):
    """Polls cond() until true; returns the seconds it took or raises."""
    t = time.monotonic()
    last = None
    while time.monotonic() - t < timeout:
        try:
            if cond():
                return time.monotonic() - t
        except Exception as e:  # noqa: BLE001 - reported below if it never becomes true
            last = e
        time.sleep(0.05)
    raise CheckError(f"{what}: not within {timeout} s" + (f" (last error: {last!r})" if last else ""))


class Runner:
    """Runs named checks, recording (name, seconds, error text or None)."""

    def __init__(self, suite):
        self.suite = suite
        self.results = []
        self.skipped = []  # (name, reason)

    def skip(self, name, reason):
        log(f"SKIPPED {name}: {reason}")
        self.skipped.append((name, reason))

    def run(self, name, fn):
        t = time.monotonic()
        log(f"--- {name}")
        try:
            fn()
            err = None
        except Exception:  # noqa: BLE001 - every failure is reported
            err = traceback.format_exc()
            log(f"FAILED {name}:\n{err}")
        self.results.append((name, time.monotonic() - t, err))
        return err is None

    def stop_cluster(self, cluster):
        def stop():
            rc, took = cluster.stop()
            log(f"cluster up exited with {rc} {took:.2f} s after SIGTERM")
            expect(rc == 0, f"kvcast cluster up exited with {rc} after SIGTERM "
                   "(non-zero: a child needed SIGKILL or exited with an error)")
        self.run("cluster_stops", stop)

    def finish(self, xml_path, cluster=None):
        """Writes the JUnit file; returns the exit status."""
        if any(err for _, _, err in self.results) and cluster is not None:
            cluster.dump_logs()
        write_xml(xml_path, self.suite, self.results, self.skipped)
        failed = [n for n, _, err in self.results if err]
        log(f"{len(self.results) - len(failed)} passed, {len(failed)} failed"
            + (f": {failed}" if failed else ""))
        return 1 if failed else 0


def write_xml(path, suite, results, skipped=()):
    """JUnit XML: `results` as (name, seconds, error text or None),
    `skipped` as (name, reason)."""
    def attr(text):
        return xml.sax.saxutils.escape(text, {'"': "&quot;"})

    entries = [f'<testcase classname="{suite}" name="{attr(name)}" time="0">'
               f'<skipped message="{attr(why)}"/></testcase>' for name, why in skipped]
    for name, secs, err in results:
        entry = f'<testcase classname="{suite}" name="{attr(name)}" time="{secs:.3f}">'
        if err:
            last = err.strip().splitlines()[-1][:300]
            entry += f'<failure message="{attr(last)}">{xml.sax.saxutils.escape(err)}</failure>'
        entries.append(entry + "</testcase>")
    failures = sum(1 for r in results if r[2])
    with open(path, "w") as f:
        f.write('<?xml version="1.0" encoding="UTF-8"?>\n<testsuites>'
                f'<testsuite name="{suite}" tests="{len(results) + len(skipped)}" '
                f'failures="{failures}" skipped="{len(skipped)}">\n'
                + "\n".join(entries) + "\n</testsuite></testsuites>\n")
