"""Run a proxy app in tests: in-process (lifespan + ASGI transport), or served on a port."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx
import uvicorn
import uvloop

from deploy.net import free_port, wait_http
from proxy.app import create_app
from proxy.settings import Settings


@asynccontextmanager
async def proxy_client(settings: Settings, **kwargs: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its lifespan run, behind an httpx client (no sockets)."""
    app = create_app(settings, **kwargs)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
            client.app = app  # type: ignore[attr-defined]
            yield client


@contextmanager
def serve_in_thread(settings: Settings) -> Iterator[str]:
    """The real server (uvicorn, uvloop, httptools) on a free port, in a thread."""
    port = free_port()
    settings = Settings(**{**settings_dict(settings), "port": port})
    config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, loop="uvloop",
                            http="httptools", log_config=None, access_log=False)
    server = uvicorn.Server(config)
    # uvloop, as `python -m proxy serve` runs it (asyncio.run would give the stdlib loop, on
    # which a client's disconnect reaches the app measurably later).
    thread = threading.Thread(target=lambda: uvloop.run(server.serve()), daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/health", 120)
        yield url
    finally:
        server.should_exit = True
        thread.join(15)


def settings_dict(settings: Settings) -> dict[str, Any]:
    return {f: getattr(settings, f) for f in settings.__dataclass_fields__}
