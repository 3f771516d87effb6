"""One line from a load generator's report, and optionally its numbers as
JSON (for tools/report/collect_results.py): TTFT, inter-token latency,
output tokens/s and the cached prompt tokens the server reported
(usage.prompt_tokens_details.cached_tokens, which both tools record).

    load_summary.py aiperf REPORT.json CONCURRENCY [RUN.json]
        (REPORT: aiperf profile's profile_export_aiperf.json)
    load_summary.py guidellm REPORT.json CONCURRENCY [RUN.json]
        (REPORT: guidellm run --output kind=json)

System python3 only."""
import json
import sys


def find_all(node, key, out):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key and isinstance(v, (int, float)):
                out.append(v)
            else:
                find_all(v, key, out)
    elif isinstance(node, list):
        for v in node:
            find_all(v, key, out)
    return out


def aiperf(report):
    m = lambda k, s="avg": report[k][s]  # noqa: E731
    return {"ttft_p50_ms": m("time_to_first_token", "p50"),
            "ttft_p90_ms": m("time_to_first_token", "p90"),
            "itl_p50_ms": m("inter_token_latency", "p50"),
            "output_tokens_per_s": m("output_token_throughput"),
            "cached_tokens_mean": m("usage_prompt_cache_read_tokens"),
            "prompt_tokens_mean": m("usage_prompt_tokens")}


def guidellm(report):
    b = report["benchmarks"][0]
    ok = lambda k: b["metrics"][k]["successful"]  # noqa: E731
    cached = find_all(b.get("requests", {}), "cached_tokens", [])
    return {"ttft_p50_ms": ok("time_to_first_token_ms")["percentiles"]["p50"],
            "ttft_p90_ms": ok("time_to_first_token_ms")["percentiles"]["p90"],
            "itl_p50_ms": ok("inter_token_latency_ms")["median"],
            "output_tokens_per_s": ok("output_tokens_per_second")["mean"],
            "cached_tokens_mean": sum(cached) / len(cached) if cached else None,
            "prompt_tokens_mean": ok("prompt_token_count")["mean"]}


def line(tool, c, r):
    cached = (f"cached tokens avg {r['cached_tokens_mean']:.0f} of {r['prompt_tokens_mean']:.0f}"
              if r["cached_tokens_mean"] is not None
              else f"cached tokens: none reported ({r['prompt_tokens_mean']:.0f}-token prompts)")
    return (f"{tool:<8} c={c:>2}: TTFT p50 {r['ttft_p50_ms']:8.1f} ms p90 {r['ttft_p90_ms']:8.1f} ms | "
            f"ITL p50 {r['itl_p50_ms']:6.1f} ms | output {r['output_tokens_per_s']:6.1f} tok/s | {cached}")


def main(argv):
    readers = {"aiperf": aiperf, "guidellm": guidellm}
    if len(argv) not in (4, 5) or argv[1] not in readers:
        print(__doc__, file=sys.stderr)
        return 2
    tool, path, c = argv[1], argv[2], int(argv[3])
    with open(path) as f:
        numbers = readers[tool](json.load(f))
    print(line(tool, c, numbers))
    if len(argv) == 5:
        with open(argv[4], "w") as f:
            json.dump(dict(numbers, tool=tool, concurrency=c), f, sort_keys=True)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
