"""Structured logs: one JSON object per line; never prompt text unless PROXY_LOG_PROMPTS=on."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

import orjson

ACCESS = logging.getLogger("proxy.access")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"ts": round(record.created, 3), "level": record.levelname.lower(),
                               "logger": record.name}
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update(fields)
        else:
            out["msg"] = record.getMessage()
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        try:
            return orjson.dumps(out, default=str).decode()
        except TypeError:  # an integer past 64 bits (a logged prompt of token ids, a tool)
            return json.dumps(out, default=str, ensure_ascii=False)


def setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    logging.getLogger("httpx").setLevel(logging.WARNING)


def access(fields: dict[str, Any]) -> None:
    if ACCESS.isEnabledFor(logging.INFO):
        fields["ts_end"] = round(time.time(), 3)
        ACCESS.info("request", extra={"fields": fields})
