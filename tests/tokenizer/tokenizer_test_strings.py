"""Deterministic test strings and corpora for tokenizer comparisons."""
import random

WORDS = ("the of and to in is that it was for on are as with his they at be this "
         "from have or by one had not but what all were when we there can an your "
         "which their said if do will each about how up out them then she many some "
         "tokenizer inference kernel cache attention transformer model GPU Llama "
         "Qwen HTTP JSON naïve café résumé façade Zürich São Paulo München").split()
UNICODE_WORDS = ["Привет", "мир", "Γειά", "σου", "κόσμε", "日本語", "中文分词", "한국어",
                 "안녕하세요", "مرحبا", "بالعالم", "नमस्ते", "दुनिया", "שלום", "ภาษาไทย",
                 "Ελληνικά", "español", "niño", "crème", "brûlée", "ǅemal", "ﬁnance",
                 "Ａｂｃ", "ß", "İstanbul", "ŁÓDŹ"]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "❤️", "🚀", "🤖", "✨", "🧪", "🙂🙃"]
PUNCT = list(".,;:!?()[]{}<>\"'`~@#$%^&*-_=+/\\|") + ["...", "--", "->", "=>", "::", "&&", "!="]
SPACES = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\t\t", "\u00a0", "\u3000",
          "    \n", "\u2003", " \t \n"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'LL", "'Re", "n't"]
COMBINING = ["e\u0301", "a\u0308", "n\u0303", "o\u0302\u0323", "\u1100\u1161", "A\u030a"]


def random_piece(rng, specials):
    r = rng.random()
    if r < 0.30:
        return rng.choice(WORDS)
    if r < 0.42:
        return rng.choice(UNICODE_WORDS)
    if r < 0.50:
        return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 8)))
    if r < 0.60:
        return rng.choice(PUNCT)
    if r < 0.72:
        return rng.choice(SPACES)
    if r < 0.78:
        return rng.choice(EMOJI)
    if r < 0.86:
        return rng.choice(WORDS) + rng.choice(CONTRACTIONS)
    if r < 0.90:
        return rng.choice(COMBINING)
    if r < 0.93 and specials:
        return rng.choice(specials)
    if r < 0.96:
        return chr(rng.choice([rng.randint(0x20, 0x7e), rng.randint(0xa0, 0x2fff),
                               rng.randint(0x4e00, 0x9fff), rng.randint(0x1f300, 0x1faff)]))
    return rng.choice(WORDS).upper()


def test_strings(count, seed=1234, specials=()):
    rng = random.Random(seed)
    fixed = ["", " ", "Hello world", "Hello, world! It's a test.", "I'LL don't you've",
             "    leading spaces", "trailing spaces   ", "tabs\tand\nnewlines\r\n",
             "numbers 1234567890 12 3.14159", "日本語のテキスト", "emoji 😀👍🏽 done",
             "a\n\n\nb", "   \n\n   ", "x" * 300, " " * 100, "ab" * 200,
             "naïve café e\u0301", "<|begin_of_text|>hi<|end_of_text|>"]
    out = list(fixed)
    while len(out) < count:
        pieces = [random_piece(rng, list(specials)) for _ in range(rng.randint(1, 30))]
        sep = rng.choice(["", " ", " ", " ", ""])
        out.append(sep.join(pieces))
    return out[:count]


def corpus(seed=7, lines=3000):
    """A training corpus: license texts (real English) plus generated lines."""
    import glob
    text = []
    for path in sorted(glob.glob("/usr/share/common-licenses/*"))[:8]:
        try:
            with open(path, encoding="utf-8") as f:
                text.append(f.read())
        except (OSError, UnicodeDecodeError):
            pass
    rng = random.Random(seed)
    for _ in range(lines):
        text.append(" ".join(random_piece(rng, []) for _ in range(rng.randint(3, 25))))
    return "\n".join(text)
