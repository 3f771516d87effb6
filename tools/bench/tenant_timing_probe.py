"""Cross-tenant timing probe (docs/security.md): can a tenant tell from time
to first token that another tenant sent a prompt?

For each trial a fresh random prompt P of --tokens token ids: tenant A sends
P (cold), then, in random order, A sends P again (its own cached prefix) and
tenant B sends P (A's prefix, B's tenant). Prints the TTFT distributions and
a two-sample Kolmogorov-Smirnov statistic of B against A's cold requests;
exits 1 if B's TTFTs look like A's cached ones rather than the cold ones.

  python3 tools/bench/tenant_timing_probe.py --url http://127.0.0.1:8000 \\
      --key_a KEY_A --key_b KEY_B [--trials 50 --tokens 300 --vocab 49152]
(the scheduler needs --api_keys_file mapping the two keys to two tenants;
--json FILE also writes every TTFT as a result file, tools/report/results.py)
"""
import argparse
import json
import random
import statistics
import sys
import time
import urllib.request
import os
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import results  # noqa: E402  (tools/report: the result files' header)


def ttft(url, key, ids):
    body = json.dumps({"prompt": ids, "max_tokens": 1, "temperature": 0, "stream": True}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={
        "Content-Type": "application/json", "Authorization": "Bearer " + key})
    t0 = time.monotonic()
    with urllib.request.urlopen(req, timeout=120) as r:
        for line in r:
            if line.startswith(b"data: {"):
                first = time.monotonic() - t0
                for _ in r:
                    pass
                return 1000 * first
    raise RuntimeError("no token")


def ks(a, b):
    """Two-sample Kolmogorov-Smirnov statistic: the largest CDF gap."""
    a, b = sorted(a), sorted(b)
    d = 0.0
    for x in a + b:
        fa = sum(v <= x for v in a) / len(a)
        fb = sum(v <= x for v in b) / len(b)
        d = max(d, abs(fa - fb))
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--key_a", required=True)
    ap.add_argument("--key_b", required=True)
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--json", default="", help="also write the TTFTs here as a result file")
    args = ap.parse_args()
    rng = random.Random(1)
    cold, own, other = [], [], []
    for i in range(args.trials):
        ids = [rng.randrange(10, args.vocab) for _ in range(args.tokens)]
        cold.append(ttft(args.url, args.key_a, ids))
        pair = [("own", args.key_a), ("other", args.key_b)]
        rng.shuffle(pair)
        for name, key in pair:
            (own if name == "own" else other).append(ttft(args.url, key, ids))
        print(f"\rtrial {i + 1}/{args.trials}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    for name, v in (("A cold", cold), ("A cached (own)", own), ("B on A's prompt", other)):
        q = statistics.quantiles(v, n=10)
        print(f"{name:16} TTFT p10 {q[0]:7.1f}  p50 {statistics.median(v):7.1f}  p90 {q[-1]:7.1f} ms")
    d_other, d_own = ks(other, cold), ks(own, cold)
    print(f"KS distance to A's cold TTFTs: B {d_other:.2f}, A's own cached {d_own:.2f} "
          f"(two samples of {args.trials}: > {1.36 * (2 / args.trials) ** 0.5:.2f} differs at 5%)")
    if args.json:
        results.write(args.json, results.header("tenant_timing_probe"),
                      {"a_cold_ms": cold, "a_cached_ms": own, "b_on_a_prompt_ms": other,
                       "ks_b_vs_cold": d_other, "ks_a_own_vs_cold": d_own},
                      trials=args.trials, tokens=args.tokens)
    return 0 if d_other < d_own else 1


if __name__ == "__main__":
    sys.exit(main())
