"""Short keyword-style and informal rewrites of a question that keep what it asks.

A rewrite drops only words that carry no part of the answer: the how-to scaffolding ("How do I",
"what's the way to", "steps to"), "do I" after "how long/many/much", articles, politeness, the
question mark; or it puts the tool or place first ("pandas read CSV file", "france capital"),
or it swaps words for their chat forms ("u", "w/", "pls"). Every other word stays, so negations,
numbers, units, entities and the words that give a direction ("to", "from", "than", "without")
keep their place: a pair (rewrite(x), y) has the label of (x, y). Quoted text and code are never
touched. The rules are general (no word lists tied to a pair); a text none of them changes has
no rewrite.

`content_words` is the bag the corpus compares questions by: lowercase words without function
words and the corpus's informal noise, with a plural "s" cut.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

PREFIXES = ("quick question: ", "hey, ", "pls help - ", "so ", "hi! ", "question: ", "ok so ")
SUFFIXES = (" thanks", " ??", " pls", " (asking for a friend)", " thx", "!")

STOP = frozenset("""a an the i me my mine you your yours we our us it its is are was were be been
being am do does did doing can could should would will shall may might must how what whats which
who whom whose why when where to of in on for with at by from into onto about as and or but if
then so that this these those there here any some just please pls thanks thx hey hi ok okay
question quick help someone anyone way steps step get got tell show me know want need s""".split())

_QUOTED = re.compile(r"`[^`]*`|\"[^\"]*\"|“[^”]*”|‘[^’]*’|(?<![\w])'[^']*'(?![\w])")
_HOWTO = re.compile(
    r"^(?:how (?:do|can|should|would|could) (?:i|you|we|one)|how to|"
    r"what(?:'s| is) the (?:best |easiest |right |quickest )?way to|"
    r"(?:the )?best way to|is there a way to|what are the steps to|steps to|"
    r"can (?:you|someone) (?:show me how to|tell me how to|help me)|i (?:want|need) to|"
    r"help me) (.+)$", re.IGNORECASE)
_HOW_QTY = re.compile(r"^(how (?:many|much|long|far|often|big|old)(?: \w+)?) "
                      r"(?:do|does|did|should|can|would|will) (?:i|you|we|it) (.+)$",
                      re.IGNORECASE)
_WHAT_THE = re.compile(r"^(?:what(?:'s| is| are| was| were)|tell me|do you know) (the .+)$",
                       re.IGNORECASE)
_MEAN = re.compile(r"^what (?:does|do) (.+) mean$", re.IGNORECASE)
_EXPLAIN = re.compile(r"^(?:explain|describe) (.+)$", re.IGNORECASE)
_ARTICLE = re.compile(r"\b(?:a|an|the)\s+(?!(?:day|week|month|year|hour|minute|second|time|lot|"
                      r"few|little|bit|couple)\b)", re.IGNORECASE)
_TAIL = re.compile(r"^(.{6,}?) (?:in|with|using|via|on) ([\w.#+-]+(?: [\w.#+-]+)?)$", re.IGNORECASE)
_OF = re.compile(r"^([\w-]+(?: [\w-]+){0,2}) of ([\w-]+(?: [\w-]+){0,2})$", re.IGNORECASE)
_CHAT = {"you": "u", "your": "ur", "you're": "ur", "please": "pls", "thanks": "thx",
         "with": "w/", "without": "w/o", "because": "bc", "and": "&", "i'm": "im",
         "don't": "dont", "can't": "cant", "doesn't": "doesnt", "what's": "whats",
         "isn't": "isnt", "won't": "wont", "are": "r"}
_WRAP = ("{x} - how?", "how 2 {x}", "anyone know how to {x}?", "trying to {x}, how",
         "{x}??", "need to {x}, how?")
_PREPS = frozenset("in on with using via for to from of at by into than".split())


def strip_noise(text: str) -> str:
    """The text without the corpus's informal prefixes and suffixes (any number of them)."""
    changed = True
    while changed:
        changed = False
        for p in PREFIXES:
            if text.lower().startswith(p.lower()) and len(text) > len(p):
                text, changed = text[len(p):], True
        for s in SUFFIXES:
            if text.lower().endswith(s.lower()) and len(text) > len(s):
                text, changed = text[:-len(s)], True
    return text


def _stem(word: str) -> str:
    word = word.removesuffix("'s")
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def content_words(text: str) -> frozenset[str]:
    words = re.findall(r"[a-z0-9][a-z0-9'+#]*", strip_noise(text).lower())
    return frozenset(_stem(w) for w in words if w not in STOP and _stem(w) not in STOP)


def _protect(text: str) -> tuple[str, list[str]]:
    spans: list[str] = []

    def hold(m: re.Match[str]) -> str:
        spans.append(m.group(0))
        return f"qq{len(spans) - 1}qq"

    return _QUOTED.sub(hold, text), spans


def _restore(text: str, spans: list[str]) -> str:
    return re.sub(r"qq(\d+)qq", lambda m: spans[int(m.group(1))], text, flags=re.IGNORECASE)


def _bare(text: str) -> str:
    return text.strip().rstrip("?.!").strip()


def keyword(text: str, rng: random.Random | None = None) -> str | None:
    """'How do I read a CSV file in pandas?' -> 'read CSV file in pandas'."""
    t = _bare(text)
    for pattern, form in ((_HOWTO, "{0}"), (_HOW_QTY, "{0} {1}"), (_WHAT_THE, "{0}"),
                          (_MEAN, "{0} meaning"), (_EXPLAIN, "{0} explained")):
        m = pattern.match(t)
        if m:
            t = form.format(*m.groups())
            break
    t = _ARTICLE.sub("", t).strip()
    return t


def tool_first(text: str, rng: random.Random | None = None) -> str | None:
    """'read CSV file in pandas' -> 'pandas read CSV file'; 'capital of France' -> 'France
    capital'."""
    t = keyword(text)
    if t is None:
        return None
    m = _TAIL.match(t)
    if m and not set(m.group(2).lower().split()) & (STOP | _PREPS | {"explained", "meaning"}) \
            and not re.search(r"\d", m.group(2)):
        return f"{m.group(2)} {m.group(1)}"
    m = _OF.match(t)
    if m and not set(f"{m.group(1)} {m.group(2)}".lower().split()) & (_PREPS | {"and", "or"}):
        return f"{m.group(2)} {m.group(1)}"
    return None


def chat(text: str, rng: random.Random) -> str | None:
    """Chat spelling ('how do i save a file with your tool' -> 'how do i save a file w/ ur
    tool'), or a how-to question wrapped the way people type it ('anyone know how to X?')."""
    t = _bare(text)
    m = _HOWTO.match(t)
    if m and rng.random() < 0.5:
        x = " ".join(_CHAT.get(w, w) for w in m.group(1).split())
        return rng.choice(_WRAP).format(x=x)
    words = t.split()
    swapped = [_CHAT.get(w.lower(), w) for w in words]
    return " ".join(swapped).lower() if swapped != words else None


RULES: tuple[Callable[[str, random.Random], str | None], ...] = (keyword, tool_first, chat)


def rewrite(text: str, rng: random.Random) -> str | None:
    """One rewrite of text by a rule picked with rng, or None when no rule changes it."""
    if "\n" in text:
        return None
    held, spans = _protect(strip_noise(text))
    for rule in rng.sample(RULES, len(RULES)):
        out = rule(held, rng)
        if out is None or len(out.split()) < 2:
            continue
        out = _restore(out, spans)
        if _bare(out).lower() != _bare(strip_noise(text)).lower() \
                and content_words(out) >= content_words(text) - {"mean", "explain"}:
            return out
    return None
