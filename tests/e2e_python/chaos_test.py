"""A chaos campaign against `kvcast cluster up` (2 prefill + 2 decode workers,
a relay, the tiny model), bounded in time. Each scenario runs on a fresh
cluster: `kvcast bench` as the load (360 requests arriving at 60/s, so
about 6 s of it, at most 8 in flight, a 20 s deadline each) with a fault
injected 1 s in, then:
  requests    ok / failed (a clear error) / hung (the deadline passed)
  recovery    seconds from the fault until a new request succeeds
  pages       every live worker's pages in use == its prefix cache's, after
  crashes     processes that died other than the one killed
  RSS         the sum over the processes, before -> after (MiB)
Scenarios: baseline; SIGKILL and SIGSTOP (4 s) of decode-0, prefill-0 and
the relay; SIGSTOP of the scheduler; SIGKILL of the scheduler and of the
relay with `cluster up` restarting them (then every worker must be back in
the scheduler's registry / connected to the relay again); a 4 s network
partition of decode-0 and of prefill-0 (nft drops every packet to or from
the worker's sockets); a flood of 200 concurrent requests; bad inputs at
every size limit (1e6 prompt ids, a 10 MB text prompt, 1,000 stop strings,
a 1 MB stop string, max_tokens 2^31-1); random datagrams at every UDP port;
a long prompt as the very first request of a fresh 1 + 1 worker cluster (a
wider random model whose 8,000-token prefill takes seconds, prefill and
decode stall bounds of 1 s: it must succeed at the first attempt, then the
load runs).
Passes iff every
scenario's load has 0 failed (the scheduler's SIGKILL: at most the 8 in
flight, whose streams had begun) and 0 hung requests, 0 crashes, 0 leaked pages
and bounded RSS, and each bad input ends as stated (INVALID_ARGUMENT naming
the field, or served) within 10 s. Prints the results table
(docs/benchmarks.md) and writes one JUnit <testcase> per scenario to --xml.

As root the campaign re-executes itself in a new network namespace
(`unshare --net`), so the partitions' nft rules touch nothing else; without
that, or without `nft` (Debian's nftables), the partitions are skipped.

Usage (see chaos_test.sh): chaos_test.py --xml OUT --work DIR --gen_stubs SH
  --proto_root DIR --kvcast BIN --make_tiny_model BIN --scheduler BIN
  --prefill BIN --decode BIN --relay BIN
"""
import json
import os
import pathlib
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (CheckError, Cluster, Runner, expect, log, parse_cluster_test_args,  # noqa: E402
                     scrape, wait_for)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                                "report"))
import results  # noqa: E402  (the result file: tools/report/results.py)

PAGES_PER_CHUNK = 128 // 16
DEADLINE_S = 20
FAULT_AT_S = 1.0
LOAD = dict(requests=360, rate=60, concurrency=8)  # ~6 s: spans every fault
FREEZE_S = 4
RSS_LIMIT_MIB = 512  # growth of the processes' total RSS over one scenario
BAD_INPUT_S = 10  # a request at a size limit is answered within this (measured: <= 1.1 s)
WORKERS = ("prefill-0", "prefill-1", "decode-0", "decode-1")


def rss_mib(pids):
    total = 0
    for pid in pids:
        try:
            for line in open(f"/proc/{pid}/status"):
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


class Campaign:
    def __init__(self, args, model, pb, pb_grpc):
        self.args, self.model, self.pb, self.pb_grpc = args, model, pb, pb_grpc
        self.rows = []

    def cluster(self, name, restart, model=None, scheduler_flags="--decode_stall_s=1", size=2):
        work = pathlib.Path(self.args.work) / name
        work.mkdir(parents=True, exist_ok=True)
        # Prefill workers keep a published prompt fetchable --retain_s: 1 s
        # here, so that the page check after the load sees them at rest.
        c = Cluster(self.args, model or self.model, work,
                    ["--prefill", str(size), "--decode", str(size),
                     f"--restart={str(restart).lower()}",
                     f"--scheduler_flags={scheduler_flags}", "--prefill_flags=--retain_s=1"])
        c.start()
        return c

    def generate(self, cluster, timeout=5.0, **fields):
        """One unary Generate; (grpc code name, seconds, error message or "")."""
        stub = self.pb_grpc.GenerationStub(grpc.insecure_channel(cluster.address))
        req = self.pb.GenerateRequest(max_tokens=fields.pop("max_tokens", 4), **fields)
        if "text" not in fields and not req.HasField("token_ids"):
            req.token_ids.ids.extend([5, 6, 7, 8])
        t = time.monotonic()
        try:
            stub.GenerateUnary(req, timeout=timeout)
            return "OK", time.monotonic() - t, ""
        except grpc.RpcError as e:
            return e.code().name, time.monotonic() - t, e.details() or ""

    def bench(self, cluster, requests, rate, concurrency):
        out = pathlib.Path(self.args.work) / f"bench-{time.monotonic_ns()}.json"
        cmd = [self.args.kvcast, "bench", "--scheduler", cluster.address, "--requests",
               str(requests), "--rate", str(rate), "--concurrency", str(concurrency), "--prefixes", "4",
               "--prefix_tokens", "256", "--suffix_tokens", "16", "--max_tokens", "32",
               "--deadline_s", str(DEADLINE_S), "--allow_failures", "--json", str(out)]
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True), out

    def pages_leaked(self, cluster, live):
        leaked = {}
        for name in live:
            if name not in cluster.metrics:
                continue
            for _ in range(60):
                used = scrape(cluster.metrics[name], "kvcast_kv_pages_used")
                held = scrape(cluster.metrics[name], "kvcast_prefix_cache_chunks") * PAGES_PER_CHUNK
                if used == held:
                    break
                time.sleep(0.1)
            if used != held:
                leaked[name] = used - held
        return leaked

    def run(self, name, fault=None, load=None, probe=None, restart=False, max_failed=0,
            first=None, model=None, scheduler_flags="--decode_stall_s=1", size=2):
        """Load + `fault()` (which returns the name of a process it killed,
        or None); returns after checking, and records the row. `restart`:
        `cluster up` restarts processes that exit. `max_failed`: requests
        the fault may fail with a clear error (0 but where a row says why).
        `first(c)`: a request sent to the fresh cluster before the load
        (its dict joins the row). `size`: prefill and decode workers each."""
        c = self.cluster(name, restart, model, scheduler_flags, size)
        try:
            before = first(c) if first else {}
            pids = dict(c.pids)
            rss_before = rss_mib(pids.values())
            load, out = self.bench(c, **(load or LOAD))
            time.sleep(FAULT_AT_S)
            t_fault = time.monotonic()
            killed = fault(c) if fault else None
            recovery = 0.0
            while True:
                code, _, _ = self.generate(c, timeout=5)
                if code == "OK":
                    recovery = time.monotonic() - t_fault
                    break
                if time.monotonic() - t_fault > 30:
                    recovery = float("inf")
                    break
                time.sleep(0.1)
            try:
                load.wait(timeout=DEADLINE_S * 4)
            except subprocess.TimeoutExpired:
                load.kill()
                raise CheckError("kvcast bench itself did not finish")
            report = json.loads(out.read_text())
            hung = sum(n for err, n in report["errors"].items() if "DEADLINE_EXCEEDED" in err)
            failed = report["requests_failed"] - hung
            extra = {**before, **(probe(c) if probe else {})}
            hung += extra.get("hung", 0)
            crashed = [n for n, pid in pids.items() if n != killed and not alive(pid)]
            live = [n for n in WORKERS if n in pids and n != killed and alive(pids[n])]
            leaked = self.pages_leaked(c, live)
            rss_after = rss_mib(pid for n, pid in pids.items() if n != killed)
            row = {"scenario": name, "ok": report["requests_ok"], "failed": failed, "hung": hung,
                   "recovery_s": recovery, "leaked_pages": leaked, "crashed": crashed,
                   "rss_before_mib": rss_before, "rss_after_mib": rss_after,
                   "errors": report["errors"], **{k: v for k, v in extra.items() if k != "hung"}}
            self.rows.append(row)
            log(json.dumps(row))
            expect(hung == 0, f"{hung} requests hung past their deadline: {report['errors']}")
            # Killed and frozen workers and relays cost retries, not requests.
            expect(failed <= max_failed,
                   f"{failed} of {report['requests_ok'] + report['requests_failed']} requests "
                   f"failed (at most {max_failed} may): {report['errors']}")
            expect(not crashed, f"crashed: {crashed}")
            expect(not leaked, f"pages leaked: {leaked}")
            expect(recovery < 30, "no request succeeded within 30 s of the fault")
            expect(rss_after - rss_before < RSS_LIMIT_MIB,
                   f"RSS grew {rss_before:.0f} -> {rss_after:.0f} MiB")
        finally:
            heal_partition()
            for pid in c.pids.values():  # nothing stays stopped
                try:
                    os.kill(pid, signal.SIGCONT)
                except OSError:
                    pass
            try:
                c.stop()
            except CheckError as e:
                log(f"stop: {e}")

    # ---- faults ---------------------------------------------------------------
    @staticmethod
    def kill(name):
        def fault(c):
            os.kill(c.pids[name], signal.SIGKILL)
            return name
        return fault

    @staticmethod
    def freeze(name):
        """SIGSTOP now, SIGCONT FREEZE_S later (from a timer: the recovery
        probe runs while the process is stopped)."""
        def fault(c):
            pid = c.pids[name]
            os.kill(pid, signal.SIGSTOP)
            threading.Timer(FREEZE_S, lambda: os.kill(pid, signal.SIGCONT)).start()
            return None
        return fault

    @staticmethod
    def partition(name):
        """Drops every packet to or from `name`'s sockets for FREEZE_S s:
        nft sets of its TCP and UDP ports, refreshed every 50 ms from
        /proc (it opens new sockets while cut off), then the table goes."""
        def fault(c):
            pid = c.pids[name]
            dropped.pop(name, None)
            nft("add table inet kvchaos")
            for proto in ("tcp", "udp"):
                nft(f"add set inet kvchaos {proto}_ports {{ type inet_service; }}")
            nft("add chain inet kvchaos input { type filter hook input priority 0; policy accept; }")
            for proto in ("tcp", "udp"):
                for field in ("dport", "sport"):
                    nft(f"add rule inet kvchaos input {proto} {field} @{proto}_ports counter drop")
            until = time.monotonic() + FREEZE_S

            def refresh():
                while time.monotonic() < until:
                    for proto, ports in socket_ports(pid).items():
                        if ports:
                            nft(f"add element inet kvchaos {proto}_ports {{ {', '.join(map(str, ports))} }}",
                                check=False)
                    time.sleep(0.05)
                dropped[name] = sum(map(int, re.findall(r"counter packets (\d+)", nft("list table inet kvchaos"))))
                heal_partition()
            threading.Thread(target=refresh, daemon=True).start()
            return None
        return fault

    @staticmethod
    def back_in_service(name):
        """Probe after `cluster up` restarted `name`: it runs again, and the
        scheduler lists all 4 workers (scheduler) or every worker reports
        its relay session up (relay), within 15 s."""
        def probe(c):
            pid = c.restarted_pid(name)
            expect(alive(pid), f"restarted {name} (pid {pid}) is not running")
            if name == "scheduler":
                took = wait_for("4 workers registered with the restarted scheduler", lambda: all(
                    scrape(c.metrics["scheduler"], "kvcast_workers", {"role": r}) == 2
                    for r in ("prefill", "decode")), 15)
            else:
                took = wait_for("every worker connected to the restarted relay", lambda: all(
                    scrape(c.metrics[w], "kvcast_relay_connected") == 1 for w in WORKERS), 15)
            return {"back_in_service": f"{name} restarted as pid {pid}; ready {took:.2f} s after the load"}
        return probe

    def bad_inputs(self, c):
        """Each request at a size limit ends as it must, well within its
        deadline: refused (INVALID_ARGUMENT naming what is wrong) or served."""
        cases = {  # what: (fields, code, a substring of the error message)
            "1e6 prompt ids": (dict(token_ids=self.pb.TokenIds(ids=[7] * 1_000_000)),
                               "INVALID_ARGUMENT", "prompt has 1000000 tokens"),
            "10 MB text prompt": (dict(text="a" * (10 << 20)), "INVALID_ARGUMENT", "prompt has"),
            "1,000 stop strings": (dict(stop=[f"stop{i}" for i in range(1000)]), "OK", ""),
            "1 MB stop string": (dict(stop=["x" * (1 << 20)]), "OK", ""),
            "max_tokens 2^31-1": (dict(max_tokens=2**31 - 1), "INVALID_ARGUMENT", "max_tokens"),
        }
        results, hung = {}, 0
        for what, (fields, want_code, want_text) in cases.items():
            code, secs, message = self.generate(c, timeout=DEADLINE_S, **fields)
            results[what] = f"{code} in {secs:.2f} s" + (f": {message[:80]}" if message else "")
            hung += code == "DEADLINE_EXCEEDED"
            expect(code == want_code and want_text in message,
                   f"{what}: {code} {message[:200]!r}, want {want_code} naming {want_text!r}")
            expect(secs < BAD_INPUT_S, f"{what}: answered in {secs:.2f} s (bound {BAD_INPUT_S} s)")
        return {"hung": hung, "bad_inputs": results}

    def long_first(self, c):
        """The fresh cluster's first request: an 8,000-token prompt whose
        prefill takes seconds, under stall bounds of 1 s. It succeeds at the
        first attempt (no retry, no stall counted)."""
        ids = [10 + (i * 37 + (i * i) % 17) % 490 for i in range(8000)]
        stub = self.pb_grpc.GenerationStub(grpc.insecure_channel(c.address))
        t = time.monotonic()
        result = stub.GenerateUnary(self.pb.GenerateRequest(
            token_ids=self.pb.TokenIds(ids=ids), max_tokens=4, ignore_eos=True), timeout=120)
        took = time.monotonic() - t
        stalls = sum(scrape(c.metrics["scheduler"], "kvcast_stalls_total", {"phase": p})
                     for p in ("prefill", "decode"))
        expect(result.final.retries == 0, f"the long first request was retried "
               f"{result.final.retries} times")
        expect(stalls == 0, f"{stalls} stalls counted for a slow but live worker")
        expect(took > 2, f"the long prompt took {took:.1f} s: not past the 1 s bounds")
        return {"long_first": f"8,000 tokens in {took:.1f} s, {result.final.retries} retries, "
                              f"{stalls:.0f} stalls"}

    def datagrams(self, c):
        """2,000 random datagrams (1..1,500 bytes) at every UDP port."""
        rng = random.Random(7)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sent = 0
        for name, addr in c.moqt.items():
            host, port = addr.rsplit(":", 1)
            for _ in range(2000):
                s.sendto(rng.randbytes(rng.randint(1, 1500)), (host, int(port)))
                sent += 1
        s.close()
        code, _, _ = self.generate(c, timeout=DEADLINE_S)
        expect(code == "OK", f"after the datagrams a request got {code}")
        return {"datagrams": f"{sent} to {len(c.moqt)} ports, then a request: {code}"}


def nft(command, check=True):
    p = subprocess.run(["nft", command], capture_output=True, text=True, timeout=10)
    if check:
        expect(p.returncode == 0, f"nft {command}: {p.stderr.strip()}")
    return p.stdout


dropped = {}  # worker -> packets its partition dropped


def partitioned(name):
    """Probe: the partition of `name` really cut it off (packets dropped)."""
    def probe(c):
        wait_for(f"the partition of {name} to heal", lambda: name in dropped, FREEZE_S + 10)
        expect(dropped[name] > 0, f"the partition of {name} dropped no packet")
        return {"partition": f"{name}: {dropped[name]} packets dropped in {FREEZE_S} s"}
    return probe


def heal_partition():
    if shutil.which("nft"):
        subprocess.run(["nft", "delete table inet kvchaos"], capture_output=True, timeout=10)


def socket_ports(pid):
    """{"tcp": ports, "udp": ports} of the sockets `pid` has open."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    except OSError:
        return {}
    out = {"tcp": set(), "udp": set()}
    for proto in out:
        for table_name in (proto, proto + "6"):
            try:
                lines = open(f"/proc/net/{table_name}").read().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                cols = line.split()
                if len(cols) > 9 and cols[9] in inodes:
                    out[proto].add(int(cols[1].rsplit(":", 1)[1], 16))
    return out


def own_network_namespace():
    """Re-executes this script in a new network namespace when root (once);
    returns None inside it, else why the partitions cannot run."""
    if os.environ.get("KVCAST_CHAOS_NETNS") == "1":
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True, timeout=10)
        if not shutil.which("nft"):
            return "no nft (Debian's nftables) on PATH"
        p = subprocess.run(["nft", "list tables"], capture_output=True, text=True, timeout=10)
        return None if p.returncode == 0 else f"nft does not work here: {p.stderr.strip()}"
    if os.geteuid() != 0:
        return "not root: no network namespace of its own"
    if subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=10).returncode:
        return "unshare --net failed"
    os.environ["KVCAST_CHAOS_NETNS"] = "1"
    os.execvp("unshare", ["unshare", "--net", "--", sys.executable, *sys.argv])
    return "unreachable"


def table(rows):
    out = ["| scenario | requests ok / failed / hung | recovery s | leaked pages | crashes | RSS MiB before -> after |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['scenario']} | {r['ok']} / {r['failed']} / {r['hung']} | "
                   f"{r['recovery_s']:.2f} | {sum(r['leaked_pages'].values()) if r['leaked_pages'] else 0} | "
                   f"{len(r['crashed'])} | {r['rss_before_mib']:.0f} -> {r['rss_after_mib']:.0f} |")
    return "\n".join(out)


def main():
    args = parse_cluster_test_args()
    no_partition = own_network_namespace()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = pathlib.Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    args.work = str(work)
    runner = Runner("chaos")
    state = {}

    def setup():
        stubs = work / "stubs"
        env = dict(os.environ, PROTO_ROOT=args.proto_root, PYTHON=sys.executable)
        p = subprocess.run(["bash", args.gen_stubs, str(stubs)], env=env, capture_output=True,
                           text=True, timeout=60)
        expect(p.returncode == 0, f"gen_python_stubs.sh failed:\n{p.stdout}{p.stderr}")
        sys.path.insert(0, str(stubs))
        from kvcast.v1 import generation_pb2, generation_pb2_grpc  # noqa: E402 - generated above
        model = work / "tiny_model"
        p = subprocess.run([args.make_tiny_model, f"--out={model}"], capture_output=True,
                           text=True, timeout=120)
        expect(p.returncode == 0, f"make_tiny_model failed:\n{p.stderr}")
        state["campaign"] = Campaign(args, model, generation_pb2, generation_pb2_grpc)
        wide = work / "wide_model"  # its prefill of thousands of tokens takes seconds
        p = subprocess.run([args.make_tiny_model, f"--out={wide}", "--hidden_size=768",
                            "--intermediate_size=2048", "--num_layers=8", "--num_heads=12",
                            "--num_kv_heads=4", "--max_position_embeddings=8192"],
                           capture_output=True, text=True, timeout=120)
        expect(p.returncode == 0, f"make_tiny_model (wide) failed:\n{p.stderr}")
        state["wide_model"] = wide

    if runner.run("setup", setup):
        c = state["campaign"]
        scenarios = [
            ("baseline", dict()),
            ("kill -9 decode-0", dict(fault=c.kill("decode-0"))),
            (f"SIGSTOP decode-0 {FREEZE_S} s", dict(fault=c.freeze("decode-0"))),
            ("kill -9 prefill-0", dict(fault=c.kill("prefill-0"))),
            (f"SIGSTOP prefill-0 {FREEZE_S} s", dict(fault=c.freeze("prefill-0"))),
            ("kill -9 relay", dict(fault=c.kill("relay"))),
            (f"SIGSTOP relay {FREEZE_S} s", dict(fault=c.freeze("relay"))),
            ("kill -9 relay, restarted", dict(fault=c.kill("relay"), restart=True,
                                              probe=c.back_in_service("relay"))),
            (f"SIGSTOP scheduler {FREEZE_S} s", dict(fault=c.freeze("scheduler"))),
            # A stream the killed scheduler had begun answering cannot be
            # retried (the client retries only calls never answered): at most
            # the requests in flight may fail.
            ("kill -9 scheduler, restarted", dict(fault=c.kill("scheduler"), restart=True,
                                                  probe=c.back_in_service("scheduler"),
                                                  max_failed=LOAD["concurrency"])),
            (f"partition decode-0 {FREEZE_S} s", dict(fault=c.partition("decode-0"),
                                                      probe=partitioned("decode-0"))),
            (f"partition prefill-0 {FREEZE_S} s", dict(fault=c.partition("prefill-0"),
                                                       probe=partitioned("prefill-0"))),
            ("flood: 200 concurrent", dict(load=dict(requests=200, rate=0, concurrency=200))),
            ("bad inputs at the size limits", dict(probe=c.bad_inputs)),
            ("random datagrams at every UDP port", dict(probe=c.datagrams)),
            # 1 + 1 workers: 4 calibrating at once on 2 cores would time
            # their chunks several times too slow, and the stall bounds
            # scaled by that would outlast the prompt even without progress.
            ("long prompt first, 1 s stall bounds", dict(
                first=c.long_first, model=state["wide_model"], size=1,
                scheduler_flags="--decode_stall_s=1 --prefill_stall_s=1 --decode_first_message_s=1",
                load=dict(requests=60, rate=10, concurrency=4))),
        ]
        for name, kw in scenarios:
            if name.startswith("partition") and no_partition:
                runner.skip(name, no_partition)
                continue
            runner.run(name, lambda name=name, kw=kw: c.run(name, **kw))
        print(table(c.rows))
        for r in c.rows:
            for key in ("bad_inputs", "datagrams", "back_in_service", "partition", "long_first"):
                if key in r:
                    print(f"{r['scenario']}: {r[key]}")
        # The rows as a result file (tools/report): beside the work files,
        # and where Bazel keeps a test's outputs (bazel-testlogs/.../test.outputs).
        rows = json.loads(json.dumps(c.rows, default=str))
        for out in {work, pathlib.Path(os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", work))}:
            results.write(str(out / "chaos.json"), results.header("chaos_test"), rows,
                          load=LOAD, freeze_s=FREEZE_S, fault_at_s=FAULT_AT_S)
    return runner.finish(args.xml)


if __name__ == "__main__":
    sys.exit(main())
