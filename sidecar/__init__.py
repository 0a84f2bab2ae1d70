"""The sidecar process: CLI, relay, control methods, recording, lifecycle.

All I/O and concurrency of the project live here (trio, one nursery owning
every task); the wire format itself lives in ``protocol``.
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("openclaw-codex-sidecar")
except _metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0+source"
