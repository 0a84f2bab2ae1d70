"""The sidecar process: CLI, relay, control methods, recording, lifecycle.

All I/O and concurrency of the project live here (trio, one nursery owning
every task); the wire format itself lives in ``protocol``.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing itself costs ~3 ms before codex is spawned (sidecar.launch)
if TYPE_CHECKING:
    from typing import Any


def __getattr__(name: str) -> Any:
    """``__version__``, read from the installed metadata on first use:
    importing ``importlib.metadata`` costs ~30-80 ms that every start-up
    would pay before codex is even spawned."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import metadata

    try:
        version = metadata.version("openclaw-codex-sidecar")
    except metadata.PackageNotFoundError:  # running from a source tree
        version = "0.0.0+source"
    globals()["__version__"] = version
    return version
