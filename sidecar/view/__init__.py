"""``codex-sidecar view``: one OpenClaw session as a self-contained HTML page.

:mod:`.gather` reads the state dir (and the lossless store) into plain data,
:mod:`.render` and :mod:`.plots` turn that data into the page, and
:func:`write_report` writes it (0600, atomically). Nothing here talks to a
running sidecar: the files are the source, so a report can be made while
the sidecar runs or long after it exited.
"""

from __future__ import annotations

import os
from pathlib import Path

from .gather import Report, gather
from .render import render

__all__ = ["Report", "gather", "render", "write_page", "write_report"]


def write_report(state_dir: str | os.PathLike[str], name: str, out: str | os.PathLike[str], *, redact: bool = False, database_url: str | None = None) -> Report:
    """Gather the session ``name`` and write its page to ``out`` (mode 0600,
    replacing the file whole). Returns what was gathered."""
    report = gather(state_dir, name, redact=redact, database_url=database_url)
    write_page(out, render(report))
    return report


def write_page(out: str | os.PathLike[str], html: str) -> None:
    """Write ``html`` to ``out``: mode 0600, the old file replaced whole."""
    page = html.encode()
    path = Path(out)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        view = memoryview(page)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    os.replace(tmp, path)
