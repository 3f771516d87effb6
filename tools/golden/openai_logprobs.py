#!/usr/bin/env python3
"""Asks a running kvcast (or any OpenAI-compatible server with vLLM's
/tokenize) for a greedy chat answer with logprobs, through the official
`openai` client, and writes the prompt's token ids and the answer's
per-token logprobs as JSON, for hf_logprobs_check.py.

  python3 tools/golden/openai_logprobs.py --url http://127.0.0.1:8000/v1 \
      --system "..." --question "..." --out kvcast_logprobs.json

With --echo FILE: instead, the prompt's own log-probabilities (the text of
FILE as a completions prompt, echo with logprobs and max_tokens 0, as
lm-eval's loglikelihood asks), written as "echo": [per token after the
first: {bytes, logprob, top}].
"""
import argparse
import json
import urllib.request

import openai


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True)
    p.add_argument("--system", default="You are a helpful assistant.")
    p.add_argument("--question", help="the chat question (not with --echo)")
    p.add_argument("--max_tokens", type=int, default=24)
    p.add_argument("--top", type=int, default=5)
    p.add_argument("--out", required=True)
    p.add_argument("--echo", help="a text file: its prompt log-probabilities instead")
    a = p.parse_args()
    if a.echo:
        return echo(a)
    if not a.question:
        p.error("--question (or --echo) is required")
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


def echo(a):
    client = openai.OpenAI(base_url=a.url, api_key="none")
    model = client.models.list().data[0].id
    text = open(a.echo).read()
    r = client.completions.create(model=model, prompt=text, max_tokens=0, temperature=0, echo=True,
                                  logprobs=a.top)
    root = a.url.rsplit("/v1", 1)[0]
    req = urllib.request.Request(root + "/tokenize", method="POST",
                                 data=json.dumps({"model": model, "prompt": text}).encode(),
                                 headers={"Content-Type": "application/json"})
    prompt_ids = json.load(urllib.request.urlopen(req, timeout=30))["tokens"]
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(prompt_ids) and lp.token_logprobs[0] is None, (len(lp.tokens), len(prompt_ids))
    out = [{"bytes": list(t.encode("utf-8", "surrogateescape")), "logprob": v,
            "top": [{"bytes": list(b.encode("utf-8", "surrogateescape")), "logprob": x} for b, x in top.items()]}
           for t, v, top in zip(lp.tokens[1:], lp.token_logprobs[1:], lp.top_logprobs[1:])]
    json.dump({"model": model, "prompt_ids": prompt_ids, "echo": out}, open(a.out, "w"))
    print(f"{len(prompt_ids)} prompt tokens, their log-probabilities summed: "
          f"{sum(lp.token_logprobs[1:]):.3f}")


if __name__ == "__main__":
    main()
