#!/usr/bin/env python3
"""Writes the tokenizer's reference corpus: documents of varied text, deterministic (seeded),
at least --min-bytes in all, as `<length in bytes>\\n<bytes>` records (binary-safe: some
documents hold invalid UTF-8 on purpose). Sources: the license texts every Debian ships
(/usr/share/common-licenses: English prose), the repository's own sources (code), and made-up
text: words, numbers and dates; the decimal digits of every script Unicode 16.0 has (Nd), Roman
numerals, fractions and superscripts (Nl, No); letters of ~60 scripts and blocks, CJK up to
Extension I, Hangul, the new 16.0 scripts (Garay, Todhri, Sunuwar, Kirat Rai); combining marks;
runs of every White_Space character and of look-alikes that are not (U+FEFF, U+200B, U+180E,
U+001C..U+001F); emoji with ZWJ, skin tones and variation selectors; contractions in every case
and with U+2019; random code points from the whole range; and invalid bytes (stray
continuations, truncated sequences, overlongs, surrogates); the added and special tokens of
GPT-2, Llama 3 and Qwen and near misses of them; letters followed by combining marks in every
order (classes old and new: NFC reorders and composes some), Hangul jamo and singletons.

    python3 tests/text/reference/make_corpus.py OUT [--min-bytes 1500000] [--seed 1]
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
         "question work government number night point home water room mother area money story "
         "zebra zone lazy quiz jazz size prize zero Zurich Zoe Zn buzz fizz").split()
ACCENTED = ("café naïve résumé façade jalapeño Ærøskøbing Zürich straße coöperate piñata crème "
            "brûlée Ελληνικά γλώσσα Русский язык Україна Việt Nam ĐĂNG Ñandú İstanbul ǅemal "
            "Dvořák Łódź Škoda Ångström Żółć ẞ ﬁnance Ǆ").split()
CONTRACTIONS = ["don't", "I'LL", "it's", "we're", "they've", "I'm", "she'd", "can't", "'s", "'t",
                "'re", "'ve", "'m", "'ll", "'d", "''s", "' s", "rock 'n' roll", "O'Neil", "'tis",
                "y'all", "ma'am", "'S", "' '", "'''", "it\u2019s", "'\u00e9t\u00e9", "'\u0441",
                "'9", "' 's", "x'ss", "'LL've", "'D", "'M", "'Re", "'vE", "'z", "'Z"]
# every White_Space character (Unicode 16.0), and look-alikes that are not White_Space
WHITE_SPACE = (["\t", "\n", "\x0b", "\x0c", "\r", " ", "\u0085", "\u00a0", "\u1680"] +
               [chr(c) for c in range(0x2000, 0x200B)] + ["\u2028", "\u2029", "\u202f", "\u205f", "\u3000"])
NOT_SPACE = ["\ufeff", "\u200b", "\u200c", "\u200d", "\u2060", "\u180e", "\x1c", "\x1d", "\x1e",
             "\x1f", "\u00ad", "\x00", "\x7f"]
SPACES = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\t\t"] + WHITE_SPACE + NOT_SPACE
COMBINING = ["\u0301", "\u0308", "\u0327", "\u20dd", "\u0336", "\u064e", "\u05b8", "\u0e49",
             "\u093f", "\u0bcd", "\u302a", "\U000e0100", "\ufe0f", "\u1ab0", "\u1dc0"]
# added and special tokens of GPT-2, Llama 3 and Qwen 2/3, and near misses of them
ADDED = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|end_of_text|>",
         "<|eot_id|>", "<|reserved_special_token_7|>", "<|reserved_special_token_250|>", "<think>",
         "</think>", "<tool_call>", "<|fim_prefix|>", "<|endoftext|", "<|im_start", "|endoftext|>",
         "<|<|endoftext|>|>", "< think>", "<THINK>", "<|begin_of_text|><|begin_of_text|>", "<|eot_id|>\u0338"]
# what NFC changes: marks after letters in any order, decomposed letters, Hangul jamo, singletons
NFC_MARKS = [0x300, 0x301, 0x302, 0x308, 0x30a, 0x316, 0x323, 0x327, 0x328, 0x334, 0x338, 0x345,
             0x5b0, 0x5bc, 0x5c1, 0x64b, 0x650, 0x93c, 0x94d, 0x9bc, 0x9be, 0x9cd, 0x9d7, 0xb3e,
             0xbbe, 0xbd7, 0xcd5, 0xd3e, 0xdca, 0xe38, 0xe48, 0xf71, 0xf72, 0xf80, 0x102e, 0x1037,
             0x1b35, 0x1dc0, 0x20d2, 0x302a, 0x3099, 0x309a, 0x1d165, 0x1d16d, 0x11d42, 0x1193e,
             0x11930, 0x16d67]
NFC_BASES = ("aeiouAEIOUnNcCsSzyY<=>\u0391\u03b1\u0415\u0438\u05d0\u0627\u0915\u0995\u09c7"
             "\u0b47\u0bc6\u0d46\u0dd9\u0e01\u1025\u1b05\u304b\u30cf\U00011935\U00016d63")
EMOJI_MODS = ["\u200d", "\U0001F3FB", "\U0001F3FF", "\ufe0f"]
# the zero of each run of ten decimal digits (general category Nd) in Unicode 16.0
DIGIT_ZEROS = [0x30, 0x660, 0x6f0, 0x7c0, 0x966, 0x9e6, 0xa66, 0xae6, 0xb66, 0xbe6, 0xc66, 0xce6,
               0xd66, 0xde6, 0xe50, 0xed0, 0xf20, 0x1040, 0x1090, 0x17e0, 0x1810, 0x1946, 0x19d0,
               0x1a80, 0x1a90, 0x1b50, 0x1bb0, 0x1c40, 0x1c50, 0xa620, 0xa8d0, 0xa900, 0xa9d0,
               0xa9f0, 0xaa50, 0xabf0, 0xff10, 0x104a0, 0x10d30, 0x10d40, 0x11066, 0x110f0,
               0x11136, 0x111d0, 0x112f0, 0x11450, 0x114d0, 0x11650, 0x116c0, 0x116d0, 0x116da,
               0x11730, 0x118e0, 0x11950, 0x11bf0, 0x11c50, 0x11d50, 0x11da0, 0x11f50, 0x16130,
               0x16a60, 0x16ac0, 0x16b50, 0x16d70, 0x1ccf0, 0x1d7ce, 0x1d7d8, 0x1d7e2, 0x1d7ec,
               0x1d7f6, 0x1e140, 0x1e2f0, 0x1e4f0, 0x1e5f1, 0x1e950, 0x1fbf0]
OTHER_NUMBERS = ("\u2160\u2161\u216b\u2170\u3007\u3021\u00bd\u00bc\u2153\u00b2\u00b3\u00b9\u2070"
                 "\u2074\u2080\u2460\u2473\u2776\u3251\u32b1\U00010107\U0001f100\U00012400")
# letter blocks of many scripts (first, last), some with gaps that are not letters
SCRIPTS = [(0x41, 0x7a), (0xc0, 0x24f), (0x1e00, 0x1eff), (0x370, 0x3ff), (0x400, 0x4ff),
           (0x531, 0x587), (0x5d0, 0x5ea), (0x620, 0x64a), (0x671, 0x6d3), (0x710, 0x72f),
           (0x780, 0x7a5), (0x7ca, 0x7ea), (0x904, 0x939), (0x985, 0x9b9), (0xa05, 0xa39),
           (0xa85, 0xab9), (0xb05, 0xb39), (0xb85, 0xbb9), (0xc05, 0xc39), (0xc85, 0xcb9),
           (0xd05, 0xd3a), (0xd85, 0xdc6), (0xe01, 0xe30), (0xe81, 0xeb0), (0xf40, 0xf6c),
           (0x1000, 0x102a), (0x10a0, 0x10ff), (0x1100, 0x11ff), (0x1200, 0x135a), (0x13a0, 0x13f5),
           (0x1401, 0x166c), (0x1681, 0x169a), (0x16a0, 0x16ea), (0x1780, 0x17b3), (0x1820, 0x1878),
           (0x3041, 0x3096), (0x30a1, 0x30fa), (0x3105, 0x312f), (0x3400, 0x4dbf), (0x4e00, 0x9fff),
           (0xa000, 0xa48c), (0xa500, 0xa60b), (0xac00, 0xd7a3), (0xff21, 0xff5a), (0x10400, 0x1044f),
           (0x105c0, 0x105f3), (0x10d4a, 0x10d65), (0x11bc0, 0x11be0), (0x16d43, 0x16d6a),
           (0x12000, 0x12399), (0x13000, 0x1342f), (0x17000, 0x187f7), (0x1d400, 0x1d6a5),
           (0x1e900, 0x1e943), (0x20000, 0x2a6df), (0x2b740, 0x2b81d), (0x2ebf0, 0x2ee5d),
           (0x30000, 0x3134a), (0x31350, 0x323af)]


def rand_char(r, lo, hi):
    return chr(r.randint(lo, hi))


def no_surrogates(s):
    return "".join(c for c in s if not 0xD800 <= ord(c) <= 0xDFFF)


def made_up(r, n):
    out = []
    size = 0
    while size < n:
        k = r.random()
        if k < 0.03:
            s = r.choice(ADDED)
        elif k < 0.06:
            s = "".join(r.choice(NFC_BASES) + "".join(chr(r.choice(NFC_MARKS)) for _ in range(r.randint(0, 4)))
                        for _ in range(r.randint(1, 4)))
            if r.random() < 0.3:  # Hangul: jamo L V (T), syllables LV + T, compatibility and singletons
                s += r.choice(["\u1100\u1161", "\u1112\u1175\u11c2", "\uac00\u11a8", "\uac01\u11a8",
                               "\u1100\u1100\u1161", "\u212b", "\u2126", "\uf900", "\u0344", "\u0f73",
                               "\u1e9b\u0323", "\u0958", "\ufb1d", "\u2adc", "\U0001d15e"])
        elif k < 0.20:
            s = " ".join(r.choice(WORDS) for _ in range(r.randint(1, 12)))
            if r.random() < 0.3:
                s = s.capitalize() + r.choice([".", "!", "?", ",", ";", ":", "...", " -"])
        elif k < 0.28:
            s = r.choice([str(r.randint(0, 10 ** r.randint(1, 12))), f"{r.uniform(-1e4, 1e4):.{r.randint(0, 6)}f}",
                          f"{r.randint(1900, 2099)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}",
                          f"{r.randint(0, 23)}:{r.randint(0, 59):02d}", f"{r.random():.3e}", "1,234,567.89",
                          "٣٤٥", "Ⅻ", "½", "²³", "१२३", "0x" + "".join(r.choice("0123456789abcdef") for _ in range(8))])
        elif k < 0.34:  # digits of one script (sometimes mixed with another), other numbers
            zero = r.choice(DIGIT_ZEROS)
            s = "".join(chr(zero + r.randint(0, 9)) if r.random() < 0.8 else chr(r.choice(DIGIT_ZEROS) + r.randint(0, 9))
                        for _ in range(r.randint(1, 8)))
            if r.random() < 0.3:
                s += "".join(r.choice(OTHER_NUMBERS) for _ in range(r.randint(1, 3)))
        elif k < 0.46:  # a whitespace run of any kind, then maybe a letter, number or symbol
            s = "".join(r.choice(SPACES) for _ in range(r.randint(1, 8)))
            if r.random() < 0.5:
                s += r.choice(["a", "Z", "7", "!", "\u00e9", "\u4e00", "'s", "\U0001F600", r.choice(NOT_SPACE)])
        elif k < 0.52:
            s = r.choice(ACCENTED)
            if r.random() < 0.3:
                s += r.choice(COMBINING)
        elif k < 0.58:
            s = r.choice(CONTRACTIONS)
        elif k < 0.70:  # letters of one script, sometimes with combining marks
            lo, hi = r.choice(SCRIPTS)
            s = "".join(rand_char(r, lo, hi) + (r.choice(COMBINING) if r.random() < 0.1 else "")
                        for _ in range(r.randint(1, 20)))
            if r.random() < 0.3:
                s += r.choice(["。", "、", "！", "？", "「", "」", "।", "؟", "።"])
        elif k < 0.76:
            s = "".join(rand_char(r, *r.choice([(0x1F300, 0x1F64F), (0x1F680, 0x1F6FF), (0x2600, 0x26FF), (0x1F900, 0x1F9FF)]))
                        + (r.choice(EMOJI_MODS) if r.random() < 0.3 else "") for _ in range(r.randint(1, 5)))
        elif k < 0.84:
            s = "".join(r.choice("!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~'") for _ in range(r.randint(1, 6)))
        elif k < 0.92:
            s = no_surrogates("".join(rand_char(r, 0x20, 0x2FFF) for _ in range(r.randint(1, 10))))
        else:  # anywhere: unassigned, private use, noncharacters, planes 1-16
            s = no_surrogates("".join(rand_char(r, 0, 0x10FFFF) if r.random() < 0.5 else rand_char(r, 0, 0x2FFFF)
                                      for _ in range(r.randint(1, 6))))
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
    ap.add_argument("--min-bytes", type=int, default=1_500_000)
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
        if os.path.relpath(path, REPO).startswith("build"):  # build trees: not the repository's
            continue
        with open(path, "rb") as f:
            data = f.read()
        docs.append(data)
        code += len(data)
    total = sum(map(len, docs))
    while total < a.min_bytes:
        n = r.randint(200, 6000)
        docs.append(invalid(r, n) if r.random() < 0.2 else made_up(r, n))
        total += len(docs[-1])
    # the edges: empty, one byte, only whitespace, long runs of one character, the cases
    docs += [b"", b" ", b"\n", b"a", b"   \n\n  \t ", b" " * 3000, b"=" * 5000, b"\xf0" * 7, "🙂".encode() * 100,
             "\u0085".encode() * 50, "\ufeff".encode() * 50, "\u3000".encode() * 50, "a \ufeffb".encode(),
             "a \u0085b".encode(), "".join(WHITE_SPACE).encode() + b"x", b"z" * 4000, b"Zz zZ z'z" * 30]
    with open(a.out, "wb") as f:
        for d in docs:
            f.write(b"%d\n" % len(d))
            f.write(d)
    print(f"{len(docs)} documents, {sum(map(len, docs))} bytes")


if __name__ == "__main__":
    main()
