"""Logging to stderr: readable text, or one JSON object a line.

stdout is the protocol channel, so nothing here may ever touch it. Log calls
carry metadata in ``extra={"fields": {...}}`` (ids, counts, sizes), never
prompt or transcript text; for the same reason an exception is rendered as its
type and the code locations it passed through, without its message, which
could quote a prompt (an engine raising ``ValueError(prompt)``, say).
"""

from __future__ import annotations

import logging
import sys
import time
import traceback
from typing import Any

_encoders: list = []  # msgspec's JSON encoder, made by the first JSON record: msgspec is not imported before codex is spawned


def _exception_summary(exc_info: Any) -> dict[str, Any] | None:
    if not exc_info or exc_info[0] is None:
        return None
    etype, _value, tb = exc_info
    frames = [f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno}:{f.name}" for f in traceback.extract_tb(tb)]
    return {"type": f"{etype.__module__}.{etype.__qualname__}", "at": frames[-6:]}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        obj: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            for k, v in fields.items():
                obj.setdefault(k, v)
        exc = _exception_summary(record.exc_info)
        if exc:
            obj["exception"] = exc
        if not _encoders:
            import msgspec

            _encoders.append(msgspec.json.Encoder())
        return _encoders[0].encode(obj).decode("utf-8", "replace")


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        t = time.strftime("%H:%M:%S", time.localtime(record.created))
        parts = [f"{t} codex-sidecar {record.levelname.lower()} {record.name}: {record.getMessage()}"]
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            parts.extend(f"{k}={v}" for k, v in fields.items())
        exc = _exception_summary(record.exc_info)
        if exc:
            parts.append(f"exception={exc['type']} at={' <- '.join(reversed(exc['at']))}")
        return " ".join(parts)


def setup_logging(fmt: str = "text", level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    # The sidecar's loggers and the engine loader's (``engines.*``, a package
    # engines from outside import too): one handler, one format.
    for name in ("codex_sidecar", "engines"):
        root = logging.getLogger(name)
        root.handlers[:] = [handler]
        root.setLevel(getattr(logging, level.upper(), logging.INFO))
        root.propagate = False
