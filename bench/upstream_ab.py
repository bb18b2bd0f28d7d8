"""Why the upstream client is aiohttp behind proxy/transport.py: the same proxy, two clients.

    python -m bench.upstream_ab [--repeats 5] [--seconds 5] [--json docs/results/upstream-ab.json]

Against the load tester's mock (answers at once for JSON; 10 ms + 32 tokens 2 ms apart for
streams), the proxy runs with the production transport (`aiohttp`) and with an httpx
implementation of the same seam (`httpx`, defined here), alternating, `--repeats` times each.
Closed-loop load: JSON at concurrency 64 (the proxy's max req/s) and streams at 16. Prints
the median and the spread (min-max) of req/s and p50 latency per client, and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import httpx

from bench import lean, procs
from bench.overhead import bodies
from deploy.net import free_port
from proxy.errors import BadGateway, UpstreamError, UpstreamTimeout, UpstreamUnavailable
from proxy.transport import Limits

CLIENTS = ("aiohttp", "httpx")
LOADS = {"json_c64": (False, 0, 0, 64), "stream_c16": (True, 10, 2, 16)}  # ttft, itl ms


class _HttpxReply:
    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.aiter_raw():
                yield chunk
        except httpx.HTTPError as exc:
            raise _translate(exc) from None

    async def read(self) -> bytes:
        return b"".join([c async for c in self.chunks()])

    def close(self) -> None:
        asyncio.get_running_loop().create_task(self._response.aclose())


def _translate(exc: httpx.HTTPError) -> UpstreamError:
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return UpstreamUnavailable(type(exc).__name__)
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamTimeout(type(exc).__name__)
    return BadGateway(type(exc).__name__)


class HttpxTransport:
    """The seam on httpx's own pool (httpcore), configured like the aiohttp one."""

    def __init__(self, limits: Limits) -> None:
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(connect=limits.connect, read=limits.read, write=limits.read,
                                  pool=limits.pool),
            limits=httpx.Limits(max_connections=limits.connections,
                                max_keepalive_connections=limits.connections,
                                keepalive_expiry=limits.keepalive),
            trust_env=False, headers={"accept-encoding": "identity"})

    async def request(self, method: str, url: str, content: bytes | None,
                      headers: Mapping[str, str], wait: float | None = None) -> _HttpxReply:
        try:
            request = self._client.build_request(method, url, content=content,
                                                 headers=dict(headers), timeout=wait)
            return _HttpxReply(await self._client.send(request, stream=True))
        except httpx.HTTPError as exc:
            raise _translate(exc) from None

    async def aclose(self) -> None:
        await self._client.aclose()


def serve(client: str) -> None:
    import uvicorn

    from proxy.app import create_app
    from proxy.logs import setup_logging
    from proxy.settings_env import load_settings
    from proxy.upstream import limits

    settings = load_settings()
    setup_logging(settings.log_level)
    transport = HttpxTransport(limits(settings)) if client == "httpx" else None
    app = create_app(settings, transport=transport, freeze_gc=True)
    uvicorn.run(app, host="127.0.0.1", port=settings.port, loop="uvloop", http="httptools",
                log_config=None, access_log=False)


def proxy(client: str, upstream: str) -> procs.Proc:
    port = free_port()
    env = {"PROXY_UPSTREAM": upstream, "PROXY_PORT": str(port), "PROXY_CACHE": "off",
           "PROXY_TOKENIZER": str(procs.tiny_model()), "PROXY_LOG_LEVEL": "warning",
           "PROXY_MAX_INFLIGHT": "1024", "PROXY_MAX_WAITING": "1024",
           "TOKENIZERS_PARALLELISM": "false"}
    return procs.Proc(f"ab-{client}", [procs.PY, "-m", "bench.upstream_ab", "serve", client],
                      f"http://127.0.0.1:{port}", "0", env, timeout=180)


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.upstream_ab")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {c: {k: [] for k in LOADS}
                                                       for c in CLIENTS}
    for load, (stream, ttft, itl, conc) in LOADS.items():
        b = bodies(256, stream, 32 if stream else 16)
        with procs.mock(ttft, itl, "1", f"mock-{load}") as m:
            for r in range(args.repeats):
                for client in CLIENTS if r % 2 == 0 else CLIENTS[::-1]:
                    with proxy(client, m.url) as p:
                        res = asyncio.run(lean.run(p.url + "/v1/chat/completions", b, conc,
                                                   duration=args.seconds, warmup=2 * conc))
                    s = res.summary()
                    runs[client][load].append(s)
                    print(f"  {load:10} #{r} {client:7} rps={s['rps']:7.1f} "
                          f"p50={s['e2el_p50_ms']:6.2f} ms errors={s['errors']}", flush=True)
    summary: dict[str, Any] = {}
    for load in LOADS:
        row = {c: {"rps": spread([s["rps"] for s in runs[c][load]]),
                   "p50_ms": spread([s["e2el_p50_ms"] for s in runs[c][load]])} for c in CLIENTS}
        ratio = row["aiohttp"]["rps"]["median"] / row["httpx"]["rps"]["median"]
        summary[load] = {**row, "rps_ratio_aiohttp_over_httpx": ratio}
        for c in CLIENTS:
            rps, p50 = row[c]["rps"], row[c]["p50_ms"]
            print(f"{load:10} {c:7} req/s median {rps['median']:7.1f} "
                  f"[{rps['min']:.1f}-{rps['max']:.1f}]  p50 {p50['median']:.2f} ms "
                  f"[{p50['min']:.2f}-{p50['max']:.2f}]")
        print(f"{load:10} aiohttp/httpx req/s: {ratio:.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"repeats": args.repeats, "seconds": args.seconds,
                                         "summary": summary, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2])
    else:
        sys.exit(main())
