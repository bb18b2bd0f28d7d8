"""The hand-kept rules of the second stage: a pair they reject is never a hit.

Only general rules stay here; the learned judge (proxy/cache/judge.py) decides the rest.

- number: the numbers differ (digits with their sign, "10k", number words, ordinals up to the
          millionth, "two hundred"; not superscripts: "km²" is "square km" more often than an
          exponent, which the judge weighs);
- date:   the month names differ ("May 1990" vs "1990"); "may"/"march" count as months only
          when capitalised inside a sentence or next to a number;
- negation: one text negates its verb and the other does not (not, n't, never, no).

And one rule that accepts: `same_question` — texts that differ only in spacing, a trailing
"?"/"."/"!" after a word, full-width forms and, where neither holds code-like characters, the
capitals of a sentence's opening question word and of "I", are one question and need no judge
(the judge scored such pairs about -4, "different": its corpus pairs every near-identical text
with a one-word contrast and has no such positive; found in session 21).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

REASONS = ("number", "date", "negation", "judge")
_TOKEN = re.compile(r"(?<![A-Za-z0-9.])(?:[-−](?=\d))?\d+(?:[.,]\d+)*(?:k\b|m\b)?"
                    r"|[A-Za-z]+(?:'[a-z]+)?|[.?!:;]")
_WORDS = ("zero _ two three four five six seven eight nine ten eleven twelve thirteen "
          "fourteen fifteen sixteen seventeen eighteen nineteen").split()
_TENS = {w: 10 * (i + 2) for i, w in enumerate(
    "twenty thirty forty fifty sixty seventy eighty ninety".split())}
NUMBER_WORDS = {**{w: i for i, w in enumerate(_WORDS)}, **_TENS, "dozen": 12}
SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000, "billion": 1_000_000_000}
ORDINALS = {**{w: i + 1 for i, w in enumerate(
    ("_ second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth "
     "thirteenth fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth").split())},
    **{w: 10 * (i + 2) for i, w in enumerate(
        "twentieth thirtieth fortieth fiftieth sixtieth seventieth eightieth ninetieth".split())},
    "hundredth": 100, "thousandth": 1000, "millionth": 1_000_000}  # "first": often no number
MONTHS = ("january february march april may june july august september october november "
          "december").split()
_AMBIGUOUS_MONTHS = {"may", "march"}
NEGATIONS = {"not", "never", "no", "cannot"}


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    reason: str | None = None  # one of REASONS when not ok


@dataclass(frozen=True, slots=True)
class Facts:
    numbers: Counter[str]
    months: Counter[str]
    negations: int


def _number(token: str) -> str:
    scale = {"k": 1000, "m": 1_000_000}.get(token[-1].lower(), 1)
    digits = token.rstrip("kKmM").replace(",", "").replace("−", "-")
    try:
        value = float(digits) * scale
    except ValueError:
        return digits
    return str(int(value)) if value == int(value) else str(value)


def facts(text: str) -> Facts:
    tokens = _TOKEN.findall(text)
    numbers: Counter[str] = Counter()
    months: Counter[str] = Counter()
    negations = 0
    pending: int | None = None  # a number word that a scale word may multiply
    for i, tok in enumerate(tokens):
        low = tok.lower()
        if low in SCALES:
            numbers[str((pending if pending is not None else 1) * SCALES[low])] += 1
            pending = None
            continue
        if pending is not None:
            numbers[str(pending)] += 1
            pending = None
        if tok[0].isdigit() or tok[0] in "-−":
            numbers[_number(tok)] += 1
        elif low in NUMBER_WORDS:
            pending = NUMBER_WORDS[low]
        elif low in ORDINALS:
            numbers[f"{ORDINALS[low]}th"] += 1
        elif low in MONTHS and (low not in _AMBIGUOUS_MONTHS or _dated(tokens, i)):
            months[low] += 1
        elif low in NEGATIONS or low.endswith("n't"):
            negations += 1
    if pending is not None:
        numbers[str(pending)] += 1
    return Facts(numbers, months, negations)


def _dated(tokens: list[str], i: int) -> bool:
    near = tokens[max(0, i - 1):i] + tokens[i + 1:i + 2]
    capital = tokens[i][0].isupper() and i > 0 and tokens[i - 1] not in ".?!:;"
    return capital or any(t[0].isdigit() for t in near)


def check(query: str, cached: str) -> Verdict:
    """The rules alone; `Verdict(True)` means the judge decides."""
    a, b = facts(query), facts(cached)
    if a.numbers != b.numbers:
        return Verdict(False, "number")
    if a.months != b.months:
        return Verdict(False, "date")
    if (a.negations > 0) != (b.negations > 0):
        return Verdict(False, "negation")
    return Verdict(True)



# full-width ASCII forms, the ideographic space, NBSP and the ideographic full stop as ASCII
_WIDE = {c: c - 0xFEE0 for c in range(0xFF01, 0xFF5F)} | {0x3000: 0x20, 0xA0: 0x20, 0x3002: 0x2E}
# where any of these is, case, spacing and punctuation may be code's, a path's or a unit's
_CODE = re.compile(r"[`(){}\[\]=<>_$\\|;/%*'\"@#&^~+:\-]|\n")
_END = re.compile(r"(?<=[A-Za-z])(?:[.!]+|\s*\?+[.!]*)$")  # not after a digit: "10!", "x2?"
_OPENERS = frozenset(("what how who whom whose why when where which is are was were am can could "
                      "do does did should would will shall may might must have has had i "
                      "please tell explain give write list show find make help").split())
_FIRST = re.compile(r"(^|[.?!] )([A-Za-z]+)\b")
_I = re.compile(r"\bi\b")


def _plain(text: str) -> str:
    wide = text.translate(_WIDE)
    if _CODE.search(wide):  # code's every character may be its meaning: kept as written
        return text
    return _END.sub("", re.sub(r"[ \t]+", " ", wide.strip()))


def _lead(text: str) -> str:
    """A sentence's first word in sentence case when it is a question or function word, and
    the pronoun I: the only capitals a retyped question may lose without changing it."""
    def first(m: re.Match[str]) -> str:
        word = m.group(2)
        acronym = len(word) > 1 and word.isupper()  # "WHO says", "CAN bus": a name
        return m.group(1) + (word.capitalize() if word.casefold() in _OPENERS and not acronym
                             else word)

    return _I.sub("I", _FIRST.sub(first, text))


def same_question(query: str, cached: str) -> bool:
    """The same question written otherwise: other spacing, a trailing "?", "." or "!" after a
    word, full-width forms, and the capitals of a sentence's first (question or function)
    word, unless it is all capitals ("WHO", "CAN"), and of "I" (review of 2026-11-28:
    whole-text case folding, NFKC and stripping after digits made "Is Co toxic?"/"Is CO
    toxic?", "x²"/"x2", "10!"/"10" one). A text with code-like characters is the same only
    as written, character for character (a probe of session 23: its ends were trimmed and a
    final "." dropped, so "...\nnp" / "...\nnp." and "def fib(n):\n" / "def fib(n):\n    "
    shared answers)."""
    a, b = _plain(query), _plain(cached)
    if a == b:
        return True
    return not (_CODE.search(a) or _CODE.search(b)) and _lead(a) == _lead(b)
