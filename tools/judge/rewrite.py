"""Short keyword-style and informal rewrites of a question that keep what it asks.

A rewrite drops only words that carry no part of the answer: the how-to scaffolding ("How do I",
"what's the way to", "steps to"), "do I" after "how long/many/much", articles (never a letter
that names something: "vitamin A"), politeness, the question mark; or, once the scaffolding is
gone, it puts the tool or place first ("pandas read CSV file" from "... using pandas", "France
capital"), or it swaps words for their chat forms ("u", "w/", "pls"). Every other word stays, so
negations, numbers, units, entities and the words that give a direction ("to", "from", "than",
"without") keep their place: a pair (rewrite(x), y) has the label of (x, y). Quoted text is
never touched; a text with unquoted code or a quote whose end is unclear is not rewritten. The
rules are general (no word lists tied to a pair); a text none of them changes has no rewrite.

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

_QUOTED = re.compile(r"`[^`]*`|\"[^\"]*\"|“[^”]*”|‘[^’]*’|"
                     r"(?<!\w)'(?:[^']|(?<=\w)'(?=\w))*'(?!\w)")  # 'I'd like a table'
_STRAY = re.compile(r"[`\"“”‘’]|(?<!\w)'|'(?!\w)")  # a quote left unpaired
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
_ARTICLE = re.compile(r"(?:^(?:The|An)|\b(?:a|an|the))\s+(?=([\w'-]+))"
                      r"(?!(?:day|week|month|year|hour|minute|second|time|lot|few|little|bit|"
                      r"couple)\b)")
_TAIL = re.compile(r"^(.{6,}?) (using|via|in) ([A-Za-z][\w.#+-]*)$")
_OF = re.compile(r"^([\w-]+(?: [\w-]+)?) of ([\w-]+(?: [\w-]+){0,2})$")
_CODE = re.compile(r"\w\(|[=;{}<>\[\]|\\]|::|->|\$[A-Za-z_{(]")  # not "$500"
_ASKING = frozenset("what whats which who whom whose why when where how whether if".split())
_PARTICLES = frozenset("on off up out in down over away back around about through".split())
_CHAT = {"you": "u", "your": "ur", "you're": "ur", "please": "pls", "thanks": "thx",
         "with": "w/", "without": "w/o", "because": "bc", "and": "&", "i'm": "im",
         "don't": "dont", "can't": "cant", "doesn't": "doesnt", "what's": "whats",
         "isn't": "isnt", "won't": "wont", "are": "r"}
_WRAP = ("{x} - how?", "how 2 {x}", "anyone know how to {x}?", "trying to {x}, how",
         "{x}??", "need to {x}, how?")
_PREPS = frozenset("in on with using via for to from of at by into than".split())
_SCAFFOLD = frozenset({"mean", "explain", "using", "via"})  # words a rewrite may drop
_FUNCTION = STOP | _PREPS | _PARTICLES | {"and", "or", "vs", "versus", "nor"}


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


def _scaffolded(text: str) -> tuple[str, re.Pattern[str] | None]:
    """The text without its how-to / what-is scaffolding, and the pattern that matched it."""
    t = _bare(text)
    for pattern, form in ((_HOWTO, "{0}"), (_HOW_QTY, "{0} {1}"), (_WHAT_THE, "{0}"),
                          (_MEAN, "{0} meaning"), (_EXPLAIN, "{0} explained")):
        m = pattern.match(t)
        if m:
            return form.format(*m.groups()), pattern
    return t, None


def _articles(text: str, cased: bool) -> str:
    """Articles dropped: a lowercase a/an/the ('The'/'An' first) before a word that is no
    function word ('between a and an' stays). A capital 'A' mid-text is a name ('vitamin A',
    'Series A'), and in a text without capitals a single 'a' may be one too ('hepatitis a
    contagious'), so it stays there (cased: the whole text has a capital)."""

    def drop(m: re.Match[str]) -> str:
        word = m.group(0).split()[0]
        if m.group(1).lower() in _FUNCTION or (word == "a" and not cased):
            return m.group(0)
        return ""

    return _ARTICLE.sub(drop, text)


def _cased(text: str) -> bool:
    return any(c.isupper() for c in text)


def _keep_articles(text: str) -> bool:
    """The text may ask what a phrase means ('bite the bullet meaning', 'the meaning of a stitch
    in time'): the phrase is what is asked about, word for word, like a quoted one."""
    return bool(re.search(r"\bmean(?:ing|s)?\b", text, re.IGNORECASE))


def keyword(text: str, rng: random.Random | None = None) -> str | None:
    """'How do I read a CSV file in pandas?' -> 'read CSV file in pandas'."""
    t = _scaffolded(text)[0]
    return (t if _keep_articles(text) else _articles(t, _cased(text))).strip()


def _named(token: str, rest: str) -> bool:
    """token reads as a tool's or a place's name beside rest: capitalised or with a mark of a
    name ('Pandas', 'SQL', 'node.js', 'C#') in a text that is not all capitalised."""
    marked = token[:1].isupper() or bool(re.search(r"[.#+]", token))
    return marked and any(w[:1].islower() for w in rest.split())


def tool_first(text: str, rng: random.Random | None = None) -> str | None:
    """'read CSV file using pandas' -> 'pandas read CSV file'; 'capital of France' -> 'France
    capital'. Only on what is left of a question once its how-to / what-is scaffolding is
    stripped ('Who won the Battle of Hastings?' has none, so it is a whole question that no
    moving keeps); the tool is one word at the very end after 'using'/'via' (or after 'in', a
    name: 'in Excel', never 'in place'); 'X of Y' only for the noun phrase of 'what is the X of
    Y' ('get rid of hiccups' is no 'X of Y'), a short X that is no name ('the Battle of
    Hastings', 'the Articles of Confederation' are names), and not in a text without capitals,
    where a name cannot be told."""
    t, scaffold = _scaffolded(text)
    if scaffold is None:
        return None
    t = (t if _keep_articles(text) else _articles(t, _cased(text))).strip()
    m = _TAIL.match(t)
    if m:
        head, prep, tool = m.groups()
        if tool.lower() not in _FUNCTION | {"explained", "meaning"} \
                and not set(head.lower().split()) & _ASKING \
                and (prep != "in" or _named(tool, head)) and not re.search(r"\d", tool):
            return f"{tool} {head}"
        return None
    m = _OF.match(t)
    if m and scaffold is _WHAT_THE and _cased(text):
        head, tail = m.groups()
        name = any(w[:1].isupper() and not w.isupper() for w in head.split())
        if not set(f"{head} {tail}".lower().split()) & (_PREPS | _ASKING | {"and", "or"}) \
                and not name:
            return f"{tail} {head}"
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
    if _CODE.search(_protect(text)[0]) or _STRAY.search(_protect(strip_noise(text))[0]):
        return None  # unquoted code, or a quote whose end is unclear: it may hold any word
    held, spans = _protect(strip_noise(text))
    for rule in rng.sample(RULES, len(RULES)):
        out = rule(held, rng)
        if out is None or len(out.split()) < 2:
            continue
        out = _restore(out, spans)
        if _bare(out).lower() != _bare(strip_noise(text)).lower() \
                and content_words(out) >= content_words(text) - _SCAFFOLD:
            return out
    return None
