"""`python -m deploy local`: supervision with stand-in servers (fast), and once for real (slow)."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from deploy.net import port_free
from tests.support.procs import REPO, free_port
from tests.support.waiting import wait_for

FAKE = """
import http.server, os, sys, time
port, delay, code, pidfile = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
open(pidfile, "w").write(str(os.getpid()))
print("fake starting", flush=True)
time.sleep(delay)
if code:
    print("boom: fake failure", flush=True)
    sys.exit(code)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def fake(port, pidfile, delay=0.5, code=0):
    return [sys.executable, "-c", FAKE, str(port), str(delay), str(code), str(pidfile)]


def start_local(tmp_path, vllm_code=0):
    port, vport = free_port(), free_port()
    code = (f"from deploy.local import run_local; raise SystemExit(run_local("
            f"port={port}, vllm_port={vport}, timeout=30, "
            f"vllm_cmd={fake(vport, tmp_path / 'v.pid', 1.5, vllm_code)!r}, "
            f"proxy_cmd={fake(port, tmp_path / 'p.pid')!r}))")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    return proc, port


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purposes
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def test_local_waits_prints_the_url_and_stops_both_on_sigterm(tmp_path):
    proc, port = start_local(tmp_path)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "Ctrl-C stops both" in line:
            break
    out = "".join(lines)
    assert f"proxy ready at http://127.0.0.1:{port}" in out and "curl -s" in out
    assert "vLLM-CPU is up after" in out
    assert httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200
    pids = [int((tmp_path / f).read_text()) for f in ("v.pid", "p.pid")]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert "stopping" in proc.stdout.read()
    wait_for(lambda: not any(alive(p) for p in pids), "vLLM and the proxy stopped", 10,
             every=0.1)
    assert port_free(port)


def test_local_shows_the_log_tail_when_vllm_dies(tmp_path):
    proc, _port = start_local(tmp_path, vllm_code=3)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "vLLM-CPU exited with code 3" in out and "boom: fake failure" in out
    assert not (tmp_path / "p.pid").exists()  # the proxy never started


@pytest.mark.slow
@pytest.mark.vllm
def test_make_run_serves_through_the_proxy_for_real():
    """The newcomer's `make run`: starts its own vLLM-CPU (~70 s) and the proxy."""
    port, vport = free_port(), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "deploy", "local", "--port", str(port),
                             "--vllm-port", str(vport)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "Ctrl-C stops both" in line or proc.poll() is not None:
                break
        assert "Ctrl-C stops both" in "".join(lines), "".join(lines[-40:])
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}],
                "max_tokens": 4}
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=120)
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 4
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert port_free(port) and port_free(vport)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
