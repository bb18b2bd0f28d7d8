"""What the answer cache costs a proxy that relays streams: per chunk, and in the garbage
collector once answers are stored.

Per chunk: relaying one vLLM-shaped 384-chunk answer with the cache off, with the cache on
(payloads kept raw and parsed in one call at the end: now), and parsed one by one as they pass
(before); best of --rounds, as ratios against the cache off.
In the GC: --answers stored answers as the cache keeps them now (the chunks as one JSON array
in bytes) and as it kept them before (a tuple of parsed dicts): how many objects Python's
cyclic GC tracks, and how long a full collection takes, which stalls every stream in flight.
Measured on a GPU host, the former showed as a TTFT p99 of 1.1-2.0 s with the cache on at
30 req/s against 0.21 s with it off (docs/gpu-benchmarks.md).

    python -m bench.relay_cost
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from proxy.relay import StreamOutcome, _process
from proxy.sse import Accumulator


def chunks(n: int) -> list[bytes]:
    head = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
             "finish_reason": None}
    out: list[dict[str, Any]] = [{**head, "choices": [first], "prompt_token_ids": None}]
    out += [{**head, "choices": [{"index": 0, "delta": {"content": f" word{i}"},
                                  "logprobs": None, "finish_reason": None,
                                  "token_ids": None}]} for i in range(n - 1)]
    out[-1]["choices"][0]["finish_reason"] = "length"
    out.append({**head, "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": n,
                                                  "total_tokens": n + 9}})
    return [b"data: " + orjson.dumps(o) + b"\n\n" for o in out]


def off(events: list[bytes]) -> None:
    outcome = StreamOutcome()
    for ev in events:
        if b'"usage"' in ev:
            _process(ev, outcome, None, False, [])


def batched(events: list[bytes]) -> None:
    outcome, acc = StreamOutcome(), Accumulator("chat")
    for ev in events:
        _process(ev, outcome, acc, False, [])
    assert acc.completion() is not None


def _former_process(events: bytes, outcome: StreamOutcome, acc: Accumulator) -> bytes:
    """The relay's _process before the change: every event parsed and folded as it passed."""
    for ev in events.split(b"\n\n"):
        if ev.startswith(b"data: ") and ev[6:7] == b"{":
            obj = orjson.loads(ev[6:])
            if isinstance(obj, dict):
                acc.add(obj)
                if obj.get("usage"):
                    outcome.usage = obj["usage"]
    return events


def per_chunk(events: list[bytes]) -> None:
    outcome, acc = StreamOutcome(), Accumulator("chat")
    for ev in events:
        _former_process(ev, outcome, acc)
    assert acc.completion() is not None


def best(fn: Callable[[list[bytes]], None], events: list[bytes], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn(events)
        times.append(time.perf_counter() - t0)
    return min(times)


def gc_cost(stored: Sequence[object]) -> tuple[int, float]:
    gc.collect()
    t0 = time.perf_counter()
    gc.collect()
    return len(gc.get_objects()), time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.relay_cost", description=__doc__)
    p.add_argument("--chunks", type=int, default=384)
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--answers", type=int, default=1300)
    a = p.parse_args(argv)
    events = chunks(a.chunks)
    base = best(off, events, a.rounds)
    for name, fn in (("cache off", off), ("cache on, batched parse (now)", batched),
                     ("cache on, per-chunk parse (before)", per_chunk)):
        t = best(fn, events, a.rounds)
        print(f"{name:36s} {t / len(events) * 1e6:7.2f} us/chunk  {t / base:6.1f}x cache off")
    acc = Accumulator("chat")
    outcome = StreamOutcome()
    for ev in events:
        _process(ev, outcome, acc, False, [])
    done = acc.completion()
    assert done is not None and done.events is not None
    base_objects, base_s = gc_cost([])
    now = [bytes(done.events) for _ in range(a.answers)]
    objects, now_s = gc_cost(now)
    print(f"{a.answers} answers stored now:    {objects - base_objects:9,d} more GC-tracked "
          f"objects, full collection {now_s * 1000:6.1f} ms (empty: {base_s * 1000:.1f} ms)")
    del now
    before = [tuple(orjson.loads(done.events)) for _ in range(a.answers)]
    objects, before_s = gc_cost(before)
    print(f"{a.answers} answers stored before: {objects - base_objects:9,d} more GC-tracked "
          f"objects, full collection {before_s * 1000:6.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
