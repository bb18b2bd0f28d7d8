"""The served models, as upstream /v1/models lists them: names, context length, model path."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.errors import BadGateway, ModelNotFound, ProxyError
from proxy.upstream import METADATA_WAIT, Upstream


@dataclass(frozen=True, slots=True)
class ModelInfo:
    name: str
    root: str | None
    max_model_len: int | None


def parse_models(content: bytes) -> dict[str, ModelInfo]:
    try:
        data: Any = orjson.loads(content)
        models = {}
        for item in data["data"]:
            length = item.get("max_model_len")
            models[str(item["id"])] = ModelInfo(
                name=str(item["id"]), root=item.get("root"),
                max_model_len=length if isinstance(length, int) and length > 0 else None)
        return models
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise BadGateway(f"upstream /v1/models answered something unexpected: {exc}") from None


class Catalog:
    """Loaded at start when an upstream answers, and again (at most every few seconds) when a
    request names a model not seen yet."""

    def __init__(self, upstream: Upstream, min_refresh: float = 5.0,
                 on_models: Callable[[dict[str, ModelInfo]], Awaitable[None]] | None = None,
                 ) -> None:
        self.upstream = upstream
        self.on_models = on_models
        self.models: dict[str, ModelInfo] = {}
        self.min_refresh = min_refresh
        self._last = -1e9

    async def refresh(self) -> dict[str, ModelInfo]:
        self._last = time.monotonic()
        answer = await self.upstream.fetch("GET", "/v1/models", wait=METADATA_WAIT)
        self.models = parse_models(answer)
        if self.on_models is not None:
            await self.on_models(self.models)
        return self.models

    async def resolve(self, name: str | None) -> ModelInfo:
        if name is not None and name in self.models:
            return self.models[name]
        if name is None and self.models:
            return next(iter(self.models.values()))
        if not self.models or time.monotonic() - self._last >= self.min_refresh:
            try:
                await self.refresh()
            except ProxyError:
                if not self.models:
                    raise
            return self._lookup(name)
        return self._lookup(name)

    def _lookup(self, name: str | None) -> ModelInfo:
        if name is None and self.models:
            return next(iter(self.models.values()))
        if name is not None and name in self.models:
            return self.models[name]
        valid = ", ".join(self.models)
        raise ModelNotFound(f"The model `{name}` does not exist. Valid aliases: {valid}.",
                            param="model")
