"""Structured output (response_format) seen by the official `openai` client.

Starts `kvcast cluster up` on SmolLM2-135M-Instruct (GGUF) with 1 prefill
and 2 decode workers and PD fusion off (--pd_fusion_tokens=0: every request
goes prefill -> MoQT -> decode), then, with PyPI's `openai`, `pydantic` and
`jsonschema` packages and no kvcast code:
  parse_models     client.beta.chat.completions.parse(response_format=M) for
                   20 pydantic models of increasing depth (enums, optionals,
                   lists with bounds, numeric bounds, patterns, nested and
                   recursive models, unions, dates, UUIDs): every answer parses into M and validates
                   with jsonschema against the schema the client sent
  json_object      response_format {"type": "json_object"} on chat and
                   completions: the text is a JSON object
  guided           vLLM's guided_choice and guided_regex (extra_body): the
                   answer is one of the choices / matches the whole regex;
                   structured_outputs (vLLM 0.12's names) grammar: vLLM's
                   own SQL example (checked with a Python regex of the same
                   language) and a recursive one (sampled, 4 seeds: each
                   answer parsed by a Python recursive-descent parser); a
                   grammar with an undefined rule: 400 naming it
  tool_calls       tool_choice naming a function, and "required" over two:
                   message.tool_calls holds the call (finish_reason
                   tool_calls), its arguments valid under the tool's
                   parameters; the streamed deltas, accumulated, are the
                   same call
  n_choices        n=4 sampled choices of one structured request: indices
                   0-3, each valid, not all the same, the prompt counted once
                   in the usage; with a seed the same four again
  refused_schema   a schema keyword kvcast does not enforce: 400 naming it,
                   with param response_format
  decode_killed    two long structured streams; the decode worker serving
                   them (one with running sequences) is killed -9 while they
                   stream: the scheduler resumes on the other (the output
                   so far replayed through the grammar), and both texts
                   validate and equal the same requests run unharmed
Writes one JUnit <testcase> per check to --xml; exits 1 if any failed.

Usage: structured_output_test.py --xml OUT --work DIR --model GGUF --kvcast BIN
  --scheduler BIN --prefill BIN --decode BIN --relay BIN
"""
import argparse
import concurrent.futures
import datetime
import enum
import importlib.metadata
import json
import os
import pathlib
import re
import signal
import sys
import threading
import time
import uuid
from typing import Annotated, List, Literal, Optional, Union

import jsonschema
import openai
import pydantic
from pydantic import BaseModel, Field

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import CheckError, Cluster, Runner, expect, log, scrape, wait_for  # noqa: E402

Name = Field(max_length=24)


class Color(str, enum.Enum):
    red = "red"
    green = "green"
    blue = "blue"


class Person(BaseModel):
    name: str = Name
    age: int = Field(ge=0, le=130)


class Flags(BaseModel):
    active: bool
    level: Literal["low", "mid", "high"]


class MaybeAge(BaseModel):
    name: str = Name
    age: Optional[int]


class Tags(BaseModel):
    tags: List[str] = Field(max_length=3)


class Address(BaseModel):
    city: str = Name
    country: str = Name


class Resident(BaseModel):
    name: str = Name
    address: Address


class Team(BaseModel):
    team: str = Name
    members: List[Person] = Field(max_length=2)


class Paint(BaseModel):
    color: Color
    coats: int


class Price(BaseModel):
    item: str = Name
    price: float = Field(gt=0)


class Event(BaseModel):
    title: str = Name
    day: datetime.date


class Ticket(BaseModel):
    id: uuid.UUID
    seat: int
    flight: str = Field(pattern=r"^[A-Z]{2}\d{3,4}$")


class Country(BaseModel):
    name: str = Name
    capital: Resident


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool


class Pet(BaseModel):
    pet: Union[Cat, Dog]


class Tree(BaseModel):
    label: str = Field(max_length=8)
    children: List["Tree"] = Field(max_length=2)


class Scores(BaseModel):
    scores: List[Annotated[int, Field(ge=0, le=100)]] = Field(min_length=1, max_length=4)


class Dice(BaseModel):
    roll: Literal[1, 2, 3, 4, 5, 6]


class Grid(BaseModel):
    rows: List[List[int]] = Field(max_length=2)


class Profile(BaseModel):
    first: str = Name
    last: str = Name
    age: int
    email: str = Name
    active: bool
    color: Color
    tags: List[Annotated[str, Field(max_length=12)]] = Field(max_length=2)
    score: float


class Company(BaseModel):
    name: str = Name
    ceo: Person
    office: Resident
    teams: List[Team] = Field(max_length=1)


# (model, question, sampling): greedy unless a seed is given; a 135M model
# decoding greedily repeats itself inside an unbounded construct (a
# recursive tree nests until max_tokens), valid JSON all the way but never
# finished, so the recursive model is sampled.
MODELS = [
    (Person, "Describe a person named Ana who is 31."),
    (Flags, "Is the alarm active, and at what level?"),
    (MaybeAge, "Name a famous painter and his age if known."),
    (Tags, "Give up to three tags for a post about cats."),
    (Address, "Where is the Eiffel Tower?"),
    (Resident, "Describe someone who lives in Lisbon."),
    (Team, "Describe a small team of two engineers."),
    (Paint, "What color should I paint a barn, and how many coats?"),
    (Price, "How much does a coffee cost?"),
    (Event, "When is New Year's Day 2027?"),
    (Ticket, "Issue a plane ticket."),
    (Country, "Describe France and someone in its capital."),
    (Pet, "Describe a pet."),
    (Tree, "Describe a small family tree.", dict(temperature=0.8, seed=1)),
    (Scores, "List some test scores."),
    (Dice, "Roll a die."),
    (Grid, "Give a 2x2 grid of numbers."),
    (Profile, "Make a user profile for a gardener."),
    (Company, "Describe a small company."),
    (Person, "Describe the oldest person you know of."),
]
SYSTEM = "You are a helpful assistant. Answer in JSON."


class Checks:
    def __init__(self, cluster):
        self.cluster = cluster
        self.client = openai.OpenAI(base_url=f"http://{cluster.http}/v1", api_key="none",
                                    max_retries=0, timeout=120)
        self.model = None

    def ready(self):
        models = self.client.models.list().data
        self.model = models[0].id

    def chat(self, question):
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]

    def parse_models(self):
        failures = []
        tokens = 0
        for i, (model, question, *sampling) in enumerate(MODELS):
            sent = openai.lib._pydantic.to_strict_json_schema(model)
            t = time.monotonic()
            try:
                r = self.client.beta.chat.completions.parse(
                    model=self.model, messages=self.chat(question), response_format=model,
                    max_tokens=400, **(sampling[0] if sampling else dict(temperature=0)))
            except Exception as e:  # noqa: BLE001 - each model's failure is reported
                failures.append(f"{model.__name__}: {e!r}")
                continue
            msg = r.choices[0].message
            tokens += r.usage.completion_tokens
            log(f"{i + 1:2d} {model.__name__:9s} {r.usage.completion_tokens:3d} tokens "
                f"{time.monotonic() - t:5.2f} s: {msg.content}")
            try:
                expect(r.choices[0].finish_reason == "stop", f"finish {r.choices[0].finish_reason}")
                expect(isinstance(msg.parsed, model), f"parsed {msg.parsed!r}")
                jsonschema.validate(json.loads(msg.content), sent)
            except Exception as e:  # noqa: BLE001
                failures.append(f"{model.__name__}: {e}")
        expect(not failures, "\n".join(failures))
        log(f"{len(MODELS)} models, {tokens} tokens, all valid")

    def json_object(self):
        r = self.client.chat.completions.create(
            model=self.model,
            messages=self.chat("Give me a JSON object with the moon's name and its distance from Earth."),
            response_format={"type": "json_object"}, max_tokens=300, temperature=0)
        expect(r.choices[0].finish_reason == "stop", f"{r}")
        expect(isinstance(json.loads(r.choices[0].message.content), dict), f"{r}")
        c = self.client.completions.create(
            model=self.model, prompt="A JSON record of a book:", max_tokens=300, temperature=0.7,
            seed=3, extra_body={"response_format": {"type": "json_object"}})
        expect(c.choices[0].finish_reason == "stop", f"{c}")
        expect(isinstance(json.loads(c.choices[0].text), dict), f"{c.choices[0].text!r}")

    def guided(self):
        choices = ["positive", "negative", "neutral"]
        r = self.client.chat.completions.create(
            model=self.model, messages=self.chat("Is 'I loved this film' positive or negative?"),
            max_tokens=20, temperature=0, extra_body={"guided_choice": choices})
        expect(r.choices[0].message.content in choices and r.choices[0].finish_reason == "stop",
               f"{r.choices[0]}")
        c = self.client.completions.create(
            model=self.model, prompt="The first moon landing happened on", max_tokens=20,
            temperature=0, extra_body={"guided_regex": r" \d{4}-\d{2}-\d{2}"})
        expect(re.fullmatch(r" \d{4}-\d{2}-\d{2}", c.choices[0].text) is not None, f"{c.choices[0]}")
        log(f"guided_choice: {r.choices[0].message.content!r}; guided_regex: {c.choices[0].text!r}")
        sql = '''
            root ::= select_statement
            select_statement ::= "SELECT " column " from " table " where " condition
            column ::= "col_1 " | "col_2 "
            table ::= "table_1 " | "table_2 "
            condition ::= column "= " number
            number ::= "1 " | "2 "
        '''
        r = self.client.chat.completions.create(
            model=self.model, messages=self.chat("Write a SQL query that selects col_1 from table_1."),
            max_tokens=40, temperature=0, extra_body={"structured_outputs": {"grammar": sql}})
        got = r.choices[0].message.content
        expect(re.fullmatch(r"SELECT (col_1 |col_2 ) from (table_1 |table_2 ) where (col_1 |col_2 )= (1 |2 )",
                            got) is not None and r.choices[0].finish_reason == "stop", f"{r.choices[0]}")
        # Nested lists of digits: recursion the matcher expands top-down.
        nested = r'''
            root  ::= list
            list  ::= "[" (item ("," item)*)? "]"
            item  ::= [0-9]{1,3} | list   # a number or a list
        '''

        def parse(s, i=0):  # index after the list starting at s[i], or None
            if i >= len(s) or s[i] != "[":
                return None
            i += 1
            if i < len(s) and s[i] == "]":
                return i + 1
            while True:
                j = i
                while j < len(s) and s[j].isdigit() and j - i < 3:
                    j += 1
                if j == i:
                    j = parse(s, i)
                    if j is None:
                        return None
                i = j
                if i < len(s) and s[i] == ",":
                    i += 1
                    continue
                return i + 1 if i < len(s) and s[i] == "]" else None

        answers = []
        for seed in range(4):
            c = self.client.completions.create(
                model=self.model, prompt="A nested list of numbers:", max_tokens=60, temperature=1.0,
                seed=seed, extra_body={"structured_outputs": {"grammar": nested}})
            text, finish = c.choices[0].text, c.choices[0].finish_reason
            expect(finish == "length" or parse(text) == len(text), f"seed {seed}: {text!r} ({finish})")
            answers.append((text, finish))
        expect(any(f == "stop" for _, f in answers), f"no nested list ended within 60 tokens: {answers}")
        log(f"grammar: {got!r}; nested: {answers}")
        try:
            self.client.completions.create(model=self.model, prompt="x", max_tokens=4,
                                           extra_body={"structured_outputs": {"grammar": "root ::= item"}})
            raise CheckError("a grammar with an undefined rule was accepted")
        except openai.BadRequestError as e:
            expect("rule 'item' is used but not defined" in str(e.body), f"{e.body}")

    def tool_calls(self):
        weather = {"type": "function", "function": {
            "name": "get_weather", "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "maxLength": 30},
                "unit": {"enum": ["celsius", "fahrenheit"]}},
                "required": ["city", "unit"], "additionalProperties": False}}}
        clock = {"type": "function", "function": {
            "name": "get_time", "parameters": {"type": "object", "properties": {
                "zone": {"type": "string", "maxLength": 30}}, "required": ["zone"]}}}
        tools = [weather, clock]
        params = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
        messages = self.chat("What is the weather in Lisbon?")
        for choice in ({"type": "function", "function": {"name": "get_weather"}}, "required"):
            r = self.client.chat.completions.create(
                model=self.model, messages=messages, tools=tools, tool_choice=choice,
                max_tokens=120, temperature=0)
            c = r.choices[0]
            expect(c.finish_reason == "tool_calls" and c.message.tool_calls, f"{choice}: {c}")
            call = c.message.tool_calls[0]
            expect(call.type == "function" and call.id.startswith("chatcmpl-tool-"), f"{call}")
            if choice != "required":
                expect(call.function.name == "get_weather", f"{call}")
            args = json.loads(call.function.arguments)
            jsonschema.validate(args, params[call.function.name])
            # Streamed, accumulated as clients do: the same call.
            name, arguments, finish = None, "", None
            for chunk in self.client.chat.completions.create(
                    model=self.model, messages=messages, tools=tools, tool_choice=choice,
                    max_tokens=120, temperature=0, stream=True):
                if not chunk.choices:
                    continue
                d = chunk.choices[0].delta
                for tc in d.tool_calls or []:
                    name = tc.function.name or name
                    arguments += tc.function.arguments or ""
                finish = chunk.choices[0].finish_reason or finish
            expect((name, json.loads(arguments), finish) == (call.function.name, args, "tool_calls"),
                   f"stream {name} {arguments} {finish} != {call.function}")
            log(f"tool_choice {choice}: {call.function.name}({call.function.arguments})")

    def n_choices(self):
        schema = openai.lib._pydantic.to_strict_json_schema(Paint)
        fmt = {"type": "json_schema", "json_schema": {"name": "paint", "schema": schema, "strict": True}}
        args = dict(model=self.model, messages=self.chat("What color should I paint a barn?"),
                    response_format=fmt, max_tokens=60, temperature=1.0)
        one = self.client.chat.completions.create(**args, n=1, seed=7)
        r = self.client.chat.completions.create(**args, n=4, seed=7)
        expect([c.index for c in r.choices] == [0, 1, 2, 3], f"{r.choices}")
        texts = [c.message.content for c in r.choices]
        for t in texts:
            jsonschema.validate(json.loads(t), schema)
        expect(len(set(texts)) > 1, f"four samples, all {texts[0]!r}")
        expect(r.usage.prompt_tokens == one.usage.prompt_tokens,
               f"prompt counted {r.usage.prompt_tokens}, once is {one.usage.prompt_tokens}")
        expect(texts[0] == one.choices[0].message.content, "choice 0 is the n=1 answer of the seed")
        again = self.client.chat.completions.create(**args, n=4, seed=7)
        expect([c.message.content for c in again.choices] == texts, "the seed reproduces the choices")
        log(f"n=4: {texts}")

    def refused_schema(self):
        try:
            self.client.chat.completions.create(
                model=self.model, messages=self.chat("hi"), max_tokens=5,
                response_format={"type": "json_schema", "json_schema": {
                    "name": "n", "schema": {"type": "object", "properties": {
                        "n": {"type": "integer", "multipleOf": 3}}}}})
            raise AssertionError("a schema with multipleOf was accepted")
        except openai.BadRequestError as e:
            body = e.body if isinstance(e.body, dict) else {}
            expect("'multipleOf' at #/properties/n" in str(e) and body.get("param") == "response_format",
                   f"{e}")

    def decode_killed(self):
        schema = {"type": "object", "properties": {
            "numbers": {"type": "array", "items": {"type": "integer"}, "minItems": 24, "maxItems": 30},
            "done": {"type": "boolean"}}, "required": ["numbers", "done"], "additionalProperties": False}
        fmt = {"type": "json_schema", "json_schema": {"name": "numbers", "schema": schema, "strict": True}}
        questions = ["Count from one upwards.", "List the squares of the first numbers."]

        def run(question, kill_after=None):
            chunks = self.client.chat.completions.create(
                model=self.model, messages=self.chat(question), response_format=fmt,
                max_tokens=400, temperature=0, stream=True)
            text, n = "", 0
            for c in chunks:
                if c.choices and c.choices[0].delta.content:
                    text += c.choices[0].delta.content
                    n += 1
                    if kill_after is not None and n == 8:
                        kill_after.wait(30)
            return text

        unharmed = [run(q) for q in questions]
        retries = scrape(self.cluster.metrics["scheduler"], "kvcast_retries_total")
        both_streaming = threading.Barrier(3)
        gate = threading.Event()

        def streaming(q):
            class Hook:
                def wait(self, t):
                    both_streaming.wait(t)
                    gate.wait(t)
            return run(q, Hook())

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(streaming, q) for q in questions]
            both_streaming.wait(60)  # both have 8 chunks, held on their decode workers
            running = {n: scrape(self.cluster.metrics[n], "vllm:num_requests_running")
                       for n in ("decode-0", "decode-1")}
            victim = max(running, key=running.get)
            expect(running[victim] >= 1, f"no decode worker runs the streams: {running}")
            os.kill(self.cluster.pids[victim], signal.SIGKILL)
            log(f"killed {victim} (pid {self.cluster.pids[victim]}, running {running}) mid-stream")
            time.sleep(0.2)
            gate.set()
            texts = [f.result(timeout=120) for f in futures]
        for q, text, base in zip(questions, texts, unharmed):
            jsonschema.validate(json.loads(text), schema)
            expect(text == base, f"{q!r}: resumed {text!r} != unharmed {base!r}")
        after = scrape(self.cluster.metrics["scheduler"], "kvcast_retries_total")
        expect(after > retries, f"kvcast_retries_total {retries} -> {after}: nothing was resumed")
        log(f"both outputs valid and unchanged; retries {retries:g} -> {after:g}")


def main():
    ap = argparse.ArgumentParser()
    for flag in ("xml", "work", "model", "kvcast", "scheduler", "prefill", "decode", "relay"):
        ap.add_argument("--" + flag, required=True)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = pathlib.Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    log(f"openai {openai.__version__}, pydantic {pydantic.VERSION}, "
        f"jsonschema {importlib.metadata.version('jsonschema')}")
    runner = Runner("structured_output")
    cluster = None
    state = {}

    def setup():
        nonlocal cluster
        cluster = Cluster(args, args.model, work,
                          ["--decode", "2", "--scheduler_flags=--pd_fusion_tokens=0"])
        cluster.start()
        expect(cluster.http, "cluster up printed no OpenAI-compatible API address")
        state["checks"] = Checks(cluster)
        state["checks"].ready()

    try:
        if runner.run("setup", setup):
            c = state["checks"]
            for name in ("parse_models", "json_object", "guided", "tool_calls", "n_choices",
                         "refused_schema", "decode_killed"):
                runner.run(name, getattr(c, name))
    finally:
        if cluster is not None:
            runner.stop_cluster(cluster)
    return runner.finish(args.xml, cluster)


if __name__ == "__main__":
    sys.exit(main())
