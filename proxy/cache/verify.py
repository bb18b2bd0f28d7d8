"""The second stage: reject near-misses that cosine similarity alone lets through.

Embedding cosine says two questions are *about* the same thing; it is nearly blind to the
small words that change the answer. After the cosine floor, each candidate must pass a set of
cheap lexical checks, each with a reason label (counted in metrics):

- negation:  the count of negation words differs ("reverse" vs "not reverse", "without");
- antonym:   one side of an antonym group in one text, the other side in the other
             (increase/decrease, bigger/smaller, encode/decode, ascending/descending ...);
- direction: a word is a source in one text and a target in the other, around to/into/from
             or than/over/before/after ("JSON to YAML" vs "YAML to JSON");
- number:    numbers, number words, ordinals or dates differ;
- unit:      units of measure differ;
- payload:   quoted strings or `code literals` differ (compared case-sensitively);
- entity:    a named thing (a capitalised word, a code-like token, a known language, tool or
             format) in one text does not occur in the other (Python vs JavaScript);
- content:   the content words differ too much for the cosine: content-token Jaccard (after
             light stemming and a small synonym table) must reach a floor that relaxes as the
             cosine rises, and a substituted word is allowed only at very high cosine.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from difflib import SequenceMatcher

from proxy.cache import lexicon as lx

_TOKEN = re.compile(
    r"`[^`]+`|\"[^\"]+\"|'[^'\s][^']*[^'\s]'(?=\W|$)|->|=>|→|===|!==|==|!=|<=|>=|[=<>]"
    r"|\d+(?:[.,:/-]\d+)*(?:st|nd|rd|th)?|[A-Za-z][A-Za-z0-9_+#.'-]*[A-Za-z0-9_+#]|[A-Za-z]|%")
_STRIP = re.compile(r"'s$|'$")
_CODEISH = re.compile(r"[_()\[\]{}=<>/\\]|\.[a-z]|[a-z][A-Z]|[A-Za-z]\d|\d[A-Za-z]")
_OPERATORS = frozenset({"===", "!==", "==", "!=", "<=", ">=", "=", "<", ">"})
REASONS = ("below_threshold", "negation", "antonym", "direction", "number", "unit", "payload",
           "entity", "content")


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    reason: str | None = None  # one of REASONS when not ok


def _stem(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("sses", "shes", "ches", "xes", "zes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    if len(word) > 5 and word.endswith("ing"):
        return _undouble(word[:-3])
    if len(word) > 5 and word.endswith("ed") and not word.endswith("eed"):
        return _undouble(word[:-2])
    if len(word) > 7 and word.endswith("able"):
        return word[:-4]
    if len(word) > 5 and word.endswith("ly"):
        return word[:-2]
    if len(word) > 6 and word.endswith("er") and not word.endswith("ster"):
        return word[:-2]
    return word


def _undouble(stem: str) -> str:
    if len(stem) > 3 and stem[-1] == stem[-2] and stem[-1] not in "lsz":
        return stem[:-1]
    return stem


def _canon(word: str) -> str:
    if word in lx.SYNONYMS:
        return lx.SYNONYMS[word]
    stem = _stem(word)
    return lx.SYNONYMS.get(stem, stem)


@dataclass(slots=True)
class _Features:
    words: list[str]  # lower-case word tokens in order (no literals)
    vocab: set[str]  # every word, raw and canonical
    literals: list[str]  # quoted strings, code literals and operators, in order
    negations: int
    numbers: Counter[str]
    units: set[str]
    entities: set[str]
    content: set[str]
    roles: dict[str, str]


def _sentence_initial(tokens: list[str], i: int) -> bool:
    return i == 0 or tokens[i - 1] in {".", "?", "!", ":"}


def features(text: str) -> _Features:
    low_text = text.lower()
    for phrase, token in lx.PHRASES.items():
        if phrase in low_text:
            text = re.sub(re.escape(phrase), token, text, flags=re.IGNORECASE)
    raw = _TOKEN.findall(text)
    literals: list[str] = []
    words: list[str] = []
    entities: set[str] = set()
    numbers: Counter[str] = Counter()
    negations = text.lower().count("n't")
    for i, tok in enumerate(raw):
        if tok[0] in "`\"'" and len(tok) > 2 and tok[-1] == tok[0]:
            literals.append(tok[1:-1].strip())
            continue
        if tok in _OPERATORS:
            literals.append(tok)
            continue
        low = _STRIP.sub("", tok.lower())
        if low[0].isdigit():
            numbers[low.replace(",", "")] += 1
            words.append(low)
            continue
        words.append(low)
        if low in lx.NEGATIONS:
            negations += 1
        capital = tok[0].isupper() and not _sentence_initial(raw, i) and len(tok) > 1
        if low in lx.STOPWORDS and not (capital and low in lx.TECH):
            continue
        if low in lx.NUMBER_WORDS:
            numbers[lx.NUMBER_WORDS[low]] += 1
        elif low in lx.DATES:
            numbers[low[:3]] += 1
        canon = _canon(low)
        named = capital or (
            tok.isupper() and len(tok) > 1) or bool(_CODEISH.search(tok)) or canon in lx.TECH
        if named and low not in lx.UNITS:
            entities.add(canon)
    vocab = set(words) | {_canon(w) for w in words} | {_stem(w) for w in words}
    content = {_canon(part) for w in words if w not in lx.STOPWORDS and w not in lx.NEGATIONS
               and not w[0].isdigit() for part in w.split("-") if part not in lx.STOPWORDS}
    units = {_stem(w) for w in words if w in lx.UNITS} if numbers else set()
    return _Features(words=words, vocab=vocab, literals=literals, negations=negations,
                     numbers=numbers, units=units, entities=entities, content=content,
                     roles=_roles(words))


def _content_near(words: list[str], start: int, step: int) -> str | None:
    i = start
    while 0 <= i < len(words):
        w = words[i]
        if w in lx.TO_MARKERS or w in lx.FROM_MARKERS or w in lx.THAN_MARKERS:
            return None
        if w not in lx.STOPWORDS and not w.endswith(("er", "est")) or w in lx.TECH:
            return _canon(w)
        i += step
    return None


def _roles(words: list[str]) -> dict[str, str]:
    """word -> "src" | "dst" around directional markers."""
    roles: dict[str, str] = {}

    def put(word: str | None, role: str) -> None:
        if word is not None:
            roles.setdefault(word, role)

    for i, w in enumerate(words):
        if w in lx.FROM_MARKERS:
            put(_content_near(words, i + 1, 1), "src")
        elif w in lx.TO_MARKERS or w in lx.THAN_MARKERS:
            put(_content_near(words, i + 1, 1), "dst")
            if not any(m in lx.FROM_MARKERS for m in words[max(0, i - 6):i]):
                put(_content_near(words, i - 1, -1), "src")
    return roles


def _negated(a: set[str], b: set[str]) -> bool:
    """A word in one text whose negated form (un-, in-, dis-, non- ...) is in the other."""
    for word in a - b - lx.STOPWORDS:
        for prefix in lx.NEGATING_PREFIXES:
            if len(word) > 3 and (prefix + word in b or (
                    word.startswith(prefix) and word[len(prefix):] in b)):
                return True
    return False


def _antonym_clash(a: set[str], b: set[str]) -> bool:
    if _negated(a, b) or _negated(b, a):
        return True
    for left, right in lx.ANTONYMS:
        sides_a = (bool(a & left), bool(a & right))
        sides_b = (bool(b & left), bool(b & right))
        if any(sides_a) and any(sides_b) and sides_a != sides_b:
            return True
    return False


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def verify(query: str, cached: str, cosine: float, threshold: float) -> Verdict:
    if cosine < threshold:
        return Verdict(False, "below_threshold")
    if query == cached:
        return Verdict(True)
    fa, fb = features(query), features(cached)
    if fa.negations != fb.negations:
        return Verdict(False, "negation")
    if _antonym_clash(fa.vocab, fb.vocab):
        return Verdict(False, "antonym")
    if any(fb.roles.get(w, r) != r for w, r in fa.roles.items()):
        return Verdict(False, "direction")
    if fa.numbers != fb.numbers:
        return Verdict(False, "number")
    if fa.units != fb.units:
        return Verdict(False, "unit")
    if fa.literals != fb.literals:
        return Verdict(False, "payload")
    if not fa.entities <= fb.vocab or not fb.entities <= fa.vocab:
        return Verdict(False, "entity")
    if not _content_ok(fa.content, fb.content, cosine) or _swapped(fa.words, fb.words):
        return Verdict(False, "content")
    return Verdict(True)


def _swapped(a: list[str], b: list[str]) -> bool:
    """A word replaced by a different one in place ("for loop" vs "while loop")."""
    sa = [p for w in a for p in w.split("-") if p and p not in lx.FILLER]
    sb = [p for w in b for p in w.split("-") if p and p not in lx.FILLER]
    for op, i1, i2, j1, j2 in SequenceMatcher(None, sa, sb, autojunk=False).get_opcodes():
        if op != "replace":
            continue
        ca = {_canon(w) for w in sa[i1:i2] if w not in lx.STOPWORDS}
        cb = {_canon(w) for w in sb[j1:j2] if w not in lx.STOPWORDS}
        if ca and cb:
            if ca != cb and not (ca <= cb or cb <= ca):
                return True
        elif ca or cb:
            light = sa[i1:i2] if not ca else sb[j1:j2]
            if any(w in lx.STRUCTURAL for w in light):
                return True
    return False


def _content_ok(a: set[str], b: set[str], cosine: float) -> bool:
    only_a, only_b = a - b, b - a
    if only_a and only_b:  # a swapped word: file vs directory, key vs value
        return False
    need = 0.5 if cosine < 0.85 else 0.34 if cosine < 0.92 else 0.2
    return jaccard(a, b) >= need
