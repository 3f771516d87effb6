#!/usr/bin/env python3
"""Golden tokenizer cases for SmolLM2-135M-Instruct (GGUF): text -> token ids.

The tokenizer is the one Hugging Face transformers builds from the GGUF file
(tokenizer.ggml.tokens / merges / token_type), with the model's own
pre-tokenizer put back (transformers 4.45.2 ignores tokenizer.ggml.pre; see
hf_gguf_golden.py). Every string is encoded with add_special_tokens=False
(no BOS: the GGUF says tokenizer.ggml.add_bos_token=false); special tokens
written inside the text (<|im_start|>, ...) are still matched as special.

Writes tests/data/golden_smollm2_tokens.json:

  {"format": "kvcast-golden-tokens-v1",
   "gguf_file": NAME, "gguf_sha256": ..., "oracle": {versions},
   "tokenizer": {how the ids were made},
   "num_cases": N,
   "cases": [{"cat": category, "text": str, "ids": [...]}, ...]}

A case also has "ids_hf_gguf_unpatched" when the tokenizer exactly as
transformers 4.45.2 builds it (GPT-2's split, no digit isolation) gives other
ids, and "decoded" when tokenizer.decode(ids) does not give the text back.

The strings are a fixed list plus ones from a seeded generator
(random.Random(SEED)); nothing is downloaded. Run from the repository root:

  .venv-hf/bin/python tools/golden/hf_gguf_tokens.py \
      [--gguf build/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf] \
      [--out tests/data/golden_smollm2_tokens.json]
"""

import argparse
import json
import os
import random
import sys
import time
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_gguf_golden as common  # noqa: E402  (sets HF_HUB_OFFLINE first)

SEED = 20241124

PROSE = [
    "Hello world",
    "Hello, world!",
    "hello world",
    "HELLO WORLD",
    "The quick brown fox jumps over the lazy dog.",
    "A journey of a thousand miles begins with a single step.",
    "She sells sea shells by the sea shore.",
    "It was the best of times, it was the worst of times.",
    "Call me Ishmael. Some years ago - never mind how long precisely - "
    "having little or no money in my purse, I thought I would sail about.",
    "In the beginning was the Word.",
    "The committee's decision, announced on Tuesday, surprised nobody.",
    "Dr. Smith et al. (2019) reported a 3-fold increase, i.e. a large one.",
    "Mr. and Mrs. O'Neill live at 221B Baker St., London NW1 6XE, U.K.",
    "e.g., etc., vs., Ph.D., U.S.A., a.m., p.m.",
    "antidisestablishmentarianism",
    "pneumonoultramicroscopicsilicovolcanoconiosis",
    "supercalifragilisticexpialidocious",
    "camelCaseIdentifier and snake_case_identifier and SCREAMING_CASE",
    "HTTPServerError XMLHttpRequest iPhone eBay McDonald",
    "Once upon a time, in a land far, far away, there lived a king.",
    "Why? Because I said so!",
    "Yes.",
    "No",
    "a",
    "I",
    "x y z",
    "Mississippi",
    "tomorrow's forecast: sunny, 75 degrees",
]

CONTRACTIONS = [
    "I'm here.",
    "You're right, they're wrong, and we're late.",
    "I've seen it; you've seen it; they've seen it.",
    "I'll go, you'll stay, she'll call.",
    "I'd say he'd agree, and you'd too.",
    "It's Bob's car, not Alice's.",
    "Don't, can't, won't, shouldn't, wouldn't, isn't.",
    "IT'S DON'T I'M YOU'RE WE'VE THEY'LL HE'D",
    "He's THERE'S what's",
    "THE DOG'S BONE",
    "'s 't 're 've 'm 'll 'd",
    "'S 'T 'RE 'VE 'M 'LL 'D",
    "the dogs' bones",
    "rock 'n' roll",
    "'tis the season",
    "''",
    "'",
    "It\u2019s a curly apostrophe \u2018quoted\u2019",
    "y'all'd've",
    "o'clock",
]

NUMBERS = [
    "0", "7", "42", "100", "1234567", "12345678901234567890",
    "3.14159", "-2.71828", "+1e-10", "6.022e23", "1,234,567.89",
    "1.234.567,89", "0x1F", "0b1010", "0o755", "v1.2.3", "100%", "$19.99",
    "\u20ac5", "\u00a3100", "\u00a5300", "2024-11-24", "11/24/2024",
    "24.11.2024", "12:34:56", "2024-11-24T10:00:00Z", "Nov 24, 2024",
    "+1 (555) 123-4567", "192.168.0.1", "3/4", "1st 2nd 3rd 4th",
    "pi is 3.14159265358979323846",
    "In 1969, 600 million people watched.",
    "x  3", "x   42", "\n\n3", "a\t\t7", "  42  ", "\u00a012",
    " 1 2 3 ", "abc123def456", "A1B2C3", "9am-5pm",
    "\u0661\u0662\u0663",  # Arabic-Indic digits
    "\u0967\u0968\u0969",  # Devanagari digits
    "\uff11\uff12\uff13",  # fullwidth digits
    "\u00bd cup", "x\u00b2 + y\u00b3", "\u216b o'clock", "\u2460\u2461\u2462",
    "\U0001d7d9\U0001d7da",  # mathematical double-struck digits
]

CODE = [
    "def add(a, b):\n    return a + b\n",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n",
    "for i in range(10):\n\tprint(i)\n",
    "import numpy as np\nx = np.zeros((3, 4), dtype=np.float32)\n",
    "if __name__ == \"__main__\":\n    main()\n",
    "#include <iostream>\n\nint main() {\n  std::cout << \"Hello\\n\";\n  return 0;\n}\n",
    "template <typename T>\nT max(T a, T b) { return a > b ? a : b; }\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
    "std::vector<std::unique_ptr<Foo>> v;\nv.emplace_back(std::make_unique<Foo>(1, 2));",
    "auto [it, inserted] = m.try_emplace(key, value);",
    "x->y = *p++; a &= ~b; c <<= 2; d != e && f || !g;",
    "{\"name\": \"kvcast\", \"version\": 1, \"tags\": [\"a\", \"b\"], \"ok\": true, \"x\": null}",
    "{\n  \"key\": \"value\",\n  \"nested\": {\n    \"n\": 3.5e-7\n  }\n}",
    "[1,2,3,[4,5,[6]]]",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "<html><body><p class=\"x\">Hi &amp; bye</p></body></html>",
    "$ ls -la /usr/local/bin | grep -v '^d' > out.txt 2>&1",
    "fn main() { let v: Vec<u8> = vec![1, 2, 3]; println!(\"{:?}\", v); }",
    "const f = (x) => x ** 2; // square",
    "/* block comment */ int x = 0; // line comment",
    "^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\\.[a-zA-Z]{2,}$",
    "    indented four\n        indented eight\n\t\ttwo tabs\n",
    "\tleading tab",
    "key:\tvalue\tother",
    "a = b\n\n\n\nc = d",
    "print('single quotes'); print(\"double\"); print(f\"{x!r:>10}\")",
    "# Heading\n\n* item one\n* item two\n\n```python\nprint(1)\n```\n",
    "\\frac{a}{b} + \\sqrt{x^2 + y^2} = \\sum_{i=1}^{n} i",
]

WHITESPACE = [
    "", " ", "  ", "   ", "    ", "        ", "\t", "\t\t", "\n", "\n\n",
    "\n\n\n", "\r\n", "\r\n\r\n", "\r", " \n", "\n ", " \n \n ", "\t\n",
    "a b", "a  b", "a   b", "a\tb", "a\nb", "a\r\nb", "a\n\nb", "a \n b",
    "trailing spaces   ", "   leading spaces", "  both  ", "end\n",
    "line1\r\nline2\r\n", "word\n\n\n\nword", "mixed \t \n \r\n end",
    "\u00a0", "nbsp\u00a0here", "\u3000ideographic\u3000space",
    "zero\u200bwidth", "\u2028line separator", "em\u2003space",
    "\n\n\n\n\n\n\n\n", " " * 17, "\t" * 5 + "x",
]

PUNCT = [
    "!!!", "???", "...", "?!?!", "---", "***", "====", "((()))", "[[]]",
    "{{}}", "<<>>", "@#$%^&*()", "~`|\\", "\"\"\"", "'''", ";;", "::",
    "!?.,;:", "-->", "<!--", "...!!!???", "\u00ab\u00bb", "\u201cquoted\u201d",
    "\u2014 em dash \u2013 en dash", "\u2026", "\u00bf\u00a1", "\u00a7\u00b6",
    "\u2022 bullet", "\u2190\u2192\u2191\u2193", "\u2200x\u2208S: x\u2264y",
    "hello!!!world", "wait... what?!", "a--b", "#hashtag @mention",
]

SCRIPTS = [
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01",  # Chinese
    "\u6211\u7231\u5317\u4eac\u5929\u5b89\u95e8",
    "\u673a\u5668\u5b66\u4e60\u662f\u4eba\u5de5\u667a\u80fd\u7684\u4e00\u4e2a\u5206\u652f\u3002",
    "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c",  # Japanese
    "\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a\u3068\u6f22\u5b57",
    "\uc548\ub155\ud558\uc138\uc694 \uc138\uacc4",  # Korean
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!",  # Russian
    "\u0421\u044a\u0435\u0448\u044c \u0436\u0435 \u0435\u0449\u0451 \u044d\u0442\u0438\u0445 \u043c\u044f\u0433\u043a\u0438\u0445 \u0444\u0440\u0430\u043d\u0446\u0443\u0437\u0441\u043a\u0438\u0445 \u0431\u0443\u043b\u043e\u043a.",
    "\u0423\u043a\u0440\u0430\u0457\u043d\u0441\u044c\u043a\u0430 \u043c\u043e\u0432\u0430: \u0457, \u0454, \u0491",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",  # Arabic
    "\u0627\u0644\u0644\u063a\u0629 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u062c\u0645\u064a\u0644\u0629 \u0661\u0662\u0663",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",  # Hebrew
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",  # Hindi
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u092d\u093e\u0937\u093e \u0938\u0941\u0902\u0926\u0930 \u0939\u0948\u0964",
    "\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u03ba\u03cc\u03c3\u03bc\u03b5",  # Greek
    "\u03b1\u03b2\u03b3\u03b4\u03b5 \u0391\u0392\u0393\u0394\u0395 \u03c0\u2248\u03c4/2",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01",  # Thai
    "\u0532\u0561\u0580\u0587 \u0561\u0577\u056d\u0561\u0580\u0570",  # Armenian
    "\u10d2\u10d0\u10db\u10d0\u10e0\u10ef\u10dd\u10d1\u10d0",  # Georgian
    "\u09ac\u09be\u0982\u09b2\u09be \u09ad\u09be\u09b7\u09be",  # Bengali
    "\u0ba4\u0bae\u0bbf\u0bb4\u0bcd",  # Tamil
    "Ti\u1ebfng Vi\u1ec7t c\u00f3 d\u1ea5u",  # Vietnamese
    "English \u4e2d\u6587 \u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 mixed",
    "\u1680\u16a0\u16c1\u16b1",  # Ogham space + runes
    "\U00010330\U00010331\U00010332",  # Gothic (4-byte UTF-8)
]

EMOJI = [
    "\U0001f600", "\U0001f44d", "\U0001f44d\U0001f3fd",  # skin tone
    "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",  # family ZWJ
    "\U0001f3f3\ufe0f\u200d\U0001f308",  # rainbow flag
    "\U0001f469\u200d\U0001f4bb",  # woman technologist
    "\U0001f1eb\U0001f1f7\U0001f1ef\U0001f1f5\U0001f1fa\U0001f1f8",  # flags
    "\u2764\ufe0f", "1\ufe0f\u20e3", "#\ufe0f\u20e3",  # keycaps
    "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",  # Scotland tag seq
    "I love pizza \U0001f355\U0001f355\U0001f355!",
    "\U0001f680 launch at 10:00 \u2705",
    "smile\U0001f60aend",
    "\u263a\u2600\u2601\u2602",
]

ACCENT_WORDS = [
    "caf\u00e9", "na\u00efve", "\u00c5ngstr\u00f6m", "S\u00e3o Paulo",
    "Vi\u1ec7t Nam", "Z\u00fcrich", "cr\u00e8me br\u00fbl\u00e9e",
    "pi\u00f1ata", "\u00c9cole \u00e9l\u00e9mentaire", "Stra\u00dfe",
    "fa\u00e7ade", "r\u00e9sum\u00e9", "\u0141\u00f3d\u017a", "\u0110\u00e0 N\u1eb5ng",
]

SPECIAL = [
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n"
    "What is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "text<|im_end|>more",
    "<|im_start|><|im_end|>", " <|im_start|> ", "<|im_start|>\n",
    "<|im_start", "im_start|>", "< |im_start| >", "<|IM_START|>",
    "<repo_name>kvcast<file_sep>main.cc", "<filename>a.py<gh_stars>10",
    "<jupyter_code>print(1)<jupyter_output>1<empty_output>",
    "<|endoftext|><|endoftext|>", "before<|endoftext|>after",
]

MISC = [
    "https://example.com/path/to/page?query=1&b=two#frag",
    "user.name+tag@example.co.uk",
    "/usr/local/lib/python3.11/site-packages/torch/__init__.py",
    "C:\\Program Files\\App\\app.exe",
    "**bold** _italic_ `code` [link](http://x.y)",
    "| a | b |\n|---|---|\n| 1 | 2 |",
    "a\x00b", "\x07bell", "\x1b[31mred\x1b[0m", "\x7f",
    "\ufeffBOM at start", "soft\u00adhyphen",
    "\u202eright-to-left override", "A\u0300\u0301\u0302\u0303 stacked",
    "\ufb01 ligature \ufb02", "\u2126 \u212b \u00b5",
    "\ud7ff\ue000\uffef",  # edges of the BMP's non-surrogate ranges
    "\U0010fffd",
]

WORDS = ("the of and to in is was for that with as on by at from it this "
         "be are or an which not have has but were they their one all we "
         "time people year way day man thing woman life child world school "
         "state family student group country problem hand part place case "
         "week company system program question work government number night "
         "point home water room mother area money story fact month lot right "
         "study book eye job word business issue side kind head house service "
         "friend father power hour game line end member law car city name "
         "Paris London Tokyo Berlin Alice Bob kvcast GPU tensor cache token "
         "quantum photosynthesis infrastructure unbelievably tokenizer").split()
POOL = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
        "      \t\n\r.,;:!?'\"-_()[]{}<>/\\|@#$%^&*+=~`"
        "\u00e9\u00fc\u00f1\u00e7\u00df\u00f8\u00c5\u0301\u0308"
        "\u4e2d\u6587\u65e5\u672c\u3042\u30a2\ud55c"
        "\u0416\u044f\u03a9\u03bb\u0639\u0628\u05d0\u0915\u093e"
        "\u00a0\u3000\u200b\u2014\u2026\u20ac\u00bd\u00b2\u0663\uff15"
        "\U0001f600\U0001f44d\U0001f3fd\u200d\u2764\ufe0f\U0001f1fa\U0001f1f8")
INDENTS = ["", "    ", "        ", "\t", "\t\t", "  ", " \t"]
IDENTS = ["x", "y", "i", "count", "total_sum", "buf", "ptr", "self.value",
          "std::size_t", "kMaxTokens", "result", "node->next", "arr[i]"]
OPS = [" = ", " += ", " == ", " != ", " <= ", " && ", " || ", " -> ", ":",
       " * ", " / ", " % ", " << ", " >> ", ", "]


def nfc_nfd():
    out = []
    for w in ACCENT_WORDS:
        nfc = unicodedata.normalize("NFC", w)
        nfd = unicodedata.normalize("NFD", w)
        out.append(("accent_nfc", nfc))
        if nfd != nfc:
            out.append(("accent_nfd", nfd))
    return out


def long_strings():
    para = ("Tokenizers split text into pieces that a model can count. This "
            "paragraph repeats itself so that the string is long, about two "
            "kilobytes, and an engine's tokenizer has to walk through many "
            "pre-tokens and merges without slowing down or losing a byte. ")
    code = ("def step(state, x):\n    h = state.h * 0.5 + x\n"
            "    if h > 1.0:\n\treturn h - 1.0\n    return h\n\n")
    mixed = ("Caf\u00e9 \u4e2d\u6587 \U0001f600 \u041f\u0440\u0438\u0432\u0435\u0442 "
             "123 \u0645\u0631\u062d\u0628\u0627 \u00bd\n")
    return [
        ("long_prose", (para * 10)[:2048]),
        ("long_code", (code * 40)[:2048]),
        ("long_mixed", (mixed * 60)[:700]),
        ("long_spaces", " " * 2048),
        ("long_newlines", "\n" * 1000 + "x" + "\r\n" * 500),
        ("long_digits", "".join(str(i % 10) for i in range(2048))),
        ("long_word", "abc" * 683),
        ("long_punct", "!?." * 683),
    ]


def generated(rng):
    out = []
    for _ in range(70):  # sentences of words, odd capitalization/punctuation
        n = rng.randint(1, 25)
        words = []
        for _ in range(n):
            w = rng.choice(WORDS)
            r = rng.random()
            if r < 0.1:
                w = w.upper()
            elif r < 0.25:
                w = w.capitalize()
            if rng.random() < 0.08:
                w += rng.choice(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d",
                                 "'S", "'LL"])
            words.append(w)
            if rng.random() < 0.15:
                words[-1] += rng.choice([",", ".", ";", ":", "!", "?", "...",
                                         " -", "\n", "\n\n"])
        out.append(("gen_words", " ".join(words)))
    for _ in range(50):  # numbers and whitespace before digits
        kind = rng.randrange(6)
        if kind == 0:
            s = str(rng.randrange(10 ** rng.randint(1, 15)))
        elif kind == 1:
            s = f"{rng.uniform(-1e4, 1e4):.{rng.randint(1, 8)}f}"
        elif kind == 2:
            s = (f"{rng.randint(1900, 2099)}-{rng.randint(1, 12):02d}-"
                 f"{rng.randint(1, 28):02d}")
        elif kind == 3:
            s = f"{rng.randint(0, 23)}:{rng.randint(0, 59):02d}"
        elif kind == 4:
            s = (rng.choice(["", "x", "a.", "(", "\u00e9"])
                 + rng.choice([" ", "  ", "   ", "\t", "\n", "\n\n", " \n"])
                 + str(rng.randrange(1000)))
        else:
            s = f"{rng.randrange(10 ** 6):,}"
        out.append(("gen_number", s))
    for _ in range(80):  # random characters from a mixed pool
        n = rng.randint(1, 40)
        out.append(("gen_chars", "".join(rng.choice(POOL) for _ in range(n))))
    for _ in range(40):  # code-like lines
        lines = []
        for _ in range(rng.randint(1, 5)):
            lines.append(rng.choice(INDENTS) + rng.choice(IDENTS)
                         + rng.choice(OPS) + rng.choice(IDENTS)
                         + rng.choice(["", ";", ":", " {", " }", "  // note",
                                       "  # comment", "   "]))
        out.append(("gen_code", rng.choice(["\n", "\r\n"]).join(lines)
                    + rng.choice(["", "\n", "\n\n"])))
    for _ in range(20):  # whitespace and punctuation runs
        n = rng.randint(1, 12)
        out.append(("gen_runs", "".join(
            rng.choice([" ", "  ", "\t", "\n", "\r\n", "!", "?", ".", "-",
                        "=", "*", "#", "a", "1"]) for _ in range(n))))
    return out


def all_cases():
    cases = []
    for cat, items in (("prose", PROSE), ("contraction", CONTRACTIONS),
                       ("number", NUMBERS), ("code", CODE),
                       ("whitespace", WHITESPACE), ("punct", PUNCT),
                       ("script", SCRIPTS), ("emoji", EMOJI),
                       ("special", SPECIAL), ("misc", MISC)):
        cases += [(cat, s) for s in items]
    cases += nfc_nfd()
    cases += long_strings()
    cases += generated(random.Random(SEED))
    seen, unique = set(), []
    for cat, s in cases:
        if s not in seen:
            seen.add(s)
            unique.append((cat, s))
    return unique


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gguf", default=common.DEFAULT_GGUF)
    p.add_argument("--out", default="tests/data/golden_smollm2_tokens.json")
    args = p.parse_args()
    start = time.time()

    digest = common.sha256(args.gguf)
    if digest != common.EXPECTED_SHA256:
        sys.exit(f"{args.gguf}: sha256 {digest}, expected "
                 f"{common.EXPECTED_SHA256}")
    meta = common.read_gguf_metadata(args.gguf)
    tok, raw_tok, pre_state = common.load_tokenizer(args.gguf, meta)

    records, n_unpatched, n_decode = [], 0, 0
    for cat, text in all_cases():
        ids = tok(text, add_special_tokens=False)["input_ids"]
        rec = {"cat": cat, "text": text, "ids": ids}
        raw_ids = raw_tok(text, add_special_tokens=False)["input_ids"]
        if raw_ids != ids:
            rec["ids_hf_gguf_unpatched"] = raw_ids
            n_unpatched += 1
        decoded = tok.decode(ids, skip_special_tokens=False,
                             clean_up_tokenization_spaces=False)
        if decoded != text:
            rec["decoded"] = decoded
            n_decode += 1
        records.append(rec)

    tokenizer = common.tokenizer_record(tok, raw_tok, meta, pre_state)
    tokenizer["cases_where_unpatched_hf_differs"] = n_unpatched
    tokenizer["cases_where_decode_differs"] = n_decode
    golden = {
        "format": "kvcast-golden-tokens-v1",
        "gguf_file": os.path.basename(args.gguf),
        "gguf_sha256": digest,
        "oracle": dict(tool="tools/golden/hf_gguf_tokens.py",
                       **common.versions(), seed=SEED),
        "tokenizer": tokenizer,
        "num_cases": len(records),
        "cases": records,
    }

    def dump(v):
        return json.dumps(v, ensure_ascii=False, separators=(",", ":"))

    lines = ["{"]
    for k in golden:
        if k == "cases":
            continue
        lines.append(f" {dump(k)}: {dump(golden[k])},")
    lines.append(' "cases": [')
    for i, rec in enumerate(records):
        lines.append("  " + dump(rec) + ("," if i + 1 < len(records) else ""))
    lines.append(" ]")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    json.loads(text)  # well-formed
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, args.out)
    print(f"wrote {args.out}: {len(records)} cases, "
          f"{len(text.encode('utf-8'))} bytes; {n_unpatched} differ without "
          f"the pre-tokenizer fix, {n_decode} do not decode back; "
          f"{time.time() - start:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
