"""Long prompts as a new user meets them: on a fresh `kvcast cluster up`
(1 prefill + 2 decode workers, the scheduler's default stall bounds), the
very first request is a chat through PyPI's `openai` client whose system
prompt is natural English of about N tokens (the GPL-3 text Debian ships,
repeated as needed). Per run it records success, the time to the first
token and to the end (cold: no KV cached anywhere, the model just loaded),
and the prompt tokens the server counted. Each length gets `--runs` runs,
each on a fresh cluster; lengths alternate run by run.

  .venv/bin/python tools/bench/long_prompt_bench.py --model SmolLM2.gguf \
      --tokens 2800,8000 --runs 3 [--json OUT] [--cluster_flags "..."]

Binaries from an opt build (`bazel build -c opt //tools/cli:kvcast
//services/...  //services/relay:kvcast-relay`); --bin_root names where.
Prints one markdown row per run and the median/range per length.
"""
import argparse
import os
import pathlib
import shlex
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tests", "e2e_python"))
from harness import Cluster  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import results  # noqa: E402  (tools/report: the result files' header)

TEXT = pathlib.Path("/usr/share/common-licenses/GPL-3")
TOKENS_PER_WORD = 1.22  # SmolLM2 on this text with its chat template (from usage)


def system_prompt(tokens):
    words = TEXT.read_text().split()
    want = int(tokens / TOKENS_PER_WORD)
    out = []
    while len(out) < want:
        out.extend(words[: want - len(out)])
    return " ".join(out)


def one_run(args, tokens, work):
    import openai
    c = Cluster(args, args.model, work, ["--prefill", "1", "--decode", "2",
                                         *shlex.split(args.cluster_flags)])
    c.start()
    row = {"target_tokens": tokens, "ok": False}
    try:
        client = openai.OpenAI(base_url=f"http://{c.http}/v1", api_key="none", max_retries=0,
                               timeout=600)
        t0 = time.monotonic()
        stream = client.chat.completions.create(
            model=client.models.list().data[0].id, max_tokens=16, temperature=0, stream=True,
            stream_options={"include_usage": True},
            messages=[{"role": "system", "content": system_prompt(tokens)},
                      {"role": "user", "content": "Summarize the text above in one sentence."}])
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content and "ttft_s" not in row:
                row["ttft_s"] = time.monotonic() - t0
            if chunk.usage:
                row["prompt_tokens"] = chunk.usage.prompt_tokens
        row["e2e_s"] = time.monotonic() - t0
        row["ok"] = "ttft_s" in row
    except Exception as e:  # the failure is the result
        row["error"] = f"{type(e).__name__}: {e}"[:300]
        row["e2e_s"] = time.monotonic() - t0
    finally:
        c.stop()
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", default="2800,8000")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cluster_flags", default="")
    ap.add_argument("--bin_root", default="bazel-bin")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    root = pathlib.Path(args.bin_root)
    args.kvcast = str(root / "tools/cli/kvcast")
    args.scheduler = str(root / "services/scheduler/kvcast-scheduler")
    args.prefill = str(root / "services/prefill/kvcast-prefill")
    args.decode = str(root / "services/decode/kvcast-decode")
    args.relay = str(root / "services/relay/kvcast-relay")
    lengths = [int(t) for t in args.tokens.split(",")]
    head = results.header("long_prompt_bench")
    rows = []
    print(f"# {head['date']}, {head['cpu']}, {head['cores']} cores, commit {head['commit']}")
    print("| run | target tokens | prompt tokens | ok | TTFT s | e2e s | error |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.runs):
            for n in lengths:
                row = one_run(args, n, pathlib.Path(tmp) / f"run{r}-{n}")
                row["run"] = r
                rows.append(row)
                print(f"| {r} | {n} | {row.get('prompt_tokens', '-')} | {row['ok']} | "
                      f"{row.get('ttft_s', float('nan')):.1f} | {row['e2e_s']:.1f} | "
                      f"{row.get('error', '')} |", flush=True)
    for n in lengths:
        ok = [x for x in rows if x["target_tokens"] == n and x["ok"]]
        t = [x["ttft_s"] for x in ok]
        summary = (f"median {statistics.median(t):.1f} s, range {min(t):.1f}-{max(t):.1f} s"
                   if t else "no success")
        print(f"{n} tokens: {len(ok)}/{args.runs} ok; TTFT {summary}")
    if args.json:
        results.write(args.json, head, rows)
    return 0 if all(x["ok"] for x in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
