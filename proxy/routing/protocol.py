"""The seam between the balancer and a routing policy: what a request tells the router, what
the router answers, and the three calls every policy implements."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from proxy.routing.backend import Backend


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """What routing may read about one completion request (never its text)."""
    tokens: Sequence[int] | None = None  # the chat-templated prompt's token ids, when counted
    session: str | None = None  # the session header, else the body's `user` field


@dataclass(frozen=True, slots=True)
class Choice:
    backend: Backend
    affinity: bool = False  # the policy found this replica holds the request's prefix/session
    spilled_from: Backend | None = None  # the replica affinity wanted, passed over for load


class Policy(Protocol):
    name: str
    wants_tokens: bool  # the handler asks the token counter for ids only when this is true

    async def key(self, request: RouteRequest | None) -> object:
        """Once per request, before the first pick: the policy's routing key (block hashes, a
        session id, None). May run off the event loop for large inputs."""
        ...

    def choose(self, candidates: Sequence[Backend], key: object) -> Choice:
        """The healthy candidates (never empty) and the key: which one serves the request.
        Called again, with fewer candidates, when the chosen one refuses the connection."""
        ...

    def refused(self, choice: Choice, key: object) -> None:
        """The chosen replica refused the connection, dropped it before answering, or its
        engine died: what choose recorded there for this key is not so (its KV cache may be
        gone); the request goes to another replica, which choose records in turn."""
        ...


def route_request(headers: Mapping[str, str], body: Mapping[str, Any], header: str,
                  tokens: Sequence[int] | None) -> RouteRequest:
    session = headers.get(header)
    user = body.get("user")
    if not session and isinstance(user, str) and user:
        session = user
    return RouteRequest(tokens=tokens, session=session or None)
