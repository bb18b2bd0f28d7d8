"""The cache workload: natural questions with controlled exact repeats, paraphrases, near misses
and Zipf popularity, each tagged with its canonical question (to catch wrong cached answers)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources

import numpy as np

from loadtest.request import Request, WorkloadConfig


@dataclass(frozen=True)
class Family:
    id: str
    forms: list[str]
    values: list[str]


def load_families() -> list[Family]:
    raw = json.loads(resources.files("loadtest").joinpath("data/questions.json").read_text())
    return [Family(f["id"], f["forms"], f["values"]) for f in raw["families"]]


def zipf_pick(rng: np.random.Generator, items: list[int], s: float) -> int:
    """One of `items` (already in popularity order), P(rank k) ~ 1/(k+1)^s."""
    w = 1.0 / np.arange(1, len(items) + 1, dtype=float) ** s
    return items[int(rng.choice(len(items), p=w / w.sum()))]


class Generator:
    def __init__(self, cfg: WorkloadConfig) -> None:
        c = cfg.cache
        self.cfg = cfg
        self.rng = np.random.default_rng(cfg.seed)
        self.families = load_families()
        every = [(f, v) for f in range(len(self.families))
                 for v in range(len(self.families[f].values))]
        order = self.rng.permutation(len(every))
        self.pool = [every[i] for i in order[: int(c.get("questions", 200))]]
        self.rank = {q: k for k, q in enumerate(self.pool)}  # popularity rank; others last
        self.seen: list[tuple[int, int]] = []
        self.forms_sent: dict[tuple[int, int], list[int]] = {}
        self.p = [c.get("repeat", 0.3), c.get("paraphrase", 0.2), c.get("near_miss", 0.1)]
        self.s = float(c.get("zipf", 1.0))

    def text(self, q: tuple[int, int], form: int) -> str:
        fam = self.families[q[0]]
        return fam.forms[form].replace("{x}", fam.values[q[1]])

    def popular_seen(self) -> tuple[int, int]:
        ranked = sorted(range(len(self.seen)), key=lambda i: self.rank.get(self.seen[i], 1 << 30))
        return self.seen[zipf_pick(self.rng, ranked, self.s)]

    def new(self) -> tuple[int, int] | None:
        unseen = [k for k, q in enumerate(self.pool) if q not in self.forms_sent]
        return self.pool[zipf_pick(self.rng, unseen, self.s)] if unseen else None

    def near_miss(self, q: tuple[int, int]) -> tuple[int, int] | None:
        n = len(self.families[q[0]].values)
        sib = [(q[0], v) for v in range(n) if (q[0], v) not in self.forms_sent]
        return sib[int(self.rng.integers(len(sib)))] if sib else None

    def next(self) -> tuple[str, tuple[int, int], int]:
        u = float(self.rng.random())
        kind = ("repeat" if u < self.p[0] else "paraphrase" if u < sum(self.p[:2])
                else "near_miss" if u < sum(self.p) else "new")
        if not self.seen:
            kind = "new"
        if kind == "new":
            q = self.new()
            if q is None:
                kind, q = "repeat", self.popular_seen()
            return self.emit(kind, q, int(self.rng.integers(len(self.families[q[0]].forms))))
        base = self.popular_seen()
        sent = self.forms_sent[base]
        if kind == "repeat":
            return self.emit(kind, base, sent[int(self.rng.integers(len(sent)))])
        if kind == "paraphrase":
            forms = len(self.families[base[0]].forms)
            fresh = [f for f in range(forms) if f not in sent]
            if not fresh:  # every wording already sent: it can only be a repeat
                return self.emit("repeat", base, sent[int(self.rng.integers(len(sent)))])
            return self.emit(kind, base, fresh[int(self.rng.integers(len(fresh)))])
        q2 = self.near_miss(base)  # same wording as something sent, another value
        if q2 is None:
            return self.emit("repeat", base, sent[0])
        return self.emit("near_miss", q2, sent[int(self.rng.integers(len(sent)))])

    def emit(self, kind: str, q: tuple[int, int], form: int) -> tuple[str, tuple[int, int], int]:
        if q not in self.forms_sent:
            self.seen.append(q)
            self.forms_sent[q] = []
        if form not in self.forms_sent[q]:
            self.forms_sent[q].append(form)
        return kind, q, form


def cache_stream(cfg: WorkloadConfig) -> Iterator[Request]:
    g = Generator(cfg)
    for i in itertools.count():
        kind, q, form = g.next()
        cid = f"{g.families[q[0]].id}:{g.families[q[0]].values[q[1]]}"
        yield Request(i, g.text(q, form), cfg.output_len, None, cfg.ignore_eos,
                      canonical_id=cid, kind=kind)
