"""kvcast's public API seen by an independent client: PyPI's grpcio.

Generates the kvcast.v1 Python stubs from our .proto files with
tests/grpc/gen_python_stubs.sh, writes the tiny model with make_tiny_model,
starts `kvcast cluster up` (scheduler with --max_queue=4 + relay + 1 prefill
+ 1 decode on loopback) and checks, with grpcio only (no kvcast code):
  stream_matches_unary  streaming Generate (text prompt) == GenerateUnary
  prefix_reuse          a shared 300-token prefix is reported as cached
  tenant_isolation      the same prompt from another tenant: 0 cached tokens
  tenant_flood          one tenant's flood (--tenant_max_in_flight=2) leaves
                        room for another tenant
  workers_need_mutual_tls  a worker's gRPC port refuses plaintext and clients
                        without a certificate of the cluster's CA
  invalid_argument      bad requests end with INVALID_ARGUMENT + a message
  flood                 40 concurrent streams: only OK / RESOURCE_EXHAUSTED
  deadline              a 50 ms deadline ends the call, frees the slot
  health                grpc.health.v1 (hand-encoded) reports SERVING
  cluster_stops         SIGTERM stops `kvcast cluster up` cleanly, in time
Every wait is bounded. Writes one JUnit <testcase> per check to --xml and
exits 1 if any failed; on failure prints the cluster's logs.

Usage (see grpcio_client_test.sh): grpcio_client_test.py --xml OUT
  --work DIR --gen_stubs SH --proto_root DIR --kvcast BIN
  --make_tiny_model BIN --scheduler BIN --prefill BIN --decode BIN --relay BIN
"""
import concurrent.futures
import json
import math
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (CheckError, Cluster, Runner, expect, log, parse_cluster_test_args,  # noqa: E402
                     scrape, wait_for)

CHUNK = 128          # the scheduler's prefix-hash chunk (tokens)
MAX_QUEUE = 4        # --max_queue given to the scheduler
TENANT_MAX_IN_FLIGHT = 2  # --tenant_max_in_flight given to the scheduler
READY_TIMEOUT_S = 30  # then until health is SERVING and a request succeeds
RPC_TIMEOUT_S = 30    # every ordinary call

# --- grpc.health.v1 by hand -------------------------------------------------
# HealthCheckRequest { string service = 1; }
# HealthCheckResponse { ServingStatus status = 1; }  SERVING = 1

def encode_health_request(service):
    data = service.encode()
    return (b"\x0a" + encode_varint(len(data)) + data) if data else b""


def encode_varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def read_varint(buf, i):
    v, shift = 0, 0
    while True:
        if i >= len(buf):
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def decode_health_status(buf):
    """Field 1 (varint) of a HealthCheckResponse; 0 (UNKNOWN) when absent."""
    status, i = 0, 0
    while i < len(buf):
        key, i = read_varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            v, i = read_varint(buf, i)
            if field == 1:
                status = v
        elif wire == 2:
            n, i = read_varint(buf, i)
            i += n
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ValueError(f"wire type {wire} in a HealthCheckResponse")
    return status


SERVING = 1


def health_status(channel, service="", timeout=5):
    check = channel.unary_unary("/grpc.health.v1.Health/Check")  # bytes in, bytes out
    return decode_health_status(check(encode_health_request(service), timeout=timeout))


# --- the cluster ------------------------------------------------------------

# --- the checks -------------------------------------------------------------

class Checks:
    def __init__(self, pb, pb_grpc, channel, cluster, config):
        self.pb, self.channel, self.cluster = pb, channel, cluster
        self.stub = pb_grpc.GenerationStub(channel)
        self.vocab = int(config["vocab_size"])
        self.context = int(config["max_position_embeddings"])

    def ids(self, n, salt):
        """n deterministic token ids in [4, vocab), distinct per salt."""
        return [4 + (i * 131 + salt * 977 + (i * i * 7) % 101) % (self.vocab - 4) for i in range(n)]

    def request(self, *, text=None, ids=None, max_tokens=8, **kw):
        r = self.pb.GenerateRequest(max_tokens=max_tokens, ignore_eos=True, **kw)
        if text is not None:
            r.text = text
        if ids is not None:
            r.token_ids.ids.extend(ids)
        return r

    def stream(self, req, timeout=RPC_TIMEOUT_S):
        """(deltas, final) of a streaming Generate; checks the message order."""
        deltas, final = [], None
        for m in self.stub.Generate(req, timeout=timeout):
            kind = m.WhichOneof("kind")
            expect(final is None, f"a {kind} after the Final")
            if kind == "delta":
                deltas.append(m.delta)
            elif kind == "final":
                final = m.final
            else:
                raise CheckError(f"a GenerateResponse with no kind: {m}")
        expect(final is not None, "the stream ended without a Final")
        return deltas, final

    def check_final(self, final, max_tokens, where):
        pb = self.pb
        expect(final.finish_reason == pb.FINISH_REASON_LENGTH,
               f"{where}: finish_reason {pb.FinishReason.Name(final.finish_reason)}, want LENGTH")
        expect(final.usage.prompt_tokens > 0, f"{where}: usage.prompt_tokens {final.usage.prompt_tokens}")
        expect(final.usage.generated_tokens == max_tokens,
               f"{where}: usage.generated_tokens {final.usage.generated_tokens}, want {max_tokens}")
        expect(final.timings.ttft_ms > 0, f"{where}: timings.ttft_ms {final.timings.ttft_ms}")
        expect(final.timings.e2e_ms >= final.timings.ttft_ms,
               f"{where}: e2e_ms {final.timings.e2e_ms} < ttft_ms {final.timings.ttft_ms}")
        expect(final.decode_worker, f"{where}: decode worker not named")
        # Handed off (a prefill worker named, KV bytes landed) or run on the
        # decode worker alone (PD fusion: neither).
        expect(bool(final.prefill_worker) == (final.timings.transfer_bytes > 0),
               f"{where}: prefill worker {final.prefill_worker!r} with "
               f"{final.timings.transfer_bytes} KV bytes landed")

    def ready(self):
        """Health SERVING and one request OK, within READY_TIMEOUT_S."""
        def ok():
            if health_status(self.channel) != SERVING:
                return False
            r = self.stub.GenerateUnary(self.request(ids=[5, 6, 7], max_tokens=2), timeout=10)
            return len(r.token_ids) == 2
        took = wait_for("scheduler SERVING and a request OK", ok, READY_TIMEOUT_S)
        log(f"ready after {took:.2f} s")

    # 1.
    def stream_matches_unary(self):
        max_tokens = 24
        req = self.request(text="The quick brown fox jumps over the lazy dog. Once upon a time",
                           max_tokens=max_tokens, sampling=self.pb.SamplingParams(temperature=0),
                           request_id="py-stream-1")
        deltas, final = self.stream(req)
        expect(len(deltas) >= 1, "no Delta before the Final")
        ids = [t for d in deltas for t in d.token_ids]
        text = "".join(d.text for d in deltas)
        expect(len(ids) == max_tokens, f"{len(ids)} streamed token ids, want {max_tokens}")
        expect(all(0 <= t < self.vocab for t in ids), f"streamed ids outside the vocabulary: {ids}")
        self.check_final(final, max_tokens, "stream")
        expect(final.request_id == "py-stream-1", f"request_id {final.request_id!r} not echoed")
        req.request_id = "py-unary-1"
        unary = self.stub.GenerateUnary(req, timeout=RPC_TIMEOUT_S)
        expect(list(unary.token_ids) == ids,
               f"GenerateUnary token_ids {list(unary.token_ids)} != streamed {ids}")
        expect(unary.text == text, f"GenerateUnary text {unary.text!r} != streamed {text!r}")
        self.check_final(unary.final, max_tokens, "unary")
        expect(unary.final.usage.prompt_tokens == final.usage.prompt_tokens,
               f"prompt_tokens: unary {unary.final.usage.prompt_tokens}, stream {final.usage.prompt_tokens}")
        log(f"stream: {len(deltas)} deltas, {len(ids)} ids, prompt {final.usage.prompt_tokens} tokens, "
            f"ttft {final.timings.ttft_ms:.1f} ms, e2e {final.timings.e2e_ms:.1f} ms")

    # 2.
    def prefix_reuse(self):
        shared = self.ids(300, salt=1)
        a = shared + self.ids(20, salt=2)
        b = shared + self.ids(20, salt=3)
        expect(a[300:] != b[300:], "the tails must differ")
        ra = self.stub.GenerateUnary(self.request(ids=a, max_tokens=4), timeout=RPC_TIMEOUT_S)
        rb = self.stub.GenerateUnary(self.request(ids=b, max_tokens=4), timeout=RPC_TIMEOUT_S)
        ua, ub = ra.final.usage, rb.final.usage
        log(f"prefix reuse: first cached {ua.cached_prompt_tokens}/{ua.prompt_tokens}, "
            f"second cached {ub.cached_prompt_tokens}/{ub.prompt_tokens}")
        expect(ua.prompt_tokens == len(a) and ub.prompt_tokens == len(b),
               f"prompt_tokens {ua.prompt_tokens}, {ub.prompt_tokens}; want {len(a)}, {len(b)}")
        expect(ua.cached_prompt_tokens == 0,
               f"the first request reports {ua.cached_prompt_tokens} cached tokens of a prompt never seen")
        expect(ub.cached_prompt_tokens >= 2 * CHUNK,
               f"the second request reports {ub.cached_prompt_tokens} cached tokens; "
               f"want >= {2 * CHUNK} (2 shared chunks)")
        expect(ub.cached_prompt_tokens <= 300,
               f"{ub.cached_prompt_tokens} cached tokens, but only 300 are shared")

    def tenant_isolation(self):
        """A tenant reuses its own prefixes only: another tenant's identical
        prompt reports no cached tokens (nor gets them)."""
        prompt = self.ids(300, salt=7)

        def cached(tenant):
            r = self.stub.GenerateUnary(self.request(ids=prompt, max_tokens=2, tenant=tenant),
                                        timeout=RPC_TIMEOUT_S)
            return r.final.usage.cached_prompt_tokens
        first, other, again, other_again, default = (
            cached("alice"), cached("mallory"), cached("alice"), cached("mallory"), cached(""))
        log(f"tenants: alice {first} then {again} cached; mallory {other} then {other_again}; "
            f"no tenant {default}")
        expect(first == 0 and other == 0 and default == 0,
               f"cached across tenants: alice {first}, mallory {other}, default {default}")
        expect(again >= 2 * CHUNK and other_again >= 2 * CHUNK,
               f"a tenant's own prefix not reused: alice {again}, mallory {other_again}")

    def tenant_flood(self):
        """One tenant's flood takes at most --tenant_max_in_flight of the
        scheduler's --max_queue slots: another tenant still gets in. The
        prefill workers are frozen (SIGSTOP) while it runs, so the admitted
        flood requests stay in flight however fast the model is; the calm
        tenant's short prompt runs on the decode worker alone (PD fusion)."""
        n = 8
        barrier = threading.Barrier(n, timeout=30)

        def flood(i):
            req = self.request(ids=self.ids(1000, salt=200 + i), max_tokens=40, tenant="flood")
            barrier.wait()
            try:
                self.stream(req, timeout=90)
                return "OK", ""
            except grpc.RpcError as e:
                return e.code().name, e.details()

        metrics = self.cluster.metrics["scheduler"]
        prefill = [pid for name, pid in self.cluster.pids.items() if name.startswith("prefill")]
        expect(prefill, f"no prefill worker among {sorted(self.cluster.pids)}")
        for pid in prefill:
            os.kill(pid, signal.SIGSTOP)
        try:
            with concurrent.futures.ThreadPoolExecutor(max_workers=n) as pool:
                futures = [pool.submit(flood, i) for i in range(n)]
                wait_for("the flood in flight",
                         lambda: scrape(metrics, "kvcast_queue_depth") >= TENANT_MAX_IN_FLIGHT, 30)
                in_flight = scrape(metrics, "kvcast_queue_depth")
                deltas, final = self.stream(self.request(ids=self.ids(20, salt=300), max_tokens=4,
                                                         tenant="calm"), timeout=60)
                for pid in prefill:
                    os.kill(pid, signal.SIGCONT)
                results = [f.result(timeout=120) for f in futures]
        finally:
            for pid in prefill:
                os.kill(pid, signal.SIGCONT)
        codes = sorted(c for c, _ in results)
        log(f"tenant flood: {codes}; calm tenant served ({final.usage.generated_tokens} tokens) "
            f"with {in_flight:.0f} flood requests in flight")
        expect(codes.count("OK") <= n - 1 and set(codes) <= {"OK", "RESOURCE_EXHAUSTED"}, f"{results}")
        refused = [d for c, d in results if c == "RESOURCE_EXHAUSTED"]
        expect(refused and all('tenant "flood"' in d for d in refused), f"{refused[:2]}")
        expect(in_flight <= TENANT_MAX_IN_FLIGHT, f"{in_flight} flood requests in flight")
        expect(final.usage.generated_tokens == 4, f"calm tenant: {final}")

    def workers_need_mutual_tls(self):
        """Inside `kvcast cluster up`, a worker's gRPC port (Prefill/Decode)
        answers only clients with a certificate of the cluster's CA."""
        certs = self.cluster.dir / "certs"
        ca = (certs / "ca.pem").read_bytes()
        cert, key = (certs / "server.pem").read_bytes(), (certs / "server-key.pem").read_bytes()
        addr = self.cluster.grpc["prefill-0"]

        def code(channel):
            with channel:
                try:
                    health_status(channel)
                    return "OK"
                except grpc.RpcError as e:
                    return e.code().name
        got = (code(grpc.insecure_channel(addr)),
               code(grpc.secure_channel(addr, grpc.ssl_channel_credentials(ca))),
               code(grpc.secure_channel(addr, grpc.ssl_channel_credentials(ca, key, cert))))
        log(f"worker {addr}: plaintext {got[0]}, TLS without a client certificate {got[1]}, "
            f"mutual TLS {got[2]}")
        expect(got == ("UNAVAILABLE", "UNAVAILABLE", "OK"), f"{got}")

    # 3.
    def invalid_argument(self):
        pb = self.pb
        ok_ids = [5, 6, 7]
        cases = []

        def case(name, req):
            cases.append((name, req))

        case("empty text prompt", self.request(text=""))
        case("no prompt", self.request())
        r = self.request()
        r.token_ids.SetInParent()
        case("empty token_ids", r)
        case("prompt as long as the context", self.request(ids=self.ids(self.context, 4)))
        case("prompt longer than the context", self.request(ids=self.ids(self.context + 10, 5)))
        case("text prompt longer than the context", self.request(text="hello world " * self.context))
        case("max_tokens 0", self.request(ids=ok_ids, max_tokens=0))
        case("max_tokens -1", self.request(ids=ok_ids, max_tokens=-1))
        case("max_tokens 10**7", self.request(ids=ok_ids, max_tokens=10**7))
        case("unknown model", self.request(ids=ok_ids, model="no-such-model"))
        for name, sp in [("temperature -1", pb.SamplingParams(temperature=-1)),
                         ("temperature nan", pb.SamplingParams(temperature=math.nan)),
                         ("temperature inf", pb.SamplingParams(temperature=math.inf)),
                         ("top_p 1.5", pb.SamplingParams(top_p=1.5)),
                         ("top_p -0.5", pb.SamplingParams(top_p=-0.5)),
                         ("top_k -3", pb.SamplingParams(top_k=-3)),
                         ("repetition_penalty -1", pb.SamplingParams(repetition_penalty=-1))]:
            case(name, self.request(ids=ok_ids, sampling=sp))
        case("token id == vocab_size", self.request(ids=[5, self.vocab, 6]))
        case("token id 10**9", self.request(ids=[5, 10**9]))
        case("token id -1", self.request(ids=[-1, 5]))
        case("stop token id outside the vocabulary", self.request(ids=ok_ids, stop_token_ids=[self.vocab]))
        case("empty stop string", self.request(ids=ok_ids, stop=[""]))

        problems = []
        for name, req in cases:
            for how in ("unary", "stream"):
                try:
                    if how == "unary":
                        self.stub.GenerateUnary(req, timeout=RPC_TIMEOUT_S)
                    else:
                        self.stream(req)
                    problems.append(f"{name} ({how}): succeeded")
                except grpc.RpcError as e:
                    if e.code() != grpc.StatusCode.INVALID_ARGUMENT:
                        problems.append(f"{name} ({how}): {e.code().name}: {e.details()!r}")
                    elif not (e.details() or "").strip():
                        problems.append(f"{name} ({how}): INVALID_ARGUMENT with an empty message")
                    elif how == "unary":
                        log(f"  {name}: INVALID_ARGUMENT {e.details()!r}")
        expect(not problems, f"{len(problems)} of {2 * len(cases)} bad requests misanswered:\n  "
               + "\n  ".join(problems))
        # Rejected requests must not hold a queue slot.
        r = self.stub.GenerateUnary(self.request(ids=ok_ids, max_tokens=2), timeout=RPC_TIMEOUT_S)
        expect(len(r.token_ids) == 2, "a valid request after the bad ones failed")

    # 4.
    def flood(self):
        n, max_tokens = 40, 64
        barrier = threading.Barrier(n, timeout=30)

        def one(i):
            # Distinct 1000-token prompts (no prefix reuse): each admitted
            # request holds its slot for a prefill plus 64 decode steps.
            # One tenant each: --max_queue, not the tenants' limit, refuses.
            req = self.request(ids=self.ids(1000, salt=100 + i), max_tokens=max_tokens,
                               tenant=f"flood-{i}")
            barrier.wait()
            try:
                deltas, final = self.stream(req, timeout=60)
                return "OK", (sum(len(d.token_ids) for d in deltas), final)
            except grpc.RpcError as e:
                return e.code().name, e.details()

        t = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(max_workers=n) as pool:
            futures = [pool.submit(one, i) for i in range(n)]
            done, not_done = concurrent.futures.wait(futures, timeout=90)
            expect(not not_done, f"{len(not_done)} of {n} flood requests still running after 90 s")
            results = [f.result() for f in futures]
        counts = {}
        for code, _ in results:
            counts[code] = counts.get(code, 0) + 1
        e2e = sorted(d[1].timings.e2e_ms for c, d in results if c == "OK")
        log(f"flood: {counts} in {time.monotonic() - t:.2f} s; e2e of the admitted ones "
            f"{e2e[0] if e2e else 0:.0f}..{e2e[-1] if e2e else 0:.0f} ms")
        other = [(c, d) for c, d in results if c not in ("OK", "RESOURCE_EXHAUSTED")]
        expect(not other, f"codes other than OK / RESOURCE_EXHAUSTED: {other[:5]}")
        expect(counts.get("RESOURCE_EXHAUSTED", 0) >= 1,
               f"no RESOURCE_EXHAUSTED among {n} concurrent requests with --max_queue={MAX_QUEUE}")
        expect(counts.get("OK", 0) >= 1, "no flood request succeeded")
        for code, d in results:
            if code == "OK":
                n_ids, final = d
                expect(n_ids == max_tokens and final.usage.generated_tokens == max_tokens,
                       f"a flood request streamed {n_ids} ids, usage {final.usage.generated_tokens}")
            else:
                expect((d or "").strip(), "RESOURCE_EXHAUSTED with an empty message")
        r = self.stub.GenerateUnary(self.request(ids=[9, 8, 7], max_tokens=4), timeout=RPC_TIMEOUT_S)
        expect(len(r.token_ids) == 4, "a request after the flood failed")
        expect(health_status(self.channel) == SERVING, "health is not SERVING after the flood")

    # 5.
    def deadline(self):
        sched = self.cluster.metrics.get("scheduler")
        decode = self.cluster.metrics.get("decode-0")
        long_req = self.request(ids=self.ids(8, salt=7), max_tokens=2000)
        # How long the whole request takes without a deadline (it must be far
        # more than 50 ms for the check below to mean anything).
        t = time.monotonic()
        full = self.stub.GenerateUnary(long_req, timeout=RPC_TIMEOUT_S)
        full_s = time.monotonic() - t
        log(f"2000 tokens without a deadline: {full_s:.2f} s")
        self.check_final(full.final, 2000, "2000 tokens")
        for how in ("stream", "unary"):
            t = time.monotonic()
            code, details = "OK", ""
            try:
                if how == "stream":
                    self.stream(long_req, timeout=0.05)
                else:
                    self.stub.GenerateUnary(long_req, timeout=0.05)
            except grpc.RpcError as e:
                code, details = e.code().name, e.details()
            took = time.monotonic() - t
            log(f"deadline ({how}): {code} after {took * 1000:.0f} ms")
            expect(code == "DEADLINE_EXCEEDED",
                   f"{how} with a 50 ms deadline ended with {code}: {details!r}")
            expect(took < 5, f"{how} with a 50 ms deadline took {took:.2f} s")
            r = self.stub.GenerateUnary(self.request(ids=[11, 12, 13], max_tokens=4), timeout=RPC_TIMEOUT_S)
            expect(len(r.token_ids) == 4, f"the request after the {how} deadline failed")
        # More expired requests than --max_queue: each must give its slot back
        # and stop generating on the workers (cancellation propagates).
        tokens_before = scrape(decode, "kvcast_decode_tokens_total") if decode else None
        for i in range(MAX_QUEUE + 2):
            try:
                self.stub.GenerateUnary(self.request(ids=self.ids(8, salt=20 + i), max_tokens=2000),
                                        timeout=0.05)
                raise CheckError("a request with a 50 ms deadline for 2000 tokens succeeded")
            except grpc.RpcError as e:
                expect(e.code() == grpc.StatusCode.DEADLINE_EXCEEDED,
                       f"unary with a 50 ms deadline ended with {e.code().name}: {e.details()!r}")
        if sched:
            took = wait_for("the scheduler's kvcast_queue_depth back to 0",
                            lambda: scrape(sched, "kvcast_queue_depth") == 0, 10)
            log(f"scheduler queue empty {took:.2f} s after the expired requests")
        if decode:
            took = wait_for("the decode worker's kvcast_running back to 0",
                            lambda: scrape(decode, "kvcast_running") == 0, 10)
            generated = scrape(decode, "kvcast_decode_tokens_total") - tokens_before
            log(f"decode worker idle {took:.2f} s later; it generated {generated:.0f} tokens "
                f"for {MAX_QUEUE + 2} expired requests of 2000")
            # Without cancellation each would run to 2000 tokens.
            expect(generated < 0.75 * (MAX_QUEUE + 2) * 2000,
                   f"the decode worker generated {generated:.0f} tokens for {MAX_QUEUE + 2} requests "
                   "whose deadline had passed: cancellation did not reach it")
        r = self.stub.GenerateUnary(self.request(ids=[11, 12, 13], max_tokens=4), timeout=RPC_TIMEOUT_S)
        expect(len(r.token_ids) == 4, "the request after the expired ones failed")

    def health(self):
        expect(health_status(self.channel) == SERVING, "overall health is not SERVING")
        s = health_status(self.channel, "kvcast.v1.Generation")
        expect(s == SERVING, f"kvcast.v1.Generation health is {s}, not SERVING")
        try:
            s = health_status(self.channel, "no.such.Service")
            raise CheckError(f"health of an unknown service answered {s}, want NOT_FOUND")
        except grpc.RpcError as e:
            expect(e.code() == grpc.StatusCode.NOT_FOUND, f"unknown service: {e.code().name}")


# --- main -------------------------------------------------------------------

def main():
    args = parse_cluster_test_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # Bazel's timeout: still stop the cluster
    work = pathlib.Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)

    runner = Runner("grpcio_client")
    run = runner.run

    cluster = None
    channel = None
    state = {}

    def setup():
        stubs = work / "stubs"
        env = dict(os.environ, PROTO_ROOT=args.proto_root)
        log(f"stubs: {args.gen_stubs} {stubs} (PROTO_ROOT={args.proto_root})")
        p = subprocess.run(["bash", args.gen_stubs, str(stubs)], env=env, capture_output=True,
                           text=True, timeout=60)
        expect(p.returncode == 0, f"gen_python_stubs.sh failed ({p.returncode}):\n{p.stdout}{p.stderr}")
        sys.path.insert(0, str(stubs))
        from kvcast.v1 import generation_pb2, generation_pb2_grpc  # noqa: E402 - generated above
        expect(pathlib.Path(generation_pb2.__file__).resolve().is_relative_to(stubs),
               f"generation_pb2 came from {generation_pb2.__file__}, not the generated stubs")
        state["pb"], state["pb_grpc"] = generation_pb2, generation_pb2_grpc
        model = work / "tiny_model"
        p = subprocess.run([args.make_tiny_model, f"--out={model}"], capture_output=True, text=True,
                           timeout=120)
        expect(p.returncode == 0, f"make_tiny_model failed ({p.returncode}):\n{p.stdout}{p.stderr}")
        state["config"] = json.loads((model / "config.json").read_text())
        log(f"tiny model: vocab {state['config']['vocab_size']}, "
            f"context {state['config']['max_position_embeddings']}")
        nonlocal cluster, channel
        cluster = Cluster(args, model, work, [
            f"--scheduler_flags=--max_queue={MAX_QUEUE} --tenant_max_in_flight={TENANT_MAX_IN_FLIGHT}"])
        cluster.start()
        channel = grpc.insecure_channel(cluster.address, options=[("grpc.enable_http_proxy", 0)])
        state["checks"] = Checks(generation_pb2, generation_pb2_grpc, channel, cluster, state["config"])
        state["checks"].ready()

    try:
        if run("setup", setup):
            c = state["checks"]
            for name in ("stream_matches_unary", "prefix_reuse", "tenant_isolation", "tenant_flood",
                         "workers_need_mutual_tls",
                         "invalid_argument", "flood",
                         "deadline", "health"):
                run(name, getattr(c, name))
    finally:
        if channel is not None:
            channel.close()
        if cluster is not None:
            runner.stop_cluster(cluster)
    return runner.finish(args.xml, cluster)


if __name__ == "__main__":
    sys.exit(main())
