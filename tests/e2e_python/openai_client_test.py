"""kvcast's OpenAI-compatible HTTP API seen by the official `openai` client.

Starts `kvcast cluster up --http_tls` on SmolLM2-135M-Instruct (GGUF) with an
API keys file, then checks over HTTPS (Python's ssl verifying the cluster's
development CA) with PyPI's `openai` package (max_retries=0) and
plain urllib, no kvcast code:
  models              /v1/models lists the served model with max_model_len
  auth                no key / a wrong key: 401 (AuthenticationError)
  completion_stream   streamed completion text == the unary one (greedy)
  chat_stream         chat stream: role chunk first, finish_reason last,
                      include_usage chunk, [DONE]; == the unary chat (greedy)
  cached_tokens       a second chat sharing a long system prompt reports
                      usage.prompt_tokens_details.cached_tokens >= 128
  tenant_isolation    another API key's tenant gets no cached tokens from
                      this one's conversation
  bad_requests        400 naming the field; unknown model 404
  min_tokens          min_tokens holds a stop string back
  best_of             completions n=2 best_of=4 (sampled, a seed) return the
                      2 of the 4 candidates n=4 gives with the highest summed
                      token_logprobs, in that order; usage bills all 4
  echo_logprobs       echo with logprobs, as lm-eval's loglikelihood asks
                      (max_tokens 0 and 1): the prompt's tokens come back
                      with their log-probabilities (the first null), those
                      the model gave the same tokens when it generated them:
                      on the fused route (a short prompt, computed as decode
                      computes it) equal, each its position's top-1 (greedy);
                      on the prefill route (long: its tiled attention sums
                      in another order, which the int8 activations amplify)
                      within 0.5; the prompt computed whole though its
                      chunks are cached; streamed echo sends the prompt first;
                      n=3 choices, unary and streamed, echo the same prompt
                      logprobs, the prompt computed once
  n_prefill_once      n=4 choices of one new ~1,200-token prompt (longer than a
                      forward pass): the workers compute it once
                      (kvcast_prompt_tokens_computed_total grows by less than
                      twice the prompt: the other three choices wait for its
                      128-token chunks and reuse them), and the decode worker
                      lands it once (the others share its full chunks)
  disconnect_cancels  closing a long stream frees the scheduler's queue slot
                      and the decode worker's KV pages
  concurrent_streams  8 streams at once, each complete
  grpc_api_key        the same keys guard gRPC (kvcast generate --api_key)
  tls_required        plain HTTP gets no answer on the HTTPS port; a client
                      without the cluster's CA refuses the certificate
  health_and_metrics  /health 200; /metrics counts the HTTP requests
Writes one JUnit <testcase> per check to --xml; exits 1 if any failed.

Usage (see openai_client_test.sh): openai_client_test.py --xml OUT --work DIR
  --model GGUF --kvcast BIN --scheduler BIN --prefill BIN --decode BIN --relay BIN
"""
import argparse
import concurrent.futures
import json
import os
import pathlib
import signal
import subprocess
import sys
import http.client as http_client
import ssl
import urllib.error
import urllib.request

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import CheckError, Cluster, Runner, expect, log, scrape, wait_for  # noqa: E402

KEY = "kvcast-test-key-alice-0123456789"
OTHER_KEY = "kvcast-test-key-mallory-0123456789"
SYSTEM = ("You are kvcast, the assistant of a disaggregated LLM inference service. kvcast splits "
          "each request in two: a prefill worker computes the attention keys and values (the KV "
          "cache) of the prompt, and a decode worker generates the answer one token at a time. The "
          "prefill worker publishes the KV cache in chunks of 128 tokens over MoQT, a publish and "
          "subscribe protocol that runs on QUIC. Relays between the workers keep a copy of every "
          "chunk, so a later request that starts with the same text fetches its KV cache instead "
          "of computing it again. Keep your answers short.")


# The cluster's CA (ssl.SSLContext), set once the cluster is up.
TLS = None


def client(address, api_key=KEY, timeout=60):
    """The official client, verifying the API's certificate with the CA."""
    return openai.OpenAI(base_url=f"https://{address}/v1", api_key=api_key, max_retries=0,
                         timeout=timeout,
                         http_client=openai.DefaultHttpxClient(verify=TLS, timeout=timeout))


def http(address, path, body=None, key=KEY, timeout=30):
    """(status, headers, body bytes) of a GET (body None) or JSON POST."""
    req = urllib.request.Request(f"https://{address}{path}",
                                 data=None if body is None else json.dumps(body).encode(),
                                 method="GET" if body is None else "POST")
    if body is not None:
        req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=TLS) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


class Checks:
    def __init__(self, cluster, kvcast):
        self.cluster = cluster
        self.kvcast = kvcast
        self.client = client(cluster.http)
        self.model = None

    def ready(self):
        wait_for("/health 200", lambda: http(self.cluster.http, "/health")[0] == 200, 60)
        models = self.client.models.list().data
        expect(len(models) == 1, f"models: {models}")
        self.model = models[0].id

    def models(self):
        status, _, body = http(self.cluster.http, "/v1/models")
        expect(status == 200, f"/v1/models: {status}")
        data = json.loads(body)
        expect(data["object"] == "list" and len(data["data"]) == 1, f"/v1/models: {data}")
        m = data["data"][0]
        for field in ("id", "object", "created", "owned_by", "max_model_len"):
            expect(field in m, f"/v1/models lacks {field}: {m}")
        expect(m["object"] == "model" and m["max_model_len"] == 8192, f"/v1/models: {m}")

    def auth(self):
        bad = client(self.cluster.http, api_key="not-a-key", timeout=30)
        for call in (lambda: bad.models.list(),
                     lambda: bad.completions.create(model=self.model, prompt="hi", max_tokens=2)):
            try:
                call()
                raise AssertionError("a wrong API key was accepted")
            except openai.AuthenticationError as e:
                expect(e.status_code == 401, f"status {e.status_code}")
        status, headers, body = http(self.cluster.http, "/v1/models", key=None)
        expect(status == 401 and headers.get("WWW-Authenticate") == "Bearer",
               f"no key: {status} {dict(headers)} {body!r}")
        expect(json.loads(body)["error"]["code"] == "invalid_api_key", body)

    def completion_stream(self):
        args = dict(model=self.model, prompt="The three primary colors are", max_tokens=16,
                    temperature=0)
        unary = self.client.completions.create(**args)
        expect(unary.object == "text_completion" and unary.choices[0].text, f"{unary}")
        expect(unary.usage.completion_tokens == 16 and unary.choices[0].finish_reason == "length",
               f"{unary.usage} {unary.choices[0].finish_reason}")
        chunks = list(self.client.completions.create(
            **args, stream=True, stream_options={"include_usage": True}))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        expect(text == unary.choices[0].text, f"stream {text!r} != unary {unary.choices[0].text!r}")
        reasons = [c.choices[0].finish_reason for c in chunks if c.choices]
        expect(reasons[-1] == "length" and all(r is None for r in reasons[:-1]), f"{reasons}")
        expect(not chunks[-1].choices and chunks[-1].usage.completion_tokens == 16,
               f"last chunk {chunks[-1]}")

    def chat_messages(self, question):
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]

    def chat_stream(self):
        args = dict(model=self.model, messages=self.chat_messages("What is MoQT?"),
                    max_tokens=24, temperature=0)
        unary = self.client.chat.completions.create(**args)
        expect(unary.object == "chat.completion", f"{unary}")
        msg = unary.choices[0].message
        expect(msg.role == "assistant" and msg.content, f"{msg}")
        chunks = list(self.client.chat.completions.create(
            **args, stream=True, stream_options={"include_usage": True}))
        expect(all(c.object == "chat.completion.chunk" for c in chunks), "chunk objects")
        first = chunks[0].choices[0].delta
        expect(first.role == "assistant" and first.content == "", f"first chunk {chunks[0]}")
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        expect(text == msg.content, f"stream {text!r} != unary {msg.content!r}")
        reasons = [c.choices[0].finish_reason for c in chunks if c.choices]
        expect(reasons[-1] in ("stop", "length") and all(r is None for r in reasons[:-1]),
               f"{reasons}")
        usage = chunks[-1].usage
        expect(not chunks[-1].choices and usage.completion_tokens == unary.usage.completion_tokens
               and usage.prompt_tokens == unary.usage.prompt_tokens, f"usage {usage} vs {unary.usage}")
        expect(usage.prompt_tokens_details is not None, f"no prompt_tokens_details: {usage}")

    def cached_tokens(self):
        first = self.client.chat.completions.create(
            model=self.model, messages=self.chat_messages("Name one relay feature."), max_tokens=4)
        second = self.client.chat.completions.create(
            model=self.model, messages=self.chat_messages("What does decode do?"), max_tokens=4)
        cached = second.usage.prompt_tokens_details.cached_tokens
        log(f"prompt tokens {second.usage.prompt_tokens}, cached {cached} "
            f"(first request: {first.usage.prompt_tokens_details.cached_tokens})")
        expect(second.usage.prompt_tokens > 128 and cached >= 128,
               f"cached_tokens {cached} of {second.usage.prompt_tokens}")

    def tenant_isolation(self):
        """The API key's tenant salts the prefix cache: mallory's copy of
        alice's (cached) conversation reports no cached tokens."""
        mallory = client(self.cluster.http, api_key=OTHER_KEY)
        messages = self.chat_messages("Which tenant am I?")
        alice = [self.client.chat.completions.create(model=self.model, messages=messages,
                                                     max_tokens=2) for _ in range(2)]
        other = mallory.chat.completions.create(model=self.model, messages=messages, max_tokens=2)
        cached = [r.usage.prompt_tokens_details.cached_tokens for r in alice + [other]]
        log(f"cached tokens: alice {cached[0]}, alice again {cached[1]}, mallory {cached[2]}")
        expect(cached[1] >= 128 and cached[2] == 0, f"cached tokens {cached}")

    def bad_requests(self):
        cases = [
            ("max_tokens", lambda: self.client.completions.create(
                model=self.model, prompt="x", max_tokens=0)),
            ("n", lambda: self.client.completions.create(model=self.model, prompt="x", n=65)),
            ("messages[0].content", lambda: self.client.chat.completions.create(
                model=self.model, messages=[{"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}])),
            ("temperature", lambda: self.client.chat.completions.create(
                model=self.model, messages=[{"role": "user", "content": "x"}], temperature=-1)),
        ]
        for param, call in cases:
            try:
                call()
                raise AssertionError(f"a bad {param} was accepted")
            except openai.BadRequestError as e:
                expect(e.status_code == 400 and e.body and e.body.get("param") == param,
                       f"{param}: {e.status_code} {e.body}")
        try:
            self.client.completions.create(model="no-such-model", prompt="x", max_tokens=1)
            raise AssertionError("an unknown model was accepted")
        except openai.NotFoundError as e:
            expect(e.body.get("code") == "model_not_found", f"{e.body}")
        status, _, body = http(self.cluster.http, "/v1/completions", body=None)
        expect(status == 405, f"GET /v1/completions: {status} {body!r}")

    def min_tokens(self):
        args = dict(model=self.model, prompt="The capital of France is", max_tokens=12,
                    temperature=0, stop=["."])
        short = self.client.completions.create(**args)
        held = self.client.completions.create(**args, extra_body={"min_tokens": 8})
        log(f"stop '.': {short.choices[0].text!r} ({short.usage.completion_tokens} tokens); "
            f"min_tokens 8: {held.choices[0].text!r} ({held.usage.completion_tokens})")
        expect(short.usage.completion_tokens < 8, f"{short}")
        expect(held.usage.completion_tokens >= 8, f"{held}")

    def tokens(self, text):
        status, _, body = http(self.cluster.http, "/tokenize",
                               body={"model": self.model, "prompt": text, "add_special_tokens": False})
        expect(status == 200, f"/tokenize: {status} {body!r}")
        return json.loads(body)["tokens"]

    def penalties_and_logit_bias(self):
        # A token biased +100 is every greedy token; the official client
        # sends logit_bias keyed by id strings, as OpenAI's API takes it.
        args = dict(model=self.model, prompt="The three primary colors are", max_tokens=6, temperature=0)
        [blue] = self.tokens(" blue")
        forced = self.client.completions.create(**args, logit_bias={str(blue): 100})
        expect(forced.choices[0].text == " blue" * 6, f"logit_bias +100 on ' blue': {forced.choices[0].text!r}")
        banned = self.client.completions.create(**args, logit_bias={str(blue): -100})
        expect(blue not in self.tokens(banned.choices[0].text), f"banned ' blue': {banned.choices[0].text!r}")
        # Penalties change a greedy answer; a negative frequency penalty
        # (each occurrence raises a token's logit by 2) makes it repeat.
        loop_args = dict(model=self.model, prompt="la la la la la la la la", max_tokens=24, temperature=0)
        plain = self.client.completions.create(**loop_args).choices[0].text
        freq = self.client.completions.create(**loop_args, frequency_penalty=2.0).choices[0].text
        pres = self.client.completions.create(**loop_args, presence_penalty=2.0).choices[0].text
        echo = self.client.completions.create(**loop_args, frequency_penalty=-2.0).choices[0].text

        def most_repeated(text):
            ids = self.tokens(text)
            return max(ids.count(t) for t in set(ids)) if ids else 0
        log(f"greedy: {plain!r}; frequency_penalty 2: {freq!r}; presence_penalty 2: {pres!r}; "
            f"frequency_penalty -2: {echo!r}")
        expect(freq != plain and pres != plain, "a penalty of 2 changed nothing")
        expect(most_repeated(echo) > most_repeated(plain),
               f"frequency_penalty -2 repeats no more: {echo!r} against {plain!r}")
        for bad in (dict(frequency_penalty=2.5), dict(logit_bias={"99999999": 1})):
            try:
                self.client.completions.create(**args, **bad)
                raise AssertionError(f"{bad} was accepted")
            except openai.BadRequestError as e:
                expect(e.status_code == 400, f"{bad}: {e.status_code} {e.body}")

    def best_of(self):
        args = dict(model=self.model, prompt="The best color for a barn is", max_tokens=8,
                    temperature=1.0, seed=7)
        best = self.client.completions.create(**args, n=2, best_of=4)
        every = self.client.completions.create(**args, n=4, logprobs=0)
        # The same seeds (7..10) give the same four candidates; rank them here.
        ranked = sorted(range(4), key=lambda i: -sum(every.choices[i].logprobs.token_logprobs))
        want = [every.choices[i].text for i in ranked[:2]]
        got = [c.text for c in best.choices]
        expect([c.index for c in best.choices] == [0, 1], f"indices {[c.index for c in best.choices]}")
        expect(got == want, f"best_of gave {got}, the two most likely of {[c.text for c in every.choices]} "
                            f"are {want}")
        expect(all(c.logprobs is None for c in best.choices), "logprobs not asked for came back")
        expect(best.usage.completion_tokens == every.usage.completion_tokens,
               f"usage {best.usage.completion_tokens} != all four's {every.usage.completion_tokens}")
        expect(len(set(c.text for c in every.choices)) > 1, "four samples, all the same")
        log(f"best_of=4 n=2: {got} of {[c.text for c in every.choices]}")

    def echo_logprobs(self):
        workers = [self.cluster.metrics[w] for w in ("prefill-0", "decode-0")]

        def computed():
            return sum(scrape(w, "kvcast_prompt_tokens_computed_total") for w in workers)

        for name, prompt, within in (("short", "The capital of France is", 1e-4),
                                     ("long", " ".join([SYSTEM] * 2) + " The capital of France is", 0.5)):
            ids = self.tokens(prompt)
            gen = self.client.completions.create(model=self.model, prompt=ids, max_tokens=6,
                                                 temperature=0, logprobs=1)
            g = gen.choices[0].logprobs
            gen_ids = self.tokens(gen.choices[0].text)
            expect(len(gen_ids) == 6, f"{name}: {gen.choices[0].text!r} tokenizes to {gen_ids}, not 6 tokens")
            whole = ids + gen_ids
            for max_tokens in (0, 1):  # lm-eval sends 1 and drops the last
                before = computed()
                r = self.client.completions.create(model=self.model, prompt=whole, max_tokens=max_tokens,
                                                   temperature=0, logprobs=1, echo=True)
                c = r.choices[0]
                lp = c.logprobs
                n = len(whole) + max_tokens
                expect(len(lp.tokens) == n and len(lp.token_logprobs) == n and len(lp.top_logprobs) == n,
                       f"{name}: {len(lp.tokens)} tokens for a {len(whole)}-token prompt + {max_tokens}")
                expect(lp.token_logprobs[0] is None and lp.top_logprobs[0] is None,
                       f"{name}: the first prompt token has {lp.token_logprobs[0]}")
                expect(c.text.startswith(prompt + gen.choices[0].text),
                       f"{name}: echoed text {c.text[:80]!r}...")
                expect(r.usage.completion_tokens == max_tokens and r.usage.prompt_tokens == len(whole),
                       f"{name}: usage {r.usage}")
                echoed = slice(len(ids), len(whole))
                expect(lp.tokens[echoed] == g.tokens, f"{name}: {lp.tokens[echoed]} != {g.tokens}")
                worst = max(abs(a - b) for a, b in zip(lp.token_logprobs[echoed], g.token_logprobs))
                expect(worst < within, f"{name}: prompt logprobs {lp.token_logprobs[echoed]} against "
                                       f"generated {g.token_logprobs}")
                # lm-eval's is_greedy: each continuation token is its position's top.
                expect(name != "short" or all(t == max(top.values()) for t, top in
                                              zip(lp.token_logprobs[echoed], lp.top_logprobs[echoed])),
                       f"{name}: not greedy: {lp.top_logprobs[echoed]}")
                grew = computed() - before
                expect(grew >= len(whole), f"{name}: {grew} prompt tokens computed for {len(whole)}")
                log(f"echo {name} max_tokens={max_tokens}: {len(whole)} tokens, continuation logprobs "
                    f"within {worst:.2g} of the generated ones, {grew:.0f} computed")
        # Streamed, without logprobs: the prompt first, then the answer.
        args = dict(model=self.model, prompt="The capital of France is", max_tokens=4, temperature=0, echo=True)
        unary = self.client.completions.create(**args).choices[0].text
        chunks = [c.choices[0].text for c in self.client.completions.create(**args, stream=True)]
        expect(chunks[0] == args["prompt"], f"first chunk {chunks[0]!r}")
        expect("".join(chunks) == unary, f"streamed {''.join(chunks)!r} != {unary!r}")
        # n choices: the first computes the prompt and its logprobs, the
        # others take its KV and echo its logprobs.
        for stream in (False, True):
            prompt = f"Note {os.getpid()} {stream}. " + " ".join([SYSTEM] * 2)
            before = computed()
            r = self.client.completions.create(model=self.model, prompt=prompt, max_tokens=3, temperature=1.0,
                                               seed=5, n=3, logprobs=1, echo=True, stream=stream)
            echoed = {}
            if stream:
                for c in r:
                    for ch in c.choices:
                        if ch.logprobs and ch.index not in echoed:  # the prompt's chunk comes first
                            echoed[ch.index] = ch.logprobs.token_logprobs
            else:
                echoed = {ch.index: ch.logprobs.token_logprobs for ch in r.choices}
            n = len(self.tokens(prompt)) + 1  # BOS
            expect(sorted(echoed) == [0, 1, 2], f"stream={stream}: choices {sorted(echoed)}")
            expect(all(echoed[i][:n] == echoed[0][:n] for i in (1, 2)) and echoed[0][0] is None and
                   all(isinstance(x, float) for x in echoed[0][1:n]), f"stream={stream}: prompt logprobs differ")
            grew = computed() - before
            expect(n <= grew < 2 * n, f"stream={stream}: {grew:.0f} prompt tokens computed for 3 choices of {n}")
            log(f"echo n=3 stream={stream}: {n}-token prompt computed once ({grew:.0f} tokens)")

    def n_prefill_once(self):
        workers = [self.cluster.metrics[w] for w in ("prefill-0", "decode-0")]

        def computed():
            return sum(scrape(w, "kvcast_prompt_tokens_computed_total") for w in workers)

        before = computed()
        decode = self.cluster.metrics["decode-0"]
        shared_before = scrape(decode, "kvcast_decode_local_cached_tokens_total")
        # Longer than a forward pass takes (--max_batch_tokens): the first
        # choice's prompt is still being computed when the others arrive.
        prompt = f"Note {os.getpid()}. " + " ".join([SYSTEM] * 9) + " In one sentence:"
        r = self.client.completions.create(model=self.model, prompt=prompt, n=4, max_tokens=4,
                                           temperature=1.0, seed=3)
        spent = computed() - before
        n = r.usage.prompt_tokens
        expect(len(r.choices) == 4, f"{len(r.choices)} choices")
        expect(n >= 1024, f"the prompt is {n} tokens: shorter than the test means")
        expect(n <= spent < 2 * n,
               f"4 choices of a {n}-token prompt computed {spent:.0f} prompt tokens (once: {n} "
               f"and three tails under 128)")
        # The decode worker lands it once too: the other three share its
        # full chunks (from its prefix cache, not landed again).
        shared = scrape(decode, "kvcast_decode_local_cached_tokens_total") - shared_before
        full = n // 128 * 128
        expect(shared >= 3 * full, f"the decode worker shared {shared:.0f} prompt tokens, "
                                   f"not the 3 x {full} of the other choices")
        log(f"n=4 of a {n}-token prompt: {spent:.0f} prompt tokens computed (4 x {n} = {4 * n} "
            f"if each choice computed its own); decode shared {shared:.0f} of them")

    def disconnect_cancels(self):
        metrics = self.cluster.metrics["scheduler"]
        decode = self.cluster.metrics["decode-0"]
        pages_before = scrape(decode, "kvcast_kv_pages_used")
        stream = self.client.completions.create(
            model=self.model, prompt="Count: 1, 2, 3,", max_tokens=4000, stream=True,
            extra_body={"ignore_eos": True})
        for i, _ in enumerate(stream):
            if i == 3:
                break
        expect(scrape(metrics, "kvcast_queue_depth") >= 1, "the stream is not in flight")
        pages_during = scrape(decode, "kvcast_kv_pages_used")
        expect(pages_during > pages_before, f"decode pages {pages_before} -> {pages_during}")
        stream.close()
        took = wait_for("queue depth back to 0", lambda: scrape(metrics, "kvcast_queue_depth") == 0, 10)
        freed = wait_for("decode pages freed",
                         lambda: scrape(decode, "kvcast_kv_pages_used") <= pages_before, 10)
        log(f"queue slot freed {took:.2f} s and decode pages ({pages_during:.0f} in use, "
            f"{pages_before:.0f} before) {freed:.2f} s after the client closed its stream")

    def concurrent_streams(self):
        def one(i):
            chunks = list(self.client.chat.completions.create(
                model=self.model, messages=[{"role": "user", "content": f"Say a number above {i}."}],
                max_tokens=12, stream=True, stream_options={"include_usage": True}))
            return chunks[-1].usage.completion_tokens, chunks[-2].choices[0].finish_reason
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            results = list(pool.map(one, range(8)))
        expect(all(n >= 1 and r in ("stop", "length") for n, r in results), f"{results}")

    def grpc_api_key(self):
        """The same keys guard gRPC: `kvcast generate --scheduler` without a
        key is UNAUTHENTICATED, with --api_key it is served."""
        cmd = [self.kvcast, "generate", "--scheduler", self.cluster.address, "--prompt_ids",
               "1,2,3", "--max_tokens", "2"]
        env = {k: v for k, v in os.environ.items() if k != "KVCAST_API_KEY"}
        without = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
        with_key = subprocess.run(cmd + ["--api_key", OTHER_KEY], capture_output=True, text=True,
                                  timeout=60, env=env)
        log(f"kvcast generate: without a key exit {without.returncode} "
            f"({without.stderr.strip().splitlines()[-1] if without.stderr.strip() else ''}); "
            f"with one exit {with_key.returncode}")
        expect(without.returncode != 0 and "UNAUTHENTICATED" in without.stderr, without.stderr)
        expect(with_key.returncode == 0, with_key.stderr)

    def tls_required(self):
        """Plain HTTP on the HTTPS port gets no answer; a client that does not
        trust the cluster's CA refuses the certificate."""
        try:
            urllib.request.urlopen(f"http://{self.cluster.http}/health", timeout=10)
            raise CheckError("plain HTTP was answered on the HTTPS port")
        except (urllib.error.URLError, ConnectionError, http_client.HTTPException) as e:
            log(f"plain HTTP: {type(e).__name__}: {e}")
        try:
            urllib.request.urlopen(f"https://{self.cluster.http}/health", timeout=10,
                                   context=ssl.create_default_context())
            raise CheckError("a client without the cluster's CA accepted the certificate")
        except urllib.error.URLError as e:
            expect(isinstance(e.reason, ssl.SSLCertVerificationError), f"{e!r}")
            log(f"without the CA: {e.reason.verify_message}")

    def health_and_metrics(self):
        status, _, body = http(self.cluster.http, "/health", key=None)
        expect(status == 200, f"/health {status} {body!r}")
        n = scrape(self.cluster.http, "kvcast_http_requests_total", {"route": "chat"}, TLS)
        expect(n >= 10, f"kvcast_http_requests_total{{route=chat}} = {n}")


def main():
    ap = argparse.ArgumentParser()
    for flag in ("xml", "work", "model", "kvcast", "scheduler", "prefill", "decode", "relay"):
        ap.add_argument("--" + flag, required=True)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # Bazel's timeout: still stop the cluster
    work = pathlib.Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    keys = work / "api_keys"
    keys.write_text(f"# test keys\n{KEY} alice\n{OTHER_KEY} mallory\n")
    runner = Runner("openai_client")
    cluster = None
    state = {}

    def setup():
        nonlocal cluster
        global TLS
        cluster = Cluster(args, args.model, work,
                          [f"--scheduler_flags=--api_keys_file={keys}", "--http_tls"])
        cluster.start()
        expect(cluster.http, "cluster up printed no OpenAI-compatible API address")
        expect(cluster.http_scheme == "https" and cluster.http_ca,
               f"cluster up --http_tls printed {cluster.http_scheme}://, CA {cluster.http_ca}")
        TLS = ssl.create_default_context(cafile=cluster.http_ca)
        state["checks"] = Checks(cluster, args.kvcast)
        state["checks"].ready()

    try:
        if runner.run("setup", setup):
            c = state["checks"]
            for name in ("models", "auth", "completion_stream", "chat_stream", "cached_tokens",
                         "tenant_isolation", "bad_requests", "min_tokens", "penalties_and_logit_bias",
                         "best_of", "echo_logprobs", "n_prefill_once",
                         "disconnect_cancels",
                         "concurrent_streams", "grpc_api_key", "tls_required",
                         "health_and_metrics"):
                runner.run(name, getattr(c, name))
    finally:
        if cluster is not None:
            runner.stop_cluster(cluster)
    return runner.finish(args.xml, cluster)


if __name__ == "__main__":
    sys.exit(main())
