#!/usr/bin/env python3
"""ctest text.unicode_python: the tokenizer's letter and number classes (unicode_tables.hpp) against
Python's own Unicode database (unicodedata, compiled into Python: another implementation and
another copy of the data), one code point at a time, for every code point Python knows to be
assigned. Python's Unicode is usually older than the tables' (Debian 12's Python 3.11: 14.0.0);
code points assigned since are checked by the unit tests' digests (unicode_digests.hpp) and by
text.unicode_tables. Where Python's is newer, only code points the tables call "other" (perhaps
unassigned in their version) may differ. White_Space is not in unicodedata: the unit tests list it.

    python3 tests/text/check_unicode_classes.py path/to/remat_encode_corpus include/remat/text/unicode_tables.hpp
"""
import re
import subprocess
import sys
import unicodedata


def version(s):
    return tuple(int(x) for x in s.split("."))


def main():
    binary, header = sys.argv[1:3]
    ours_version = re.search(r'kUnicodeVersion\[\] = "([0-9.]+)"', open(header, encoding="utf-8").read()).group(1)
    ours = subprocess.run([binary, "--classes"], check=True, capture_output=True).stdout
    if len(ours) != 0x110000:
        sys.exit(f"FAILED: {binary} --classes gave {len(ours)} bytes, expected {0x110000}")
    py_version = unicodedata.unidata_version
    newer = version(py_version) > version(ours_version)
    checked, counts, bad, tolerated = 0, {"L": 0, "N": 0}, [], 0
    for cp in range(0x110000):
        cat = unicodedata.category(chr(cp))
        if cat == "Cn":
            continue
        want = cat[0] if cat[0] in "LN" else "o"
        got = chr(ours[cp])
        got = got if got in "LN" else "o"  # 's' (White_Space) is neither letter nor number
        checked += 1
        if want in counts:
            counts[want] += 1
        if got != want:
            if newer and got == "o":
                tolerated += 1
            else:
                bad.append(f"U+{cp:04X} {unicodedata.name(chr(cp), '?')}: Python {cat}, remat '{got}'")
    if bad:
        print(f"FAILED: {len(bad)} of {checked} code points assigned in Python's Unicode {py_version} have "
              f"another class in remat's tables (Unicode {ours_version}); the first:")
        print("\n".join("  " + b for b in bad[:20]))
        sys.exit(1)
    print(f"ok: {checked} code points assigned in Python's Unicode {py_version} ({counts['L']} letters, "
          f"{counts['N']} numbers) have the same class in remat's tables (Unicode {ours_version})" +
          (f"; {tolerated} newer than the tables not compared" if newer else ""))


if __name__ == "__main__":
    main()
