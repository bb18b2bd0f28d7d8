"""python -m proxy serve [--flags]: settings from PROXY_* env vars, flags override them."""

from __future__ import annotations

import sys
from typing import Any

USAGE = "usage: python -m proxy serve [--help] [--upstream URL[,URL...]] [--port N] ..."


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "serve":
        print(USAGE, file=sys.stderr)
        return 2
    from proxy.settings import SettingsError
    from proxy.settings_env import cli_env, parse_cli, unknown_env

    try:
        settings = parse_cli(argv[1:])
    except SettingsError as exc:
        print(f"error: invalid setting: {exc}", file=sys.stderr)
        return 2
    import os

    for name, close in unknown_env(os.environ):
        print(f"warning: {name} is not a setting the proxy reads"
              + (f"; did you mean {close}?" if close else ""), file=sys.stderr)

    import uvicorn

    from proxy.app import create_app
    from proxy.guard import UVICORN_OPTIONS, raise_file_limit
    from proxy.logs import setup_logging

    setup_logging(settings.log_level)
    raise_file_limit()  # the connection cap keeps a headroom under it (proxy/guard.py)
    common: dict[str, Any] = dict(host=settings.host, port=settings.port, loop="uvloop",
                                  http="proxy.guard:GuardedProtocol"
                                  if settings.connection_guard else "httptools", log_config=None,
                                  access_log=False, lifespan="on",
                                  timeout_graceful_shutdown=settings.shutdown_timeout,
                                  timeout_keep_alive=settings.keepalive_timeout,
                                  **UVICORN_OPTIONS)
    if settings.workers == 1:
        uvicorn.run(create_app(settings, freeze_gc=True), **common)
        return 0
    if settings.cache != "off" and not settings.redis_url:
        print(f"note: {settings.workers} workers each keep their own cache; set PROXY_REDIS_URL "
              "to share one", file=sys.stderr)
    # Several processes share the port; each builds its app from the same PROXY_* settings,
    # and all write their metrics to one fresh directory that any of them can sum on a scrape.
    import shutil
    import tempfile

    from proxy.metrics import MULTIPROC_ENV

    os.environ.update(cli_env(argv[1:]))
    metrics_dir = tempfile.mkdtemp(prefix="proxy-metrics-")
    os.environ[MULTIPROC_ENV] = metrics_dir
    try:
        uvicorn.run("proxy.app:app_from_env", factory=True, workers=settings.workers, **common)
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
