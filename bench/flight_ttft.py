"""What streaming single flight buys a follower: its time to first token, against waiting for
the leader's stored answer as a non-streaming follower still does.

The mock upstream streams TTFT --ttft-ms then a token every --itl-ms; the proxy runs with the
exact cache. Each round asks a new question as a streaming leader, then, --delay-ms later, the
same question twice more: one streaming follower (it follows the leader's stream live) and
one non-streaming follower (it waits for the stored answer). Medians over --rounds, measured in
one run, and their ratio.

    python -m bench.flight_ttft --rounds 20 --json docs/results/flight-ttft.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from bench.procs import mock, ours


def ask(text: str, stream: bool, tokens: int) -> dict[str, Any]:
    return {"model": "mock", "messages": [{"role": "user", "content": text}],
            "max_tokens": tokens, "stream": stream}


async def first_token(client: httpx.AsyncClient, body: dict[str, Any]) -> tuple[float, str]:
    t0 = time.perf_counter()
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        tier = r.headers.get("x-cache-tier", r.headers.get("x-cache", ""))
        async for line in r.aiter_lines():
            if '"content"' in line and '"content":""' not in line.replace(" ", ""):
                return time.perf_counter() - t0, tier
    return float("nan"), tier


async def whole(client: httpx.AsyncClient, body: dict[str, Any]) -> float:
    t0 = time.perf_counter()
    (await client.post("/v1/chat/completions", json=body)).raise_for_status()
    return time.perf_counter() - t0


async def rounds(url: str, a: argparse.Namespace) -> dict[str, Any]:
    streamed, waited, leaders, tiers = [], [], [], []
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        for i in range(a.rounds):
            text = f"flight round {i} {time.time_ns()}"
            t0 = time.perf_counter()
            lead = asyncio.create_task(whole(client, ask(text, True, a.tokens)))
            await asyncio.sleep(a.delay_ms / 1000)  # the followers arrive while it streams
            follow = asyncio.create_task(first_token(client, ask(text, True, a.tokens)))
            wait = asyncio.create_task(whole(client, ask(text, False, a.tokens)))
            (ttft, tier), waited_s, _ = await asyncio.gather(follow, wait, lead)
            leaders.append(time.perf_counter() - t0)
            streamed.append(ttft)
            waited.append(waited_s)
            tiers.append(tier)
    return {"follower_stream_ttft_ms": statistics.median(streamed) * 1000,
            "follower_json_latency_ms": statistics.median(waited) * 1000,
            "leader_total_ms": statistics.median(leaders) * 1000,
            "streaming_tiers": sorted(set(tiers))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.flight_ttft", description=__doc__)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--ttft-ms", type=float, default=50.0)
    p.add_argument("--itl-ms", type=float, default=10.0)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--delay-ms", type=float, default=100.0)
    p.add_argument("--json", type=Path, default=None, help="write the medians and arguments")
    a = p.parse_args(argv)
    with mock(a.ttft_ms, a.itl_ms, None, name="flight-mock") as m, \
            ours(m.url, None, {"PROXY_CACHE": "exact", "PROXY_LOG_LEVEL": "warning"},
                 name="flight-proxy") as px:
        res = asyncio.run(rounds(px.url, a))
    print(f"streaming follower TTFT      {res['follower_stream_ttft_ms']:8.1f} ms (median, "
          f"tier {', '.join(res['streaming_tiers'])})")
    print(f"non-streaming follower waits {res['follower_json_latency_ms']:8.1f} ms "
          f"(the leader's whole answer, then the stored copy)")
    print(f"ratio {res['follower_json_latency_ms'] / res['follower_stream_ttft_ms']:.1f}x "
          f"(leader's round {res['leader_total_ms']:.0f} ms)")
    if a.json:
        args = {k: v for k, v in vars(a).items() if k != "json"}
        a.json.write_text(json.dumps({"args": args, **res}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
