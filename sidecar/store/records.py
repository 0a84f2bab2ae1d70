"""Records read back from the state dir, decoded once at the edge.

Every file kind under the state dir (the learned-facts journal, bindings,
relay records, inspect records) has its record as a msgspec ``Struct`` and
is read with a typed decoder here: a line that does not decode (a torn line
a kill left, a record of an unknown shape, a hand edit) is reported, with
its file and line number and what is wrong with it (msgspec's words: the
member and the types, never a value), and skipped; the rest of the file is
read. Never a traceback, never a record's text in the log.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import msgspec

log = logging.getLogger("codex_sidecar.store")

T = TypeVar("T")


def decode_lines(data: bytes, decoder: msgspec.json.Decoder[T], path: str | os.PathLike[str]) -> list[T]:
    """The records of the JSON lines ``data`` (read from ``path``), in order;
    one that does not decode is reported and skipped."""
    return list(iter_lines(data, decoder, path))


def iter_lines(data: bytes, decoder: msgspec.json.Decoder[T], path: str | os.PathLike[str]) -> Iterator[T]:
    for number, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            yield decoder.decode(raw)
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            skipped(path, number, exc)


def decode_file(data: bytes, decoder: msgspec.json.Decoder[T], path: str | os.PathLike[str]) -> T | None:
    """The one record of a single-record file (a binding); None, reported,
    when it does not decode."""
    try:
        return decoder.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        skipped(path, 1, exc)
        return None


def skipped(path: str | os.PathLike[str], line: int, exc: Exception) -> None:
    log.warning("record skipped: it does not decode", extra={"fields": {"file": str(Path(path)), "line": line, "error": why(exc)}})


def why(exc: Exception) -> str:
    """What is wrong, without the record's text: msgspec's validation
    message names the member and the types; a line that is not JSON at all
    (a torn line) is said to be so."""
    if isinstance(exc, msgspec.ValidationError):
        return str(exc)[:200]
    return "not a JSON value (a torn or foreign line)"
