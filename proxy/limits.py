"""Per-key limits, as gateways (LiteLLM, Kong, Portkey) offer them: concurrent requests,
requests per minute, tokens per minute; over a limit is 429 with Retry-After.

PROXY_KEY_LIMITS is a JSON object (inline, or the path of a file holding it): API key (or its
identity, the first 16 hex digits of its SHA-256) -> limits; "*" is the default for keys not
listed. For example {"*": {"rpm": 600, "tpm": 200000, "concurrent": 8},
"sk-team-a": {"rpm": 60}}. Rates are token buckets that refill continuously; tokens are charged
as the prompt's tokens before the call and the answer's tokens after it (a request may take a
key into debt once; the next waits until the debt is repaid). With several workers and no
shared store each worker enforces 1/PROXY_WORKERS of every limit (docs/reliability.md);
PROXY_KEY_LIMITS_SHARED=1 holds them across workers and replicas through Redis
(shared_limits.py)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from proxy.errors import TooManyRequests
from proxy.receive import identity

_FIELDS = ("concurrent", "rpm", "tpm")


class KeyLimited(TooManyRequests):
    code = "rate_limit_exceeded"


class LimitsError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class KeyLimit:
    concurrent: int | None = None
    rpm: float | None = None
    tpm: float | None = None

    def split(self, workers: int) -> KeyLimit:
        if workers == 1:
            return self
        return KeyLimit(
            None if self.concurrent is None else max(1, math.ceil(self.concurrent / workers)),
            None if self.rpm is None else self.rpm / workers,
            None if self.tpm is None else self.tpm / workers)


@dataclass(slots=True)
class _Bucket:
    """A token bucket of `per_minute` capacity, refilled at per_minute / 60 each second."""
    per_minute: float
    level: float
    at: float

    def refill(self, now: float) -> None:
        self.level = min(self.per_minute, self.level + (now - self.at) * self.per_minute / 60)
        self.at = now

    def wait(self, need: float) -> float:
        """Seconds until `need` is in the bucket (0: now)."""
        return max(0.0, (need - self.level) * 60 / self.per_minute)


@dataclass(slots=True)
class _State:
    active: int = 0
    requests: _Bucket | None = None
    tokens: _Bucket | None = None


def parse(spec: str | None) -> dict[str, KeyLimit]:
    """PROXY_KEY_LIMITS (inline JSON or a file's path) -> identity (or "*") -> limit."""
    if not spec:
        return {}
    try:
        text = spec if spec.lstrip()[:1] in ("{", "[") else Path(spec).read_text()
    except OSError as exc:
        raise LimitsError(f"PROXY_KEY_LIMITS: cannot read {spec!r}: {exc}") from None
    try:
        raw = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise LimitsError(f"PROXY_KEY_LIMITS is not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise LimitsError("PROXY_KEY_LIMITS must be a JSON object of key -> limits")
    out: dict[str, KeyLimit] = {}
    for key, limits in raw.items():
        if not isinstance(limits, dict) or set(limits) - set(_FIELDS):
            raise LimitsError(f"PROXY_KEY_LIMITS[{_shown(key)}]: an object with only "
                              f"{', '.join(_FIELDS)}")
        for name, value in limits.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise LimitsError(f"PROXY_KEY_LIMITS[{_shown(key)}].{name} must be positive")
        name = key if key == "*" or _is_identity(key) else identity(key)
        out[name] = KeyLimit(_int(limits.get("concurrent")), limits.get("rpm"),
                             limits.get("tpm"))
    return out


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _is_identity(key: str) -> bool:
    return len(key) == 16 and all(c in "0123456789abcdef" for c in key)


def _shown(key: str) -> str:
    return key if key == "*" or _is_identity(key) else identity(key)


class KeyLimits:
    def __init__(self, table: dict[str, KeyLimit], workers: int = 1,
                 on_refuse: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.table = {k: v.split(workers) for k, v in table.items()}
        self.on_refuse = on_refuse
        self.clock = clock
        self._state: dict[str, _State] = {}

    def _limit(self, tenant: str) -> KeyLimit | None:
        return self.table.get(tenant) or self.table.get("*")

    def _get(self, tenant: str, limit: KeyLimit) -> _State:
        state = self._state.get(tenant)
        if state is None:
            now = self.clock()
            state = self._state[tenant] = _State(
                requests=None if limit.rpm is None else _Bucket(limit.rpm, limit.rpm, now),
                tokens=None if limit.tpm is None else _Bucket(limit.tpm, limit.tpm, now))
        return state

    def refuse(self, which: str, message: str, wait: float) -> KeyLimited:
        if self.on_refuse is not None:
            self.on_refuse(which)
        return KeyLimited(f"{message} for this API key (PROXY_KEY_LIMITS); retry later",
                          headers={"Retry-After": str(max(1, math.ceil(wait)))})

    def enter(self, tenant: str) -> bool:
        """Count a request in; False when no limit applies (then no leave() is owed)."""
        limit = self._limit(tenant)
        if limit is None:
            return False
        state = self._get(tenant, limit)
        if limit.concurrent is not None and state.active >= limit.concurrent:
            raise self.refuse("concurrent", f"{limit.concurrent:g} concurrent requests", 1)
        if state.requests is not None:
            state.requests.refill(self.clock())
            wait = state.requests.wait(1)
            if wait > 0:
                raise self.refuse("rpm", f"{state.requests.per_minute:g} requests per minute",
                                   wait)
        if state.tokens is not None:
            state.tokens.refill(self.clock())
            wait = state.tokens.wait(0)
            if wait > 0 or state.tokens.level <= 0:
                raise self.refuse("tpm", f"{state.tokens.per_minute:g} tokens per minute",
                                   max(wait, 1))
        if state.requests is not None:  # taken only once admitted: a tpm refusal costs none
            state.requests.level -= 1
        state.active += 1
        return True

    def charge(self, tenant: str, tokens: int) -> None:
        state = self._state.get(tenant)
        if state is not None and state.tokens is not None and tokens > 0:
            state.tokens.refill(self.clock())
            state.tokens.level -= tokens

    def leave(self, tenant: str, tokens_out: int) -> None:
        state = self._state[tenant]
        state.active -= 1
        self.charge(tenant, tokens_out)

    # The interface the handler uses, shared with the Redis-backed limiter (shared_limits.py):
    # admit returns a lease (None: no limit applies, nothing owed), spend charges prompt tokens,
    # release hands the lease back with the answer's tokens.
    async def admit(self, tenant: str) -> str | None:
        return "local" if self.enter(tenant) else None

    async def spend(self, tenant: str, lease: str, tokens: int) -> None:
        self.charge(tenant, tokens)

    def release(self, tenant: str, lease: str, tokens_out: int) -> None:
        self.leave(tenant, tokens_out)

    async def aclose(self) -> None:
        return None
