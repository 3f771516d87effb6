"""One line from a guidellm JSON report (guidellm run --output kind=json):
TTFT, inter-token latency, output tokens/s and the cached prompt tokens the
server reported (usage.prompt_tokens_details.cached_tokens, which guidellm
records per request). Usage: guidellm_summary.py REPORT.json CONCURRENCY"""
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


def main():
    report, c = json.load(open(sys.argv[1])), sys.argv[2]
    b = report["benchmarks"][0]
    m = b["metrics"]
    ok = lambda k: m[k]["successful"]  # noqa: E731
    cached = find_all(b.get("requests", {}), "cached_tokens", [])
    prompt = ok("prompt_token_count")["mean"]
    print(f"guidellm c={c:>2}: TTFT p50 {ok('time_to_first_token_ms')['percentiles']['p50']:8.1f} ms "
          f"p90 {ok('time_to_first_token_ms')['percentiles']['p90']:8.1f} ms | "
          f"ITL p50 {ok('inter_token_latency_ms')['median']:6.1f} ms | "
          f"output {ok('output_tokens_per_second')['mean']:6.1f} tok/s | "
          + (f"cached tokens avg {sum(cached) / len(cached):.0f} of {prompt:.0f}" if cached
             else f"cached tokens: none reported ({prompt:.0f}-token prompts)"))


if __name__ == "__main__":
    main()
