"""Admin endpoints for the answer cache, behind PROXY_ADMIN_KEY (Authorization: Bearer <key>).

GET  /admin/cache/stats                  -> {"mode", "entries", "indexed", ...}
POST /admin/cache/flush[?namespace=M]    -> {"flushed": n}  (all, or one model's entries)
Without PROXY_ADMIN_KEY the endpoints answer 404: they do not exist.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from proxy.cache.store import StoreUnavailable
from proxy.errors import NotFound, ProxyError, Unauthorized
from proxy.sending import error_response, json_response


class CacheUnavailable(ProxyError):
    status = 503


def _check(request: Request) -> Any:
    deps = request.app.state.deps
    key = deps.settings.admin_key
    if not key:
        raise NotFound(f"no route for {request.url.path}")
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    given = hashlib.sha256(token.strip().encode()).digest()  # equal lengths: no length leak
    if not hmac.compare_digest(given, hashlib.sha256(key.encode()).digest()) \
            or scheme.lower() != "bearer":
        raise Unauthorized("admin endpoints need 'Authorization: Bearer <PROXY_ADMIN_KEY>'")
    return deps.cache


async def cache_stats(request: Request) -> Response:
    try:
        cache = _check(request)
        stats = getattr(cache, "stats", None)
        body: dict[str, Any] = await stats() if stats is not None else {"mode": "off"}
    except StoreUnavailable as exc:
        return error_response(CacheUnavailable(f"cache store unavailable: {exc}"))
    except ProxyError as err:
        return error_response(err)
    return json_response(orjson.dumps(body))


async def cache_flush(request: Request) -> Response:
    try:
        cache = _check(request)
        namespace = request.query_params.get("namespace") or None
        flush = getattr(cache, "flush", None)
        flushed = await flush(namespace) if flush is not None else 0
    except StoreUnavailable as exc:
        return error_response(CacheUnavailable(f"cache store unavailable: {exc}"))
    except ProxyError as err:
        return error_response(err)
    return json_response(orjson.dumps({"flushed": flushed, "namespace": namespace}))
