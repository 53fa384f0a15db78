#!/usr/bin/env python3
"""Writes the tokenizer's reference corpus: documents of varied text, deterministic (seeded),
at least --min-bytes in all, as `<length in bytes>\\n<bytes>` records (binary-safe: some
documents hold invalid UTF-8 on purpose). Sources: the license texts every Debian ships
(/usr/share/common-licenses: English prose), the repository's own sources (code), and made-up
text: numbers, dates, runs of spaces, tabs and newlines, Unicode whitespace, accents and
combining marks, Greek, Cyrillic, CJK, Hangul, emoji (with ZWJ and skin tones), contractions in
every case, and invalid bytes (stray continuations, truncated sequences, overlongs, surrogates).

    python3 tests/text/reference/make_corpus.py OUT [--min-bytes 1100000] [--seed 1]
"""
import argparse
import glob
import os
import random

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

WORDS = ("the of and to in is that it for on with as was by at be this from or have an are not "
         "but had they which you were their one all we can her has there been if more when will "
         "would who so no time people year way day man thing woman life child world school state "
         "family student group country problem hand part place case week company system program "
         "question work government number night point home water room mother area money story").split()
ACCENTED = ("café naïve résumé façade jalapeño Ærøskøbing Zürich straße coöperate piñata crème "
            "brûlée Ελληνικά γλώσσα Русский язык Україна Việt Nam ĐĂNG Ñandú İstanbul ǅemal "
            "Dvořák Łódź Škoda Ångström").split()
CONTRACTIONS = ["don't", "I'LL", "it's", "we're", "they've", "I'm", "she'd", "can't", "'s", "'t",
                "'re", "'ve", "'m", "'ll", "'d", "''s", "' s", "rock 'n' roll", "O'Neil", "'tis",
                "y'all", "ma'am", "'S", "' '", "'''"]
SPACES = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\t\t", "\u00a0", "\u3000",
          "\u2009", "\u200b", "\u2028", "\x0b", "\x0c", "\u1680", "\ufeff", "\u0085", "\x1c"]
COMBINING = ["\u0301", "\u0308", "\u0327", "\u20dd", "\u0336"]
EMOJI_MODS = ["\u200d", "\U0001F3FB", "\U0001F3FF", "\ufe0f"]


def rand_char(r, lo, hi):
    return chr(r.randint(lo, hi))


def made_up(r, n):
    out = []
    size = 0
    while size < n:
        k = r.random()
        if k < 0.25:
            s = " ".join(r.choice(WORDS) for _ in range(r.randint(1, 12)))
            if r.random() < 0.3:
                s = s.capitalize() + r.choice([".", "!", "?", ",", ";", ":", "...", " -"])
        elif k < 0.35:
            s = r.choice([str(r.randint(0, 10 ** r.randint(1, 12))), f"{r.uniform(-1e4, 1e4):.{r.randint(0, 6)}f}",
                          f"{r.randint(1900, 2099)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}",
                          f"{r.randint(0, 23)}:{r.randint(0, 59):02d}", f"{r.random():.3e}", "1,234,567.89",
                          "٣٤٥", "Ⅻ", "½", "²³", "१२३", "0x" + "".join(r.choice("0123456789abcdef") for _ in range(8))])
        elif k < 0.47:
            s = "".join(r.choice(SPACES) for _ in range(r.randint(1, 8)))
        elif k < 0.55:
            s = r.choice(ACCENTED)
            if r.random() < 0.3:
                s += r.choice(COMBINING)
        elif k < 0.62:
            s = r.choice(CONTRACTIONS)
        elif k < 0.70:
            block = r.choice([(0x4E00, 0x9FFF), (0x3040, 0x309F), (0x30A0, 0x30FF), (0xAC00, 0xD7A3), (0x0E00, 0x0E5B)])
            s = "".join(rand_char(r, *block) for _ in range(r.randint(1, 20)))
            if r.random() < 0.3:
                s += r.choice(["。", "、", "！", "？", "「", "」"])
        elif k < 0.78:
            s = "".join(rand_char(r, *r.choice([(0x1F300, 0x1F64F), (0x1F680, 0x1F6FF), (0x2600, 0x26FF), (0x1F900, 0x1F9FF)]))
                        + (r.choice(EMOJI_MODS) if r.random() < 0.3 else "") for _ in range(r.randint(1, 5)))
        elif k < 0.88:
            s = "".join(r.choice("!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~'") for _ in range(r.randint(1, 6)))
        else:
            s = "".join(rand_char(r, 0x20, 0x2FFF) for _ in range(r.randint(1, 10)))
            s = "".join(c for c in s if not 0xD800 <= ord(c) <= 0xDFFF)
        out.append(s)
        size += len(s.encode("utf-8"))
        if r.random() < 0.6:
            out.append(" ")
    return "".join(out).encode("utf-8")


def invalid(r, n):
    """Mostly text, with broken UTF-8 spliced in."""
    text = bytearray(made_up(r, n))
    bad = [b"\x80", b"\xbf", b"\xc0\xaf", b"\xc1\xbf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
           b"\xf0\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5", b"\xff", b"\xfe", b"\xe2\x82", b"\xf0\x9f\x98",
           b"\xc3", b"\xe2", b"\xf0\x9f", b"\xef\xbf\xbd", b"\x00"]
    for _ in range(max(1, n // 200)):
        at = r.randint(0, len(text))
        piece = r.choice(bad) if r.random() < 0.8 else bytes(r.randint(0, 255) for _ in range(r.randint(1, 6)))
        text[at:at] = piece
    return bytes(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--min-bytes", type=int, default=1_100_000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    r = random.Random(a.seed)
    docs = []
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(path):
            with open(path, "rb") as f:
                docs.append(f.read())
    sources = sorted(glob.glob(os.path.join(REPO, "include", "remat", "**", "*.hpp"), recursive=True) +
                     glob.glob(os.path.join(REPO, "tests", "**", "*.cpp"), recursive=True) +
                     glob.glob(os.path.join(REPO, "**", "*.md"), recursive=True) +
                     glob.glob(os.path.join(REPO, "**", "*.py"), recursive=True) +
                     glob.glob(os.path.join(REPO, "**", "*.sh"), recursive=True))
    code = 0
    for path in sources:
        if code > 450_000:
            break
        with open(path, "rb") as f:
            data = f.read()
        docs.append(data)
        code += len(data)
    total = sum(map(len, docs))
    while total < a.min_bytes:
        n = r.randint(200, 6000)
        docs.append(invalid(r, n) if r.random() < 0.2 else made_up(r, n))
        total += len(docs[-1])
    # the edges: empty, one byte, only whitespace, a long run of one character
    docs += [b"", b" ", b"\n", b"a", b"   \n\n  \t ", b" " * 3000, b"=" * 5000, b"\xf0" * 7, "🙂".encode() * 100]
    with open(a.out, "wb") as f:
        for d in docs:
            f.write(b"%d\n" % len(d))
            f.write(d)
    print(f"{len(docs)} documents, {sum(map(len, docs))} bytes")


if __name__ == "__main__":
    main()
