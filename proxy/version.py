"""vLLM's GET /version and GET /v1/models answers, each asked once at a time and kept a while:
/version is open (no key, no admission, no key limits), and each request was an upstream call,
so anyone could keep the upstream connection pool busy (found by a review). /v1/models, behind
the API key but outside admission and the key's limits (vLLM limits neither), was the same
lever for any key holder: 40 at once were 40 upstream calls (found by a probe). Built by the
app's lifespan."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from proxy.kept import Kept

VERSION_KEPT = 60.0  # seconds an answer of vLLM's GET /version is served again
# seconds an answer of vLLM's GET /v1/models is served again: short, as a LoRA adapter vLLM
# loads at run time joins its list (the catalog's own refresh waits as long, catalog.py)
MODELS_KEPT = 5.0


class VersionCache(Kept[bytes]):
    """vLLM's answer (the body) of /version, or of /v1/models kept MODELS_KEPT: one upstream call
    at a time, shared by every request meanwhile (its failure too, not kept), kept `kept` s."""

    def __init__(self, ask: Callable[[], Awaitable[bytes]], kept: float = VERSION_KEPT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(ask, kept, clock)

