"""What the request handlers are built with (app.py's lifespan makes each once: no globals),
and what a relay reads off them: its bounded buffer of an unfinished upstream event."""

from __future__ import annotations

from dataclasses import dataclass

from proxy.admission import Admission
from proxy.catalog import Catalog
from proxy.events import EventBuffer
from proxy.metrics import Metrics
from proxy.receive import KeyRing
from proxy.settings import Settings
from proxy.tokens import TokenCounter
from proxy.types import AnswerCache
from proxy.upstream import Upstream


@dataclass(slots=True)
class Deps:
    settings: Settings
    upstream: Upstream
    catalog: Catalog
    counter: TokenCounter
    cache: AnswerCache
    metrics: Metrics
    admission: Admission
    keys: KeyRing


def event_buffer(d: Deps, route: str) -> EventBuffer:
    """A relay's buffer of an unfinished upstream event: bounded, its overflow counted."""
    return EventBuffer(d.settings.max_event_bytes, d.metrics.events_too_large.labels(route).inc)
