"""A chat request to kvcast's OpenAI-compatible API with Python's standard
library only (what `./kvcast.sh demo` runs): streams the answer to stdout,
then prints time to first token and the prompt tokens whose KV was reused.

  python3 tools/demo/openai_chat.py --url http://127.0.0.1:8000/v1 \
      [--system TEXT] [--max_tokens 96] [--api_key KEY] QUESTION
"""
import argparse
import json
import sys
import time
import urllib.error
import urllib.request


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("question")
    ap.add_argument("--url", default="http://127.0.0.1:8000/v1")
    ap.add_argument("--system", default="")
    ap.add_argument("--max_tokens", type=int, default=96)
    ap.add_argument("--repetition_penalty", type=float, default=1.0)
    ap.add_argument("--api_key", default="")
    args = ap.parse_args()
    messages = ([{"role": "system", "content": args.system}] if args.system else []) + [
        {"role": "user", "content": args.question}]
    body = {"messages": messages, "max_tokens": args.max_tokens, "temperature": 0,
            "repetition_penalty": args.repetition_penalty, "stream": True,
            "stream_options": {"include_usage": True}}
    req = urllib.request.Request(args.url + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    if args.api_key:
        req.add_header("Authorization", "Bearer " + args.api_key)
    t0 = time.monotonic()
    ttft, usage = None, None
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    sys.exit(f"error: {chunk['error']['message']}")
                if chunk.get("usage") and not chunk["choices"]:
                    usage = chunk["usage"]
                for c in chunk["choices"]:
                    text = c["delta"].get("content") or ""
                    if text and ttft is None:
                        ttft = time.monotonic() - t0
                    print(text, end="", flush=True)
    except urllib.error.HTTPError as e:
        sys.exit(f"HTTP {e.code}: {e.read().decode(errors='replace')}")
    print()
    if usage:
        print(f"[TTFT {1000 * (ttft or 0):.0f} ms; prompt {usage['prompt_tokens']} tokens, "
              f"{usage['prompt_tokens_details']['cached_tokens']} cached; "
              f"{usage['completion_tokens']} generated]", file=sys.stderr)


if __name__ == "__main__":
    main()
