"""How a failed background task is named in the log, pure.

The shell's :func:`~sidecar.relay.shell.supervised` logs a task that raised
once, with the fields built here: the task, the exception's type and where
it was raised (``file:line`` of the raising frame), never the exception's
text, which may quote a prompt.
"""

from __future__ import annotations

import os
from typing import Any


def task_name(fn: Any, args: tuple[Any, ...] = ()) -> str:
    """``fn``'s name; a runner's with what it runs (``run_sync(ArchiveLog.mark_restored)``)."""
    name = _qualname(fn)
    if args and callable(args[0]):
        name += f"({_qualname(args[0])})"
    return name


def _qualname(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__qualname__


def failure_fields(task: str, exc: BaseException) -> dict[str, Any]:
    """Task name, exception type and raising location; no message text."""
    leaf = exc
    while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
        leaf = leaf.exceptions[0]  # the first of a group says where it went wrong
    etype = type(leaf)
    fields: dict[str, Any] = {
        "task": task,
        "exception": f"{etype.__module__}.{etype.__qualname__}",
        "at": raised_at(leaf),
    }
    if leaf is not exc:
        fields["group"] = type(exc).__qualname__
    return fields


def raised_at(exc: BaseException) -> str | None:
    """``file:line`` of the frame that raised ``exc`` (its traceback's last)."""
    tb = exc.__traceback__
    if tb is None:
        return None
    while tb.tb_next is not None:
        tb = tb.tb_next
    return f"{os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"
