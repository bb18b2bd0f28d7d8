"""Rendezvous (highest-random-weight) hashing: every proxy ranks the replicas for a key the same
way without sharing any state, and removing a replica moves only the keys it owned."""

from __future__ import annotations

from collections.abc import Sequence
from hashlib import blake2b

from proxy.routing.backend import Backend


def weight(key: int | str, url: str) -> int:
    return int.from_bytes(blake2b(f"{key}|{url}".encode(), digest_size=8).digest(), "little")


def rank(key: int | str, candidates: Sequence[Backend]) -> list[int]:
    """Each candidate's place (0 = preferred) for this key."""
    weights = [weight(key, b.url) for b in candidates]
    order = sorted(range(len(candidates)), key=lambda i: weights[i], reverse=True)
    places = [0] * len(candidates)
    for place, i in enumerate(order):
        places[i] = place
    return places
