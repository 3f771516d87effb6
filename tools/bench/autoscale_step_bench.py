"""A load that steps up and down on a local cluster that follows the planner.

    .venv/bin/python tools/bench/autoscale_step_bench.py --model GGUF \
        [--steps 0.3:60,1.5:60,3:60,1.5:60,0.3:60] [--interval_s 10] \
        [--json docs/results/planner_on_machine.json]

Starts `kvcast cluster up --autoscale` (1 prefill + 1 decode worker, the
planner every --planner_s, one worker started or drained per role a step),
then sends chat requests through the OpenAI-compatible API with the `openai`
client, streamed, as a Poisson process whose rate follows --steps
(RATE:SECONDS, requests/s); each prompt is one of --system_prompts shared
system prompts plus a new question. Every second it reads the scheduler's
/metrics: the registered workers and the planner's desired replicas per role.
After the last step it waits for every request to end and --idle_s more (the
planner scales down), then stops the cluster.

Checks, each a failure (exit 1) when broken: every request ended (ok or an
error, none hanging past --request_timeout_s); every worker that drained or
stopped reported all its KV pages free (`kvcast-prefill`/`kvcast-decode` log
"drained: all N KV pages free" after their last request; a leak logs the
pages still held and exits 1).

Prints per interval: arrivals, requests ended, TTFT p99, ITL p99, workers and
desired replicas per role; --json writes the same as a result file
(tools/report/results.py) for tools/report/make_plots.py.
"""
import argparse
import concurrent.futures
import glob
import math
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import results  # noqa: E402

WORDS = ("cache prefix token model request worker decode prefill relay stream latency "
         "memory page chunk schedule planner replica kernel batch context budget "
         "network packet window track group object namespace tier host disk").split()


def percentile(values, q):
    """Nearest rank, as kvcast bench's; None for no values."""
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v), max(1, math.ceil(q * len(v)))) - 1]


def parse_steps(text):
    steps = []
    for part in text.split(","):
        rate, _, secs = part.partition(":")
        steps.append((float(rate), float(secs)))
        if steps[-1][0] < 0 or steps[-1][1] <= 0:
            raise argparse.ArgumentTypeError(f"--steps: '{part}' is not RATE:SECONDS")
    return steps


def arrivals(steps, seed):
    """Poisson arrival times (s from the start) whose rate follows the steps."""
    rng = random.Random(seed)
    out, t0 = [], 0.0
    for rate, secs in steps:
        t = t0
        while rate > 0:
            t += rng.expovariate(rate)
            if t >= t0 + secs:
                break
            out.append(t)
        t0 += secs
    return out


def metrics(url):
    text = urllib.request.urlopen(url, timeout=2).read().decode()
    got = {}
    for name, role, value in re.findall(
            r'^(kvcast_workers|kvcast_planner_desired_replicas)\{role="(\w+)"\} ([\d.e+-]+)$',
            text, re.M):
        got[f"{name}:{role}"] = float(value)
    return got


class Cluster:
    def __init__(self, args):
        flags = (f"--planner_interval_s={args.planner_s} --slo_ttft_ms={args.slo_ttft_ms} "
                 f"--slo_itl_ms={args.slo_itl_ms}")
        self.cmd = [args.kvcast, "cluster", "up", "--model", args.model, "--prefill", "1",
                    "--decode", "1", "--autoscale", "--autoscale_interval_s", str(args.planner_s),
                    "--autoscale_max_workers", str(args.max_workers), "--work_dir", args.work_dir,
                    "--scheduler_port", "0", "--http_port", "0", "--scheduler_flags", flags]
        self.log = open(args.work_dir + ".log", "w")
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.metrics_url = self.api = None
        deadline = time.time() + 180
        for line in self.proc.stdout:
            m = re.search(r"metrics http://([\d.:]+)/metrics", line)
            if m:
                self.metrics_url = f"http://{m.group(1)}/metrics"
            m = re.search(r"OpenAI-compatible API: (http://[\d.:]+/v1)", line)
            if m:
                self.api = m.group(1)
            if "Ctrl-C" in line or time.time() > deadline:
                break
        if not (self.metrics_url and self.api):
            self.stop()
            raise RuntimeError(f"the cluster did not start: see {self.log.name}")
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def one_request(client, model, system, question, max_tokens, timeout):
    start = time.monotonic()
    times = []
    try:
        stream = client.chat.completions.create(
            model=model, stream=True, max_tokens=max_tokens, temperature=0, timeout=timeout,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": question}])
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                times.append(time.monotonic())
        if not times:
            return {"ok": False, "error": "no tokens"}
        gaps = [b - a for a, b in zip(times, times[1:])]
        return {"ok": True, "ttft_s": times[0] - start, "itl_s": gaps}
    except Exception as e:  # noqa: BLE001 - every failure is a counted outcome
        return {"ok": False, "error": f"{type(e).__name__}: {e}"[:200]}


def drain_reports(work_dir):
    """Each worker log's drain line: (log, pages held or None if it never said)."""
    out = []
    for log in sorted(glob.glob(os.path.join(work_dir, "logs", "*.log"))):
        name = os.path.basename(log)
        if not name.startswith(("prefill", "decode")):
            continue
        text = open(log, errors="replace").read()
        if "draining" not in text:
            continue
        free = re.findall(r"drained: all (\d+) KV pages free", text)
        held = re.findall(r"drained: (\d+) of (\d+) KV pages still held", text)
        pages_held, total = held[-1] if held else (0, free[-1] if free else 0)
        out.append({"log": name, "reported": bool(free or held), "pages_held": int(pages_held),
                    "total_pages": int(total)})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--kvcast", default="bazel-bin/tools/cli/kvcast")
    ap.add_argument("--steps", type=parse_steps, default=parse_steps("0.3:60,1.5:60,3:60,1.5:60,0.3:60"))
    ap.add_argument("--interval_s", type=float, default=10)
    ap.add_argument("--planner_s", type=float, default=5)
    ap.add_argument("--max_workers", type=int, default=3)
    ap.add_argument("--slo_ttft_ms", type=float, default=2000)
    ap.add_argument("--slo_itl_ms", type=float, default=100)
    ap.add_argument("--system_prompts", type=int, default=6)
    ap.add_argument("--system_words", type=int, default=300)
    ap.add_argument("--max_tokens", type=int, default=24)
    ap.add_argument("--idle_s", type=float, default=45)
    ap.add_argument("--request_timeout_s", type=float, default=120)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work_dir", default="build/autoscale_step")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    import openai  # the test venv's

    head = results.header("autoscale_step_bench")
    rng = random.Random(args.seed)
    systems = [f"You are assistant {i}. " + " ".join(rng.choice(WORDS) for _ in range(
        args.system_words)) for i in range(args.system_prompts)]
    plan = arrivals(args.steps, args.seed)
    print(f"[step] {len(plan)} requests over {sum(s for _, s in args.steps):.0f} s; starting the "
          f"cluster", file=sys.stderr)
    cluster = Cluster(args)
    client = openai.OpenAI(base_url=cluster.api, api_key="none", max_retries=0)
    model = client.models.list().data[0].id
    one_request(client, model, systems[0], "Warm up.", 4, args.request_timeout_s)

    samples, stop = [], threading.Event()

    def poll(t0):
        while not stop.is_set():
            try:
                samples.append((time.monotonic() - t0, metrics(cluster.metrics_url)))
            except OSError:
                pass
            stop.wait(1)
    t0 = time.monotonic()
    poller = threading.Thread(target=poll, args=(t0,), daemon=True)
    poller.start()
    outcomes = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=64) as pool:
        futures = []
        for i, at in enumerate(plan):
            time.sleep(max(0.0, t0 + at - time.monotonic()))
            q = f"Question {i}: " + " ".join(rng.choice(WORDS) for _ in range(12)) + "?"
            sys_prompt = systems[rng.randrange(len(systems))]
            futures.append((at, pool.submit(one_request, client, model, sys_prompt, q,
                                            args.max_tokens, args.request_timeout_s)))
            if i % 20 == 0:
                print(f"[step] {i}/{len(plan)} sent, {time.monotonic() - t0:.0f} s",
                      file=sys.stderr)
        for at, f in futures:
            outcomes.append(dict(f.result(), start_s=at))
    ended_s = time.monotonic() - t0
    print(f"[step] every request ended at {ended_s:.0f} s; idling {args.idle_s:.0f} s",
          file=sys.stderr)
    time.sleep(args.idle_s)
    stop.set()
    poller.join()
    cluster_rc = cluster.stop()
    drains = drain_reports(args.work_dir)

    end = max([s for s, _ in samples] + [ended_s])
    intervals = []
    k = 0
    while k * args.interval_s < end:
        lo, hi = k * args.interval_s, (k + 1) * args.interval_s
        mine = [o for o in outcomes if lo <= o["start_s"] < hi]
        ok = [o for o in mine if o["ok"]]
        snap = [m for s, m in samples if lo <= s < hi]
        last = snap[-1] if snap else {}
        ttft = percentile([o["ttft_s"] for o in ok], 0.99)
        itl = percentile([g for o in ok for g in o["itl_s"]], 0.99)
        intervals.append({
            "t_s": lo, "arrivals_per_s": len(mine) / args.interval_s, "requests": len(mine),
            "failed": len(mine) - len(ok),
            "ttft_p99_ms": None if ttft is None else 1e3 * ttft,
            "itl_p99_ms": None if itl is None else 1e3 * itl,
            **{f"{role}_workers": last.get(f"kvcast_workers:{role}") for role in ("prefill", "decode")},
            **{f"{role}_desired": last.get(f"kvcast_planner_desired_replicas:{role}")
               for role in ("prefill", "decode")}})
        k += 1
    failed = [o for o in outcomes if not o["ok"]]
    leaks = [d for d in drains if not d["reported"] or d["pages_held"]]
    print("| interval s | arrivals/s | TTFT p99 ms | ITL p99 ms | prefill workers (desired) | "
          "decode workers (desired) |\n|---|---|---|---|---|---|")
    fmt = lambda v: "-" if v is None else f"{v:.0f}"  # noqa: E731
    for iv in intervals:
        print(f"| {iv['t_s']:.0f} | {iv['arrivals_per_s']:.1f} | {fmt(iv['ttft_p99_ms'])} | "
              f"{fmt(iv['itl_p99_ms'])} | {fmt(iv['prefill_workers'])} ({fmt(iv['prefill_desired'])})"
              f" | {fmt(iv['decode_workers'])} ({fmt(iv['decode_desired'])}) |")
    print(f"\nrequests: {len(outcomes)}, ok {len(outcomes) - len(failed)}, failed {len(failed)}; "
          f"cluster exit {cluster_rc}; workers that drained: {len(drains)}, all pages free: "
          f"{len(drains) - len(leaks)}")
    for f in failed[:5]:
        print(f"  failed: {f['error']}")
    for d in leaks:
        print(f"  LEAK or no report: {d}")
    if args.json:
        results.write(args.json, head, intervals, steps=[list(s) for s in args.steps],
                      interval_s=args.interval_s, planner_s=args.planner_s,
                      slo_ttft_ms=args.slo_ttft_ms, slo_itl_ms=args.slo_itl_ms,
                      model=os.path.basename(args.model), requests=len(outcomes),
                      failed=len(failed), drains=drains, cluster_exit=cluster_rc)
    return 1 if failed or leaks or not drains else 0


if __name__ == "__main__":
    sys.exit(main())
