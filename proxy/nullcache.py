"""The cache that never caches: PROXY_CACHE=off, or before proxy.cache exists."""

from __future__ import annotations

from proxy.types import BYPASS, CacheRequest, CacheResult, Completion, Shared


class NullCache:
    async def lookup(self, req: CacheRequest) -> CacheResult:
        return BYPASS

    async def store(self, ticket: object, completion: Completion) -> None:
        return None

    async def abandon(self, ticket: object) -> None:
        return None

    def share(self, ticket: object, events: list[bytes]) -> Shared | None:
        return None

    async def aclose(self) -> None:
        return None
