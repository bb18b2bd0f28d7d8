"""Issue 12: each attack of the hardening probe, replayed against `python -m proxy serve` (in
front of the loadtest mock), printing held / broken with the measured figure.

    python -m bench.attack [--slow-conns 20000] [--only NAME ...] [--json PATH]

Attacks: slowloris (connections sending headers one byte every 2 s while a normal client keeps
asking), stuck_streams (key B opens never-read streams, key A must still be served), empty_messages
(100k empty messages while /health is timed), big_batch (400k prompts), deep_json (300 levels),
workers (PROXY_WORKERS=2: counters monotonic over scrapes), validation (vLLM's verdicts).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench import procs

CHAT = "/v1/chat/completions"
ASK = {"model": "mock", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
Result = dict[str, Any]


def p99(xs: list[float]) -> float:
    return sorted(xs)[min(len(xs) - 1, int(len(xs) * 0.99))] if xs else float("nan")


async def timed_gets(url: str, stop: asyncio.Event, every: float, path: str = "/health",
                     body: dict[str, Any] | None = None) -> tuple[list[float], int]:
    """A normal client: one request per `every` s until stop; latencies and failures."""
    lat, failed = [], 0
    async with httpx.AsyncClient(timeout=30) as c:
        while not stop.is_set():
            t = time.perf_counter()
            try:
                r = await (c.post(url + path, json=body) if body else c.get(url + path))
                failed += r.status_code != 200
            except httpx.HTTPError:
                failed += 1
            lat.append(time.perf_counter() - t)
            await asyncio.sleep(every)
    return lat, failed


async def slowloris(mock: procs.Proc, n: int) -> Result:
    timeout = 5.0
    with procs.ours(mock.url, None, {"PROXY_HEADER_TIMEOUT": str(timeout)}) as proxy:
        host, port = proxy.url.removeprefix("http://").split(":")
        closed_after: list[float] = []
        refused = 0

        async def one() -> None:
            nonlocal refused
            try:
                reader, writer = await asyncio.open_connection(host, int(port))
            except OSError:
                refused += 1
                return
            start = time.perf_counter()
            try:
                writer.write(b"GET /health HTTP/1.1\r\n")
                while True:  # one byte every 2 s, until the proxy closes the connection
                    try:
                        data = await asyncio.wait_for(reader.read(1), 2.0)
                    except TimeoutError:
                        writer.write(b"X")
                        continue
                    if not data:
                        break
                closed_after.append(time.perf_counter() - start)
            except OSError:
                closed_after.append(time.perf_counter() - start)
            finally:
                writer.close()

        # the normal client in its own process: this one's loop is busy with the attack
        normal = await asyncio.create_subprocess_exec(
            procs.PY, "-m", "bench.attack", "--probe", proxy.url, stdout=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.PIPE, cwd=procs.REPO)
        t0 = time.perf_counter()
        tasks = []
        for _ in range(n):
            tasks.append(asyncio.ensure_future(one()))
            if len(tasks) % 500 == 0:
                await asyncio.sleep(0)
        await asyncio.gather(*tasks)
        out, _ = await normal.communicate(b"stop\n")
        probe = json.loads(out)
        lat, failed = probe["latencies"], probe["failed"]
    worst = max(closed_after) if closed_after else float("nan")
    held = failed == 0 and p99(lat) < 1.0 and worst < timeout + 5
    return {"attack": "slowloris", "connections": n, "refused_at_connect": refused,
            "closed_by_proxy": len(closed_after), "slowest_close_s": round(worst, 2),
            "header_timeout_s": timeout, "normal_requests": len(lat), "normal_failed": failed,
            "normal_p99_s": round(p99(lat), 3), "attack_s": round(time.perf_counter() - t0, 1),
            "held": held}


def never_read(url: str, key: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    body = orjson.dumps({**ASK, "stream": True, "max_tokens": 200_000})
    sock.sendall(f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Authorization: Bearer {key}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                 + body)
    return sock


async def stuck_streams(mock: procs.Proc) -> Result:
    env = {"PROXY_API_KEYS": "key-a,key-b", "PROXY_MAX_INFLIGHT": "2", "PROXY_MAX_WAITING": "8",
           "PROXY_QUEUE_TIMEOUT": "2", "PROXY_SEND_TIMEOUT": "10",
           "PROXY_MAX_OUTPUT_TOKENS": "200000"}
    with procs.ours(mock.url, None, env, ready_path="/health") as proxy:
        socks = [never_read(proxy.url, "key-b") for _ in range(2)]
        t0 = time.perf_counter()
        statuses = []
        cut = 0.0
        async with httpx.AsyncClient(timeout=30) as c:
            # until the stuck stream has filled the socket buffers and then made no progress
            # for PROXY_SEND_TIMEOUT; key A asks twice a second all along
            while cut < 1 and time.perf_counter() - t0 < 120:
                r = await c.post(proxy.url + CHAT, json=ASK,
                                 headers={"Authorization": "Bearer key-a"})
                statuses.append(r.status_code)
                await asyncio.sleep(0.5)
                cut = _metric((await c.get(proxy.url + "/metrics")).text,
                              "proxy_send_timeouts_total")
        took = time.perf_counter() - t0
        for s in socks:
            s.close()
    ok = statuses.count(200)
    return {"attack": "stuck_streams", "key_a_requests": len(statuses), "key_a_200": ok,
            "stuck_streams_cut_by_send_timeout": cut, "send_timeout_s": 10,
            "cut_after_s": round(took, 1),
            "held": ok == len(statuses) and cut >= 1}


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def stall(url: str, path: str, raw: bytes, parallel: int) -> tuple[list[int], float]:
    """Send `parallel` copies of raw while /health is timed; statuses and the worst stall."""
    stop = asyncio.Event()
    health = asyncio.ensure_future(timed_gets(url, stop, 0.01))
    async with httpx.AsyncClient(timeout=120) as c:
        rs = await asyncio.gather(*(c.post(url + path, content=raw, headers={
            "content-type": "application/json"}) for _ in range(parallel)))
    await asyncio.sleep(0.2)
    stop.set()
    lat, _ = await health
    return [r.status_code for r in rs], max(lat)


async def empty_messages(mock: procs.Proc) -> Result:
    raw = orjson.dumps({"model": "mock", "messages": [{"role": "user", "content": ""}] * 100_000})
    with procs.ours(mock.url, None) as proxy:
        statuses, worst = await stall(proxy.url, CHAT, raw, 8)
    return {"attack": "empty_messages", "messages": 100_000, "parallel": 8,
            "statuses": sorted(set(statuses)), "health_worst_s": round(worst, 3),
            "held": set(statuses) == {413} and worst < 0.5}


async def big_batch(mock: procs.Proc) -> Result:
    raw = orjson.dumps({"model": "mock", "prompt": ["a"] * 400_000, "max_tokens": 1})
    with procs.ours(mock.url, None) as proxy:
        statuses, worst = await stall(proxy.url, "/v1/completions", raw, 1)
    return {"attack": "big_batch", "prompts": 400_000, "statuses": statuses,
            "health_worst_s": round(worst, 3), "held": statuses == [413] and worst < 0.5}


async def deep_json(mock: procs.Proc) -> Result:
    out = {}
    with procs.ours(mock.url, None) as proxy:
        async with httpx.AsyncClient(timeout=30) as c:
            for depth in (253, 300, 1023):
                raw = orjson.dumps(ASK)[:-1] + b',"tools":' + b"[" * depth + b"]" * depth + b"}"
                r = await c.post(proxy.url + CHAT, content=raw)
                out[depth] = r.status_code
            errors = _metric((await c.get(proxy.url + "/metrics")).text,
                             "proxy_unexpected_errors_total")
    return {"attack": "deep_json", "statuses_by_depth": out, "unexpected_errors": errors,
            "held": set(out.values()) == {400} and errors == 0}


async def workers(mock: procs.Proc) -> Result:
    name = 'proxy_requests_total{route="/v1/chat/completions",status="200"}'
    seen = []
    with procs.ours(mock.url, None, workers=2) as proxy:
        for _ in range(8):
            for _ in range(5):  # a new connection each: spread over the workers
                async with httpx.AsyncClient(timeout=30) as c:
                    await c.post(proxy.url + CHAT, json=ASK)
            async with httpx.AsyncClient(timeout=30) as c:
                seen.append(_metric((await c.get(proxy.url + "/metrics")).text, name))
    return {"attack": "workers", "scrapes": seen,
            "held": seen == sorted(seen) and seen[-1] == 40}


async def validation(mock: procs.Proc) -> Result:
    cases: dict[str, tuple[dict[str, Any], int]] = {
        "temperature_-1": ({"temperature": -1}, 400), "temperature_hot": (
        {"temperature": "hot"}, 400), "top_p_5": ({"top_p": 5}, 400), "n_2": ({"n": 2}, 400),
        "max_tokens_string": ({"max_tokens": "5"}, 200)}
    got = {}
    with procs.ours(mock.url, None) as proxy:
        async with httpx.AsyncClient(timeout=30) as c:
            for name, (extra, _) in cases.items():
                got[name] = (await c.post(proxy.url + CHAT, json={**ASK, **extra})).status_code
    return {"attack": "validation", "statuses": got,
            "held": all(got[k] == want for k, (_, want) in cases.items())}


ATTACKS: dict[str, Callable[..., Awaitable[Result]]] = {
    "slowloris": slowloris, "stuck_streams": stuck_streams, "empty_messages": empty_messages,
    "big_batch": big_batch, "deep_json": deep_json, "workers": workers,
    "validation": validation}


async def run(args: argparse.Namespace) -> list[Result]:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    results = []
    with procs.mock(5, 1, None) as mock:
        for name in args.only or ATTACKS:
            fn = ATTACKS[name]
            res = await (fn(mock, args.slow_conns) if name == "slowloris" else fn(mock))
            print(("HELD  " if res["held"] else "BROKEN") + f" {name}: "
                  + json.dumps({k: v for k, v in res.items() if k not in ("attack", "held")}),
                  flush=True)
            results.append(res)
    return results


async def probe(url: str) -> None:
    """A normal client until a line arrives on stdin; prints its latencies as JSON."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_reader(0, stop.set)
    lat, failed = await timed_gets(url, stop, 0.05, CHAT, ASK)
    print(json.dumps({"latencies": lat, "failed": failed}))


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.attack")
    p.add_argument("--probe", metavar="URL", help=argparse.SUPPRESS)
    p.add_argument("--slow-conns", type=int, default=20_000)
    p.add_argument("--only", nargs="*", choices=list(ATTACKS))
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    if args.probe:
        asyncio.run(probe(args.probe))
        return
    results = asyncio.run(run(args))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"when": time.strftime("%Y-%m-%d %H:%M:%S"),
                                         "results": results}, indent=1))
    print(f"{sum(r['held'] for r in results)}/{len(results)} held")


if __name__ == "__main__":
    main()
