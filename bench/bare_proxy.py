"""The baseline: a bare Starlette + httpx pass-through (no validation, no metrics, no logs).

    python -m bench.bare_proxy --upstream http://127.0.0.1:9000 --port 9100

Everything "ours" adds is measured against this, on the same cores, in the same run.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

_HOP = {"host", "content-length", "connection", "transfer-encoding", "accept-encoding"}


def make_app(upstream: str) -> Starlette:
    client = httpx.AsyncClient(base_url=upstream, timeout=600, trust_env=False,
                               limits=httpx.Limits(max_connections=512,
                                                   max_keepalive_connections=512))

    async def forward(request: Request) -> Response:
        headers = {k: v for k, v in request.headers.items() if k not in _HOP}
        req = client.build_request(request.method, request.url.path,
                                   content=await request.body(), headers=headers)
        resp = await client.send(req, stream=True)
        out = {k: v for k, v in resp.headers.items() if k not in _HOP}
        if resp.headers.get("content-type", "").startswith("text/event-stream"):
            async def body() -> AsyncIterator[bytes]:
                async for chunk in resp.aiter_raw():
                    yield chunk
            return StreamingResponse(body(), resp.status_code, out,
                                     background=BackgroundTask(resp.aclose))
        content = await resp.aread()
        await resp.aclose()
        return Response(content, resp.status_code, out)

    routes = [Route("/v1/chat/completions", forward, methods=["POST"]),
              Route("/v1/completions", forward, methods=["POST"]),
              Route("/v1/models", forward, methods=["GET"]),
              Route("/health", forward, methods=["GET"])]
    return Starlette(routes=routes)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--upstream", required=True)
    p.add_argument("--port", type=int, default=9100)
    a = p.parse_args()
    uvicorn.run(make_app(a.upstream.rstrip("/")), host="127.0.0.1", port=a.port, loop="uvloop",
                http="httptools", log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
