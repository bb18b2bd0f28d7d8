"""What arrives with a request before it is understood: its id, its key, its bounded body."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import uuid
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive

from proxy.errors import PayloadTooLarge, RequestTimeout, Unauthorized
from proxy.response_ids import AS_IS, ResponseIds, tag

T = TypeVar("T")


class ClientGone(Exception):
    """The client disconnected before its answer was ready."""


def request_id(request: Request) -> str:
    given = request.headers.get("x-request-id")
    if given and len(given) <= 128 and given.isprintable() and given.isascii():
        return given
    return uuid.uuid4().hex


class KeyRing:
    """Bearer tokens compared in constant time; a key's identity is a short hash of it."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        # Compared as SHA-256 digests: equal lengths, so neither a key's length nor its bytes
        # shape the time a comparison takes; every key is compared, found or not.
        self._keys = [(_digest(k.encode()), identity(k)) for k in keys]
        self._ids = {identity(k): ResponseIds(f"~{tag(k)}") for k in keys}

    @property
    def open(self) -> bool:
        return not self._keys

    def tenant(self, request: Request) -> str:
        if not self._keys:
            return ""
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized("missing API key: send 'Authorization: Bearer <key>'")
        given = _digest(token.strip().encode())
        found = ""
        for key, identity in self._keys:  # no early exit: compare every key
            if hmac.compare_digest(given, key):
                found = identity
        if not found:
            raise Unauthorized("invalid API key")
        return found

    def response_ids(self, tenant: str) -> ResponseIds:
        """The ids of `tenant` (as tenant() named it) for vLLM's stored responses: its own
        (proxy/response_ids.py); without API keys, vLLM's as they are."""
        return self._ids[tenant] if self._keys else AS_IS


def identity(key: str) -> str:
    """What logs, metrics, the cache and per-key limits call a key: never the key itself."""
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _digest(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()


def is_json(request: Request) -> bool:
    """vLLM's check, to the letter: the media type before any ';', lower-cased, not stripped."""
    media = request.headers.get("content-type", "").lower().split(";", maxsplit=1)[0]
    return media == "application/json"


async def read_body(request: Request, limit: int, deadline: float) -> bytes:
    """The body, at most `limit` bytes (else 413), all of it within `deadline` seconds
    (PROXY_BODY_TIMEOUT; else 408: a slow-loris client cannot hold a connection open for long)."""
    timeout = deadline
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"the request body is {declared} bytes; the limit is {limit}")
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise PayloadTooLarge(f"the request body exceeds the limit of {limit} bytes")
                chunks.append(chunk)
    except ClientDisconnect:
        raise ClientGone() from None
    except TimeoutError:
        raise RequestTimeout(f"the request body did not arrive within {timeout:g} s") from None
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def until_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Run work; if the client disconnects first, cancel it (and with it the upstream call)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request.receive))
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.wait((task,))  # let the upstream call close before going on
    raise ClientGone()


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
