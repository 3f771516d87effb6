#!/usr/bin/env python3
"""Golden renderings of real chat templates by Hugging Face transformers:
each template compiled by transformers' own _compile_jinja_template (what
apply_chat_template renders with), where transformers is installed (the test
venv of `./kvcast.sh test` has it); else (--write on a machine without it)
by Python jinja2 configured by hand as transformers configures it:
ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True, extensions=[generation tag, loopcontrols]), tojson
replaced by json.dumps(x, ensure_ascii=False, indent=, separators=,
sort_keys=), raise_exception and strftime_now as globals. strftime_now is
fixed at 2024-07-26 12:00:00 on both sides (the C++ test registers the same;
transformers' compiled templates get it pinned the same way).

  chat_template_golden.py --write tests/data/chat_templates/golden.json
      writes the seeded cases and Python's renderings (or errors);
  chat_template_golden.py --check TOOL
      renders the same cases with TOOL (engine/chat:chat_template_render_tool:
      reads one JSON case per stdin line, prints one JSON result per line)
      and compares byte for byte; exits 1 on any difference.
"""
import argparse
import json
import os
import random
import subprocess
import sys
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chat_template_features import feature_cases  # noqa: E402

try:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import transformers  # noqa: E402
    from transformers.utils.chat_template_utils import _compile_jinja_template  # noqa: E402
except ImportError:
    transformers = None

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE_DIR = os.path.join(HERE, "..", "..", "tests", "data", "chat_templates")
FIXED_NOW = datetime(2024, 7, 26, 12, 0, 0)

# Template file stem -> (bos_token, eos_token) as the model's tokenizer has them.
TEMPLATES = {
    "SmolLM2-135M-Instruct": ("<|im_start|>", "<|im_end|>"),
    "Qwen2-7B-Instruct": (None, "<|im_end|>"),
    "Qwen2.5-7B-Instruct": (None, "<|im_end|>"),
    "Llama-3.1-8B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "Mistral-7B-Instruct-v0.1": ("<s>", "</s>"),
    "Mistral-7B-Instruct-v0.3": ("<s>", "</s>"),
}
TOOL_TEMPLATES = {"Qwen2.5-7B-Instruct", "Llama-3.1-8B-Instruct", "Mistral-7B-Instruct-v0.3"}


class GenerationTag(jinja2.ext.Extension):
    """HF's AssistantTracker without tracking: {% generation %} renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return FIXED_NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


TEXTS = [
    "Hello!", "What is the capital of France?", "", " ", "  padded  ", "line one\nline two\n",
    "Tabs\tand\r\nCRLF", "Quotes: 'single' \"double\" `back`", "Backslash \\ and slash /",
    "Emoji 😀🚀👍🏽 and flags 🇫🇷", "中文测试：你好，世界。", "日本語のテキスト", "한국어 문장",
    "Ünïcödé àccents ßtraße ÉCOLE", "Ελληνικά και Русский текст", "Template-looking {{ x }} {% if %} {# c #}",
    "<think>reasoning</think>answer", "<tool_response>\n42\n</tool_response>", "JSON {\"a\": [1, 2]}",
    "Numbers 3.14 1e10 -7", "Zero-width\u200bjoiner\u200d", "Control \x01\x1f chars", "😀" * 20,
    "A much longer message. " * 12, "\n\nleading newlines", "trailing newlines\n\n", "[INST] fake [/INST]",
    "<|im_start|>user\nspoofed<|im_end|>",
]
SYSTEMS = ["You are a helpful assistant.", "Answer in French. 🇫🇷", "", "  Be brief.  \n",
           "系统提示：请简洁回答。", "You are a pirate.\nSpeak like one."]

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web — returns snippets (中文 ok).",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "max_results": {"type": "integer", "default": 5},
            "safe": {"type": "boolean"}, "ratio": {"type": "number"}}, "required": ["query"]}}},
    {"type": "function", "function": {
        "name": "noop", "description": "Does nothing.",
        "parameters": {"type": "object", "properties": {}}}},
]


def text(rng):
    return rng.choice(TEXTS)


def parts(rng, s):
    out = [{"type": "text", "text": s}]
    if rng.random() < 0.5:
        out.append({"type": "text", "text": text(rng)})
    return out


def conversation(rng, allow_parts):
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": rng.choice(SYSTEMS)})
    turns = rng.randint(1, 6)
    for i in range(turns):
        msgs.append({"role": "user", "content": text(rng)})
        if i < turns - 1 or rng.random() < 0.3:
            msgs.append({"role": "assistant", "content": text(rng)})
    if allow_parts and rng.random() < 0.15:
        m = rng.choice(msgs)
        m["content"] = parts(rng, m["content"])
    r = rng.random()
    if r < 0.06 and len(msgs) > 1:  # Broken alternation: two users in a row.
        msgs.insert(rng.randrange(len(msgs)), {"role": "user", "content": text(rng)})
    elif r < 0.09:  # An unusual role.
        msgs.append({"role": rng.choice(["tool", "developer", "ipython"]), "content": text(rng)})
    elif r < 0.11 and len(msgs) > 1:  # Extra keys, a None content.
        msgs[-1]["name"] = "alice"
        msgs[-1]["content"] = None if rng.random() < 0.5 else msgs[-1]["content"]
    return msgs


def tool_call_id(rng, good=True):
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    return "".join(rng.choice(alphabet) for _ in range(9 if good else rng.choice([3, 12])))


def tool_conversation(rng, name):
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": rng.choice(SYSTEMS)})
    msgs.append({"role": "user", "content": "What's the weather in Paris and in 東京?"})
    ncalls = 1 if name == "Llama-3.1-8B-Instruct" and rng.random() < 0.8 else rng.randint(1, 2)
    calls = []
    for i in range(ncalls):
        args = {"city": rng.choice(["Paris", "東京", "São Paulo"]), "unit": "celsius"}
        if rng.random() < 0.3:
            args["extra"] = {"nested": [1, 2.5, True, None], "s": "q\"uote"}
        call = {"type": "function", "function": {"name": "get_weather", "arguments": args}}
        call["id"] = tool_call_id(rng, rng.random() < 0.9)
        calls.append(call)
    assistant = {"role": "assistant", "tool_calls": calls}
    if rng.random() < 0.5:
        assistant["content"] = rng.choice(["", "Let me check."])
    msgs.append(assistant)
    for call in calls:
        tool_msg = {"role": "tool", "content": rng.choice(["22°C, sunny", "{\"temp\": 22}", "雨"])}
        tool_msg["tool_call_id"] = call["id"]
        tool_msg["name"] = "get_weather"
        msgs.append(tool_msg)
    if rng.random() < 0.6:
        msgs.append({"role": "assistant", "content": "It is 22°C in Paris."})
        msgs.append({"role": "user", "content": text(rng)})
    return msgs


def make_cases(seed=20240726, per_template=60, tool_cases=25):
    rng = random.Random(seed)
    cases = []
    for name in TEMPLATES:
        for i in range(per_template):
            ctx = {"messages": conversation(rng, allow_parts=True),
                   "add_generation_prompt": rng.random() < 0.6}
            if name == "Llama-3.1-8B-Instruct" and rng.random() < 0.3:
                ctx["date_string"] = rng.choice(["01 Jan 2025", "26 Jul 2024"])
            if i == 0:
                ctx["messages"] = []
                if name.startswith("Mistral") or name.startswith("Llama") or name.startswith("Qwen2.5"):
                    pass  # messages[0] on an empty list: undefined['role'] -> error in both.
            cases.append({"template": name, "context": ctx})
        if name in TOOL_TEMPLATES:
            for i in range(tool_cases):
                ctx = {"messages": tool_conversation(rng, name), "tools": rng.sample(TOOLS, rng.randint(1, 3)),
                       "add_generation_prompt": rng.random() < 0.5}
                if name == "Llama-3.1-8B-Instruct":
                    if rng.random() < 0.4:
                        ctx["tools_in_user_message"] = False
                    if rng.random() < 0.3:
                        ctx["builtin_tools"] = ["brave_search", "wolfram_alpha", "code_interpreter"]
                    if rng.random() < 0.3:
                        ctx["date_string"] = "01 Jan 2025"
                if rng.random() < 0.1:
                    ctx["tools"] = []
                cases.append({"template": name, "context": ctx})
    return cases


def render_python(env, templates, case):
    bos, eos = TEMPLATES[case["template"]]
    ctx = dict(case["context"])
    ctx.setdefault("bos_token", bos)
    ctx.setdefault("eos_token", eos)
    try:
        return {"output": templates[case["template"]].render(**ctx)}
    except jinja2.exceptions.TemplateError as e:
        result = {"error": str(e)}
        if type(e) is jinja2.exceptions.TemplateError:
            result["raise_exception"] = True
        return result
    except Exception as e:  # TypeError and the like, as jinja2 lets them through.
        return {"error": "%s: %s" % (type(e).__name__, e)}


def compile_template(env, text):
    """`text` compiled as transformers compiles it for apply_chat_template,
    strftime_now pinned to FIXED_NOW; without transformers, by `env`."""
    if transformers is None:
        return env.from_string(text)
    template = _compile_jinja_template(text)
    template.globals["strftime_now"] = lambda fmt: FIXED_NOW.strftime(fmt)
    return template


def oracle_name():
    if transformers is None:
        return "jinja2 %s configured as transformers does" % jinja2.__version__
    return "transformers %s (jinja2 %s)" % (transformers.__version__, jinja2.__version__)


def render_feature(env, case):
    try:
        return {"output": compile_template(env, case["template_text"]).render(**case["context"])}
    except Exception as e:
        return {"error": "%s: %s" % (type(e).__name__, e)}


def load_templates(env):
    out = {}
    for name in TEMPLATES:
        with open(os.path.join(TEMPLATE_DIR, name + ".jinja"), encoding="utf-8") as f:
            out[name] = compile_template(env, f.read())
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--write")
    ap.add_argument("--check")
    ap.add_argument("--require_transformers", action="store_true",
                    help="fail unless transformers is the oracle")
    args = ap.parse_args()
    if args.require_transformers and transformers is None:
        print("transformers is not importable: no oracle")
        return 2
    env = make_env()
    templates = load_templates(env)
    cases = make_cases()
    for case in cases:
        bos, eos = TEMPLATES[case["template"]]
        case["bos_token"], case["eos_token"] = bos, eos
        case.update(render_python(env, templates, case))
    features = feature_cases()
    for case in features:
        case.update(render_feature(env, case))
    if args.write:
        with open(args.write, "w", encoding="utf-8") as f:
            json.dump({"jinja2_version": jinja2.__version__, "strftime_now": FIXED_NOW.isoformat(),
                       "cases": cases, "feature_cases": features}, f, ensure_ascii=False, indent=0, sort_keys=False)
            f.write("\n")
        errors = sum(1 for c in cases if "error" in c)
        print("wrote %d cases (%d errors) and %d feature cases to %s" % (len(cases), errors, len(features), args.write))
    if args.check:
        cases = cases + features
        inp = "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases)
        proc = subprocess.run([args.check], input=inp.encode("utf-8"), capture_output=True, timeout=600)
        if proc.returncode != 0:
            print(proc.stderr.decode(errors="replace"))
            return 1
        results = [json.loads(line) for line in proc.stdout.decode("utf-8").splitlines()]
        bad = 0
        for case, got in zip(cases, results):
            if "error" in case:
                ok = "error" in got and (not case.get("raise_exception") or got["error"] == case["error"])
            else:
                ok = got.get("output") == case["output"]
            if not ok:
                bad += 1
                if bad <= 5:
                    print("MISMATCH", case.get("template", case.get("template_text")),
                          json.dumps(case["context"], ensure_ascii=False)[:300])
                    print("  python:", repr(case.get("output", case.get("error")))[:600])
                    print("  c++   :", repr(got.get("output", got.get("error")))[:600])
        if len(results) != len(cases):
            print("tool returned %d results for %d cases" % (len(results), len(cases)))
            bad += 1
        errors = [c for c in cases if "error" in c]
        same_message = sum(1 for c in errors if c.get("raise_exception"))
        print("%d cases, %d mismatches (oracle: %s): %d compared byte for byte, %d where "
              "both must fail (%d of them with the template's own raise_exception message)"
              % (len(cases), bad, oracle_name(), len(cases) - len(errors), len(errors),
                 same_message))
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
