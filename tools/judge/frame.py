"""A question frame: paraphrase templates over slots, and the edits that change the answer.

A slot value is a tuple of surface forms (synonyms); rendering picks one form per slot, so two
renderings of the same values are paraphrases with little word overlap. A contrast edits the
values (change one, swap two), renders with other templates (negation, task, modality), or
appends a constraint; the result asks for a different answer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

Value = tuple[str, ...]


@dataclass(frozen=True)
class Contrast:
    kind: str
    op: str  # change | swap | alt | suffix
    args: tuple[str, ...] = ()  # slot names (change, swap), templates (alt), phrases (suffix)
    para: bool = True  # alt: its templates are paraphrases of each other


@dataclass(frozen=True)
class Frame:
    name: str
    domain: str
    templates: tuple[str, ...]
    slots: dict[str, tuple[Value, ...]]
    contrasts: tuple[Contrast, ...]
    fixed: dict[str, Value] = field(default_factory=dict)  # slots not varied across instances


def change(kind: str, slot: str) -> Contrast:
    return Contrast(kind, "change", (slot,))


def swap(kind: str, a: str, b: str) -> Contrast:
    return Contrast(kind, "swap", (a, b))


def alt(kind: str, *templates: str, para: bool = True) -> Contrast:
    return Contrast(kind, "alt", templates, para)


def suffix(kind: str, *phrases: str) -> Contrast:
    return Contrast(kind, "suffix", phrases)


def render(template: str, values: dict[str, Value], rng: random.Random) -> str:
    text = template.format(**{k: rng.choice(v) for k, v in values.items()})
    return text[0].upper() + text[1:] if text and rng.random() < 0.7 else text


def pick_values(frame: Frame, rng: random.Random) -> dict[str, Value]:
    values: dict[str, Value] = dict(frame.fixed)
    used: set[Value] = set()
    for slot, choices in frame.slots.items():
        free = [c for c in choices if c not in used] or list(choices)
        values[slot] = rng.choice(free)
        used.add(values[slot])
    return values


def edited(frame: Frame, contrast: Contrast, values: dict[str, Value],
           rng: random.Random) -> dict[str, Value] | None:
    out = dict(values)
    if contrast.op == "change":
        slot = contrast.args[0]
        others = [c for c in frame.slots[slot] if c != values[slot]
                  and not set(c) & set(values[slot])]
        if not others:
            return None
        out[slot] = rng.choice(others)
    elif contrast.op == "swap":
        a, b = contrast.args
        if set(values[a]) & set(values[b]):
            return None
        out[a], out[b] = values[b], values[a]
    return out
