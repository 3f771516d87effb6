"""Loopback rehearsal: the chart's configuration is one the binaries accept.

Renders the chart (Helm's own engine, as the other chart tests) with the CPU
backend on both workers, takes each role's container command, args and env
exactly as rendered, and substitutes only what a pod has and this machine
does not:

- the image's /usr/local/bin/kvcast-* -> the binary built in this tree;
- a listen address (listenHost:PORT, PORT one of the container's ports) and
  a Service address (<svc>.<namespace>.svc:PORT) -> 127.0.0.1 and a free
  port per (role, container port), the Service resolved through its
  selector and targetPort as kube-proxy would;
- a volume's mount path -> a local directory: the model volume -> a tiny
  model (//tools/tiny_model:make_tiny_model, made read-only), a Secret ->
  development certificates (//tools/devcert:kvcast-devcert) under the
  Secret's key names, an emptyDir -> an empty directory;
- the downward API's pod or host IP -> 127.0.0.1, then $(VAR) in args
  expanded from the container's env, as the kubelet does.

Anything else in a command line is passed unchanged, and an address or path
that fits none of these fails the test. It then starts the four roles at
once (as pods would start), waits until the scheduler's /metrics reports
both workers (kvcast_workers{role=...}), checks that every probe's port
answers as its probe expects (grpc.health.v1 SERVING) and every scrape
annotation's port serves /metrics, runs `kvcast generate --scheduler` with
--prompt_ids, and stops the roles with SIGTERM, each to exit 0 within
STOP_S. Every wait is bounded. Logs: $TEST_UNDECLARED_OUTPUTS_DIR.

Run by run_in_venv.sh with the venv from setup_deploy_venv.sh.
"""
import os
import pathlib
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import unittest
import urllib.request

import kvtest
from kvtest import container, find

# Values of the rehearsal: the CPU backend (the only one this build has),
# KV pools that fit a test machine and, on decode and the relay, disk KV
# tiers; everything
# else is values.yaml's.
VALUES = {
    # The planner every second, so that its metric is there to read.
    "scheduler": {"planner": {"intervalSeconds": 1, "sloTtftMs": 2000, "sloItlMs": 100}},
    "prefill": {"backend": "cpu", "kvCacheMB": 64},
    # The decode worker with both KV tiers below its pool (the disk tier on
    # its emptyDir).
    "decode": {"backend": "cpu", "kvCacheMB": 64, "kvHostTierMB": 16, "kvDiskTier": {"mb": 64}},
    "relay": {"kvDiskTier": {"mb": 64}},
}
# Image path of each binary -> its place in this test's runfiles.
BINARIES = {
    "/usr/local/bin/kvcast-scheduler": "services/scheduler/kvcast-scheduler",
    "/usr/local/bin/kvcast-prefill": "services/prefill/kvcast-prefill",
    "/usr/local/bin/kvcast-decode": "services/decode/kvcast-decode",
    "/usr/local/bin/kvcast-relay": "services/relay/kvcast-relay",
}
CLI = "tools/cli/kvcast"
MAKE_TINY_MODEL = "tools/tiny_model/make_tiny_model"
DEVCERT = "tools/devcert/kvcast-devcert"
# A Secret key -> the kvcast-devcert file it is made of.
DEVCERT_FILES = {"tls.crt": "server.pem", "tls.key": "server-key.pem", "ca.crt": "ca.pem",
                 "moqt-auth.key": "moqt-auth.key"}
# Downward API fields that are this machine's address here.
LOOPBACK_FIELDS = {"status.podIP", "status.hostIP"}
START_ORDER = ("relay", "scheduler", "prefill", "decode")  # all at once, in effect

REGISTER_S = 30  # the scheduler reports both workers
GENERATE_S = 20  # kvcast generate finishes
STOP_S = 10      # SIGTERM -> exit 0
MAX_TOKENS = 8
PROMPT_IDS = [10 + (7 * i) % 400 for i in range(150)]  # a full 128-token chunk and more


def free_port(kind: int) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def labels_match(selector: dict, labels: dict) -> bool:
    return selector.items() <= labels.items()


class Pods:
    """The rendered Deployments turned into local command lines."""

    def __init__(self, objs, work: pathlib.Path, model_dir: pathlib.Path, certs: pathlib.Path):
        self.objs, self.work, self.model_dir, self.certs = objs, work, model_dir, certs
        self.listen_host = kvtest.chart().values["listenHost"]
        self.ports = {}  # (role, containerPort) -> local port
        self.deployments = {}
        for role in START_ORDER:
            (d,) = find(objs, "Deployment", role)
            self.deployments[role] = d
            for p in container(d)["ports"]:
                kind = socket.SOCK_DGRAM if p.get("protocol", "TCP") == "UDP" else socket.SOCK_STREAM
                self.ports[(role, p["containerPort"])] = self._unique_port(kind)
        self.volume_dirs = {}  # (role, mountPath) -> local directory
        for role, d in self.deployments.items():
            vols = {v["name"]: v for v in d["spec"]["template"]["spec"]["volumes"]}
            for m in container(d)["volumeMounts"]:
                self.volume_dirs[(role, m["mountPath"])] = self._volume(role, vols[m["name"]])

    def _unique_port(self, kind) -> int:
        for _ in range(100):
            port = free_port(kind)
            if port not in self.ports.values():
                return port
        raise RuntimeError("no free port")

    def _volume(self, role, vol) -> pathlib.Path:
        if vol["name"] == "model":  # pvc, hostPath, or emptyDir filled by the init container
            return self.model_dir
        if "secret" in vol:
            out = self.work / "secrets" / vol["secret"]["secretName"]
            if not out.is_dir():
                out.mkdir(parents=True)
                for key, src in DEVCERT_FILES.items():
                    shutil.copy(self.certs / src, out / key)
                    (out / key).chmod(0o440)  # the chart's defaultMode
            return out
        if "emptyDir" in vol:
            out = self.work / "emptydir" / role / vol["name"]
            out.mkdir(parents=True, exist_ok=True)
            return out
        raise AssertionError(f"{role}: volume {vol['name']} has a kind the rehearsal cannot stand in for: {vol}")

    def container_port(self, role, port_spec):
        """A container port of a role by number or name."""
        for p in container(self.deployments[role])["ports"]:
            if port_spec in (p["containerPort"], p["name"]):
                return p["containerPort"]
        raise AssertionError(f"{role} has no container port {port_spec!r}")

    def service_address(self, host: str, port: int) -> str:
        """<svc>[.<ns>[.svc[.cluster.local]]]:PORT -> 127.0.0.1:LOCAL, through the
        Service's selector and targetPort."""
        name = host.split(".")[0]
        services = [s for s in find(self.objs, "Service") if s["metadata"]["name"] == name]
        if not services:
            return None
        (svc,) = services
        sport = [p for p in svc["spec"]["ports"] if p["port"] == port]
        assert sport, f"Service {name} has no port {port}"
        target = sport[0].get("targetPort", port)
        roles = [r for r, d in self.deployments.items()
                 if labels_match(svc["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"])]
        assert len(roles) == 1, f"Service {name} selects {roles}"
        cport = self.container_port(roles[0], target)
        return f"127.0.0.1:{self.ports[(roles[0], cport)]}"

    def env(self, role) -> dict:
        out = {}
        for e in container(self.deployments[role]).get("env", []):
            if "value" in e:
                out[e["name"]] = str(e["value"])
            else:
                field = e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
                assert field in LOOPBACK_FIELDS, f"{role}: env {e} is not something the rehearsal stands in for"
                out[e["name"]] = "127.0.0.1"
        return out

    def substitute(self, role, value: str) -> str:
        m = re.fullmatch(r"(\[[^\]]*\]|[^:/\[\]]+):(\d+)", value)
        if m:
            host, port = m.group(1), int(m.group(2))
            if host == self.listen_host:
                assert (role, port) in self.ports, f"{role} listens on {value}, not one of its container ports"
                return f"127.0.0.1:{self.ports[(role, port)]}"
            local = self.service_address(host, port)
            assert local, f"{role}: {value} names no Service of the release"
            return local
        if value.startswith("/"):
            for (r, mount), local in self.volume_dirs.items():
                if r == role and (value == mount or value.startswith(mount.rstrip("/") + "/")):
                    return str(local) + value[len(mount.rstrip("/")):]
            raise AssertionError(f"{role}: {value} is in no volume the pod mounts")
        assert ".svc" not in value, f"{role}: {value}"
        return value

    def command(self, role) -> list:
        c = container(self.deployments[role])
        (image_bin,) = c["command"]
        env = self.env(role)

        def expand(arg):  # the kubelet's $(VAR) expansion; $$ escapes
            return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                          lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), arg)

        args = []
        for arg in c["args"]:
            arg = expand(arg)
            name, eq, value = arg.partition("=")
            assert name.startswith("--") and eq, f"{role}: {arg} is not --flag=value"
            args.append(f"{name}={self.substitute(role, value)}")
        return [str(kvtest.runfile(BINARIES[image_bin]))] + args, env

    def local(self, role, port_spec) -> int:
        return self.ports[(role, self.container_port(role, port_spec))]


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
        return r.read().decode()


def metric(text: str, name: str, labels: dict = None):
    want = ",".join(f'{k}="{v}"' for k, v in (labels or {}).items())
    for line in text.splitlines():
        m = re.fullmatch(rf"{name}(?:\{{([^}}]*)\}})?\s+(\S+)", line.strip())
        if m and (m.group(1) or "") == want:
            return float(m.group(2))
    return None


def grpc_health(port: int, timeout: float = 3.0) -> int:
    """grpc.health.v1.Health/Check(service "") over plaintext HTTP/2, what the
    kubelet's gRPC probe sends; returns the response's status (1: SERVING).
    HPACK: literal header fields without indexing (no Huffman)."""
    def frame(ftype, flags, stream, payload=b""):
        return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload

    def header(name, value):
        name, value = name.encode(), value.encode()
        assert len(name) < 127 and len(value) < 127
        return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value

    block = b"".join(header(k, v) for k, v in (
        (":method", "POST"), (":scheme", "http"), (":path", "/grpc.health.v1.Health/Check"),
        (":authority", f"127.0.0.1:{port}"), ("content-type", "application/grpc"), ("te", "trailers")))
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(0x4, 0, 0)
                  + frame(0x1, 0x4, 1, block)                 # HEADERS, END_HEADERS
                  + frame(0x0, 0x1, 1, b"\x00\x00\x00\x00\x00"))  # DATA: empty request, END_STREAM
        buf, data = b"", b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
                n = int.from_bytes(buf[:3], "big")
                ftype, flags, stream = buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
                payload, buf = buf[9:9 + n], buf[9 + n:]
                if ftype == 0x4 and not flags & 0x1:
                    s.sendall(frame(0x4, 0x1, 0))  # SETTINGS ACK
                elif ftype == 0x0 and stream == 1:
                    data += payload
                    if len(data) >= 5 and len(data) >= 5 + int.from_bytes(data[1:5], "big"):
                        msg = data[5:5 + int.from_bytes(data[1:5], "big")]
                        # HealthCheckResponse: field 1 (status), varint.
                        return msg[1] if msg[:1] == b"\x08" else 0
                elif ftype == 0x7 or (ftype == 0x3 and stream == 1):
                    raise AssertionError(f"port {port}: GOAWAY/RST_STREAM {payload.hex()}")
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    raise AssertionError(f"port {port}: no grpc.health.v1 response")


class Rehearsal(unittest.TestCase):
    procs = {}
    stop_codes = {}

    @classmethod
    def setUpClass(cls):
        t0 = time.monotonic()
        cls.work = pathlib.Path(tempfile.mkdtemp(prefix="rehearsal-", dir=os.environ.get("TEST_TMPDIR")))
        cls.logs = pathlib.Path(os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", cls.work))
        model = cls.work / "model"
        subprocess.run([str(kvtest.runfile(MAKE_TINY_MODEL)), f"--out={model}"], check=True, timeout=60)
        # The model volume is mounted read-only.
        for p in [model, *model.rglob("*")]:
            p.chmod(p.stat().st_mode & ~0o222)
        certs = cls.work / "devcert"
        # The names the chart's own development certificate carries that
        # matter here: 127.0.0.1 (every Service) and tls.internal.workerName.
        names = f"localhost,127.0.0.1,{kvtest.chart().values['tls']['internal']['workerName']}"
        subprocess.run([str(kvtest.runfile(DEVCERT)), f"--out={certs}", f"--names={names}"],
                       check=True, timeout=30,
                       stdout=subprocess.DEVNULL)
        cls.pods = Pods(kvtest.objects(kvtest.render(VALUES)), cls.work, model, certs)
        cls.commands = {role: cls.pods.command(role) for role in START_ORDER}
        cwd = cls.work / "cwd"
        cwd.mkdir()
        cwd.chmod(0o555)  # a read-only root filesystem, roughly
        try:
            for role in START_ORDER:
                argv, env = cls.commands[role]
                print(f"{role}: {' '.join(argv[1:])}")
                log = open(cls.logs / f"{role}.log", "wb")
                env = {"PATH": "/usr/bin:/bin", "HOME": str(cls.work), **env}
                cls.procs[role] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                                   stderr=subprocess.STDOUT, cwd=cwd, env=env,
                                                   start_new_session=True)
                log.close()
            cls.metrics_port = cls.pods.local("scheduler", "metrics")
            cls.wait_for_workers()
        except BaseException:
            cls.kill_all()
            raise
        print(f"started and registered in {time.monotonic() - t0:.1f} s")

    @classmethod
    def tearDownClass(cls):
        cls.kill_all()
        # Let Bazel delete TEST_TMPDIR.
        for p in cls.work.rglob("*"):
            if p.is_dir():
                p.chmod(0o755)
        (cls.work / "cwd").chmod(0o755)

    @classmethod
    def kill_all(cls):
        for p in cls.procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    @classmethod
    def log_tail(cls, role, n=2500) -> str:
        text = (cls.logs / f"{role}.log").read_text(errors="replace")
        return f"--- {role}.log (last {n} bytes):\n{text[-n:]}"

    @classmethod
    def check_running(cls):
        for role, p in cls.procs.items():
            if p.poll() is not None:
                raise AssertionError(f"{role} exited with {p.returncode} on the chart's command line "
                                     f"{cls.commands[role][0][1:]}\n{cls.log_tail(role)}")

    @classmethod
    def wait_for_workers(cls):
        deadline, last = time.monotonic() + REGISTER_S, "no scrape yet"
        while time.monotonic() < deadline:
            cls.check_running()
            try:
                text = scrape(cls.metrics_port)
                got = {r: metric(text, "kvcast_workers", {"role": r}) for r in ("prefill", "decode")}
                if got == {"prefill": 1, "decode": 1}:
                    return
                last = str(got)
            except OSError as e:
                last = str(e)
            time.sleep(0.2)
        raise AssertionError(f"after {REGISTER_S} s the scheduler reports kvcast_workers {last}\n"
                             + "\n".join(cls.log_tail(r) for r in START_ORDER))

    def test_1_command_lines_are_the_rendered_ones(self):
        for role in START_ORDER:
            rendered = container(self.pods.deployments[role])["args"]
            argv, _ = self.commands[role]
            self.assertEqual([a.partition("=")[0] for a in argv[1:]],
                             [a.partition("=")[0] for a in rendered], role)
            for arg in argv[1:]:
                self.assertNotRegex(arg, r"\.svc\b|/etc/kvcast|=/model\b|\$\(", role)
        self.assertIn("--backend=cpu", self.commands["prefill"][0])

    def test_2_probes_answer(self):
        for role in START_ORDER:
            c = container(self.pods.deployments[role])
            for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
                probe = c[kind]
                if "grpc" in probe:
                    port = self.pods.local(role, probe["grpc"]["port"])
                    self.assertEqual(grpc_health(port), 1, f"{role} {kind}: not SERVING")
                else:
                    with socket.create_connection(("127.0.0.1", self.pods.local(role, probe["tcpSocket"]["port"])),
                                                  timeout=2):
                        pass

    def test_3_scrape_annotations_serve_metrics(self):
        for role in START_ORDER:
            d = self.pods.deployments[role]
            port = int(d["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"])
            text = scrape(self.pods.ports[(role, port)])
            self.assertIn("kvcast_", text, role)

    def generate(self, *flags):
        port = self.pods.local("scheduler", "grpc")
        cmd = [str(kvtest.runfile(CLI)), "generate", f"--scheduler=127.0.0.1:{port}",
               f"--max_tokens={MAX_TOKENS}", "--ignore_eos", f"--deadline_s={GENERATE_S - 2}", *flags]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=GENERATE_S)
        except subprocess.TimeoutExpired:
            self.fail(f"kvcast generate took more than {GENERATE_S} s\n"
                      + "\n".join(self.log_tail(role) for role in START_ORDER))
        print(r.stdout + r.stderr)
        self.assertEqual(r.returncode, 0, r.stderr + "\n".join(self.log_tail(role) for role in START_ORDER))
        self.assertIn(f"generated {MAX_TOKENS} tokens", r.stderr)
        return r

    def test_4_generate(self):
        r = self.generate("--prompt_ids=" + ",".join(map(str, PROMPT_IDS)), "--ids")
        self.assertEqual(len(r.stdout.split()), MAX_TOKENS, r.stdout)
        self.assertIn(f"prompt {len(PROMPT_IDS)} tokens", r.stderr)
        # The KV went prefill -> relay -> decode (the relay waited for the
        # announce: --subscribe_wait_ms), not recomputed by the decode worker.
        moved = int(re.search(r"KV transfer (\d+) bytes", r.stderr).group(1))
        self.assertGreater(moved, 0, r.stderr)
        self.assertEqual(metric(scrape(self.pods.local("decode", "metrics")),
                                "kvcast_kv_transfer_failures_total"), 0)
        self.assertGreater(metric(scrape(self.pods.local("relay", "metrics")), "kvcast_relay_cache_tracks"), 0)
        # What an autoscaler on the planner reads (autoscaling.metric planner).
        deadline = time.monotonic() + 10
        while True:
            text = scrape(self.metrics_port)
            plan = {r: metric(text, "kvcast_planner_desired_replicas", {"role": r}) or 0
                    for r in ("prefill", "decode")}
            if all(v >= 1 for v in plan.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        print(f"kvcast_planner_desired_replicas: {plan}")
        self.assertGreaterEqual(plan["prefill"], 1, plan)
        self.assertGreaterEqual(plan["decode"], 1, plan)

    def test_4_generate_text(self):
        # Text needs the tokenizer: the scheduler's --model (the model volume).
        r = self.generate("--prompt=the quick brown fox")
        self.assertRegex(r.stderr, r"prompt [1-9]\d* tokens")

    def test_5_sigterm_exits_0(self):
        # The workers first, while the scheduler and the relay run (a rolling
        # update or scale-down of the workers), then those two.
        codes = type(self).stop_codes = {}
        for group in (("prefill", "decode"), ("scheduler", "relay")):
            for role in group:
                if self.procs[role].poll() is None:
                    os.killpg(self.procs[role].pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_S
            for role in group:
                try:
                    codes[role] = self.procs[role].wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    codes[role] = f"still running {STOP_S} s after SIGTERM"
        print(f"exit codes after SIGTERM: {codes}")
        bad = {r: c for r, c in codes.items() if c != 0}
        self.assertEqual(bad, {}, "\n".join(self.log_tail(r) for r in bad))


if __name__ == "__main__":
    kvtest.main(__name__)
