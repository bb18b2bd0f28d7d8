"""Start/stop the servers a benchmark needs, pinned to cores with taskset."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from deploy.net import free_port, wait_http

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / ".bench"
PY = sys.executable


def pin(cores: str | None) -> list[str]:
    if cores is None or shutil.which("taskset") is None or (os.cpu_count() or 1) < 2:
        return []
    return ["taskset", "-c", cores]


def spawn(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """A server in its own process group (so stop_group takes its children too), logging to log."""
    return subprocess.Popen(cmd, cwd=REPO, stdout=open(log, "ab"),
                            stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, **(env or {})})


def stop_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the process group, SIGKILL it after grace seconds."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class Proc:
    def __init__(self, name: str, cmd: list[str], url: str, cores: str | None = None,
                 env: dict[str, str] | None = None, ready_path: str = "/v1/models",
                 timeout: float = 120.0) -> None:
        self.name, self.url = name, url
        WORK.mkdir(exist_ok=True)
        self.log_path = WORK / f"{name}.log"
        self.log_path.unlink(missing_ok=True)
        self.proc = spawn(pin(cores) + cmd, self.log_path, env)
        try:
            wait_http(url + ready_path, timeout, self.proc, interval=0.2)
        except RuntimeError:
            raise RuntimeError(f"{name} exited ({self.proc.returncode}); see "
                               f"{self.log_path}:\n{self.log_path.read_text()[-2000:]}") from None
        except TimeoutError:
            self.stop()
            raise TimeoutError(f"{name} did not answer at {url} in {timeout}s") from None

    def stop(self) -> None:
        stop_group(self.proc, 10)

    def __enter__(self) -> Proc:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def mock(ttft_ms: float, itl_ms: float, cores: str | None, name: str = "mock",
         extra: list[str] | None = None) -> Proc:
    port = free_port()
    return Proc(name, [PY, "-m", "loadtest", "mock", "--port", str(port), "--ttft-ms",
                       str(ttft_ms), "--itl-ms", str(itl_ms), *(extra or [])],
                f"http://127.0.0.1:{port}", cores)


def bare(upstream: str, cores: str | None) -> Proc:
    port = free_port()
    return Proc("bare", [PY, "-m", "bench.bare_proxy", "--upstream", upstream, "--port",
                         str(port)], f"http://127.0.0.1:{port}", cores)


def tiny_model(path: Path | None = None) -> Path:
    """The tiny model the CPU benches serve and tokenize with, made on first use: on a fresh
    clone a bench started before any test had made it, and the proxy failed to start."""
    model = path or REPO / ".models" / "tiny"
    if not (model / "config.json").exists():
        subprocess.run([PY, "-m", "deploy", "tiny-model", str(model)], check=True, cwd=REPO,
                       stdout=subprocess.DEVNULL)
    return model


def ours(upstream: str, cores: str | None, env: dict[str, str] | None = None,
         workers: int = 1, name: str = "ours", ready_path: str = "/v1/models") -> Proc:
    port = free_port()
    base = {"PROXY_UPSTREAM": upstream, "PROXY_PORT": str(port), "PROXY_CACHE": "off",
            "PROXY_TOKENIZER": str(tiny_model()), "PROXY_LOG_LEVEL": "info",
            "PROXY_MAX_INFLIGHT": "1024", "PROXY_MAX_WAITING": "1024",
            "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    base.update(env or {})
    if workers > 1:
        base["PROXY_WORKERS"] = str(workers)
    return Proc(name, [PY, "-m", "proxy", "serve"], f"http://127.0.0.1:{port}", cores, base,
                ready_path=ready_path, timeout=180)


def litellm_python() -> Path:
    """LiteLLM's proxy in its own venv under .bench/ (made once, then reused)."""
    venv = WORK / "litellm-venv"
    py = venv / "bin" / "python"
    if not (venv / "bin" / "litellm").exists():
        WORK.mkdir(exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "litellm[proxy]==1.106.2"],
                       check=True)
    return py


def litellm(upstream: str, cores: str | None, model: str = "mock") -> Proc:
    py = litellm_python()
    port = free_port()
    cfg = WORK / f"litellm-{port}.yaml"
    cfg.write_text(f"""model_list:
  - model_name: {model}
    litellm_params:
      model: openai/{model}
      api_base: {upstream}/v1
      api_key: x
litellm_settings:
  drop_params: true
  set_verbose: false
  json_logs: false
general_settings:
  disable_spend_logs: true
""")
    env = {"LITELLM_LOG": "ERROR", "LITELLM_MODE": "PRODUCTION", "DISABLE_ADMIN_UI": "true",
           "NO_DOCS": "true", "LITELLM_TELEMETRY": "False",
           # no master key, as ours runs open (no auth work on either side)
           "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true"}
    return Proc("litellm", [str(py.parent / "litellm"), "--config", str(cfg), "--port",
                            str(port), "--host", "127.0.0.1", "--num_workers", "1"],
                f"http://127.0.0.1:{port}", cores, env, ready_path="/health/liveliness",
                timeout=240)
