"""What a request pays for per-key limits: admit + spend (the two calls on its path; release
runs in the background), local limiter vs the Redis-shared one, p50/p99 over --n requests.

    python -m bench.limits_cost --redis redis://127.0.0.1:6379/0
"""

from __future__ import annotations

import argparse
import asyncio
import time

from proxy.limits import KeyLimit, KeyLimits
from proxy.shared_limits import SharedKeyLimits


async def measure(limits: KeyLimits | SharedKeyLimits, n: int) -> list[float]:
    took = []
    for _ in range(n):
        t = time.perf_counter()
        lease = await limits.admit("bench")
        assert lease is not None
        await limits.spend("bench", lease, 100)
        took.append(time.perf_counter() - t)
        limits.release("bench", lease, 100)
    return sorted(took)


async def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.limits_cost")
    ap.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--n", type=int, default=2000)
    a = ap.parse_args()
    table = {"*": KeyLimit(rpm=1e9, tpm=1e12, concurrent=10**6)}  # never binding
    shared = SharedKeyLimits(KeyLimits(table, 1), table, a.redis, prefix="bench-limits")
    for name, limits in (("local", KeyLimits(table, 1)), ("shared (Redis)", shared)):
        took = await measure(limits, a.n)
        print(f"{name:15s} p50 {took[len(took) // 2] * 1e3:.3f} ms  "
              f"p99 {took[int(len(took) * 0.99)] * 1e3:.3f} ms  (n={a.n})")
    await shared.aclose()


if __name__ == "__main__":
    asyncio.run(main())
