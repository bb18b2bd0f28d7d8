"""Profile our proxy under load with py-spy: start the mock + `python -m proxy serve` under
`py-spy record`, drive it (non-streaming saturation, then streaming c16), print the top frames.

    python -m bench.profile [--seconds 8] [--mode json|stream|both] [--env K=V ...]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import subprocess
import time
from pathlib import Path

from bench import lean, procs
from bench.overhead import PHASES, bodies
from deploy.net import free_port


def summarize(raw: Path, top: int = 30) -> None:
    self_t: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        k = int(n)
        total += k
        self_t[frames[-1]] += k
        for f in set(frames):
            incl[f] += k
    print(f"samples: {total}\n-- self --")
    for f, k in self_t.most_common(top):
        print(f"{k / total:6.1%} {f}")
    print("-- inclusive (proxy/, starlette, httpx, httpcore, uvicorn) --")
    keys = ("proxy/", "starlette", "httpx", "httpcore", "uvicorn", "anyio", "prometheus",
            "logging", "transformers", "tokenizers", "orjson")
    for f, k in incl.most_common(400):
        if any(s in f for s in keys) and k / total > 0.01:
            print(f"{k / total:6.1%} {f}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--mode", default="json")
    p.add_argument("--env", nargs="*", default=[])
    a = p.parse_args()
    os.sched_setaffinity(0, {1})
    phase = PHASES["json" if a.mode == "json" else "stream"]
    out = procs.WORK / f"profile-{a.mode}.raw"
    env = dict(kv.split("=", 1) for kv in a.env)
    with procs.mock(phase["ttft_ms"], phase["itl_ms"], "1") as m:
        port = free_port()
        base = {"PROXY_UPSTREAM": m.url, "PROXY_PORT": str(port), "PROXY_CACHE": "off",
                "PROXY_TOKENIZER": str(procs.tiny_model()),
                "PROXY_MAX_INFLIGHT": "1024", "HF_HUB_OFFLINE": "1", **env}
        spy = str(Path(procs.PY).parent / "py-spy")
        proc = procs.Proc("profiled", [procs.PY, "-m", "proxy", "serve"],
                          f"http://127.0.0.1:{port}", "0", base, timeout=180)
        url = proc.url + "/v1/chat/completions"
        conc = 64 if a.mode == "json" else 16
        b = bodies(256, phase["stream"], phase["max_tokens"])
        asyncio.run(lean.run(url, b, conc, n=500))  # warm up before sampling
        rec = subprocess.Popen([spy, "record", "-r", "200", "-f", "raw", "-o", str(out),
                                "--pid", str(proc.proc.pid), "-d", str(int(a.seconds))],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        r = asyncio.run(lean.run(url, b, conc, duration=a.seconds))
        print(r.summary())
        rec.wait(60)
        proc.stop()
    summarize(out)


if __name__ == "__main__":
    main()
