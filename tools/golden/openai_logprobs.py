#!/usr/bin/env python3
"""Asks a running kvcast (or any OpenAI-compatible server with vLLM's
/tokenize) for a greedy chat answer with logprobs, through the official
`openai` client, and writes the prompt's token ids and the answer's
per-token logprobs as JSON, for hf_logprobs_check.py.

  python3 tools/golden/openai_logprobs.py --url http://127.0.0.1:8000/v1 \
      --system "..." --question "..." --out kvcast_logprobs.json
"""
import argparse
import json
import urllib.request

import openai


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True)
    p.add_argument("--system", default="You are a helpful assistant.")
    p.add_argument("--question", required=True)
    p.add_argument("--max_tokens", type=int, default=24)
    p.add_argument("--top", type=int, default=5)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    messages = [{"role": "system", "content": a.system}, {"role": "user", "content": a.question}]
    client = openai.OpenAI(base_url=a.url, api_key="none")
    model = client.models.list().data[0].id
    r = client.chat.completions.create(model=model, messages=messages, max_tokens=a.max_tokens,
                                       temperature=0, logprobs=True, top_logprobs=a.top)
    root = a.url.rsplit("/v1", 1)[0]
    req = urllib.request.Request(root + "/tokenize", method="POST",
                                 data=json.dumps({"model": model, "messages": messages,
                                                  "add_generation_prompt": True}).encode(),
                                 headers={"Content-Type": "application/json"})
    prompt_ids = json.load(urllib.request.urlopen(req, timeout=30))["tokens"]
    content = [{"bytes": t.bytes, "logprob": t.logprob,
                "top": [{"bytes": x.bytes, "logprob": x.logprob} for x in t.top_logprobs]}
               for t in r.choices[0].logprobs.content]
    json.dump({"model": model, "prompt_ids": prompt_ids, "text": r.choices[0].message.content,
               "content": content}, open(a.out, "w"))
    print(f"{len(prompt_ids)} prompt tokens; {len(content)} generated: {r.choices[0].message.content!r}")


if __name__ == "__main__":
    main()
