"""An ASGI app served for real (uvicorn, a free loopback port) on the running event loop, so a
test's client, the proxy and a fake upstream can all live on one loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn

from deploy.net import free_port


@asynccontextmanager
async def served(app: Any, **config: Any) -> AsyncIterator[str]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None,
                                           access_log=False, **config))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)  # uvicorn offers no started event to wait on
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
