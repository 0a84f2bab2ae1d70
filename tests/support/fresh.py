"""``rebuild = "fresh"`` over the fake app-server: options, script, spares.

With :data:`SCRIPT` the fake (``children/fake_codex.py``) hands out
Codex-shaped thread ids (``uuidThreadIds``), the first being
:data:`FIRST_THREAD`; :func:`fresh` are lifecycle options that rebuild onto a
spare thread from the first dropped message on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sidecar.lifecycle import LifecycleOptions

from .harness import wait_until

SCRIPT = {"uuidThreadIds": True}
FIRST_THREAD = "01a20000-0000-7000-8000-000000000001"  # the fake's first uuidThreadIds id


def fresh(**more: Any) -> LifecycleOptions:
    """delta, no stale slack, rebuilds by switching onto a spare; ``more`` overrides."""
    return LifecycleOptions(**{"engine_deadline": 5.0, "projection_mode": "delta", "stale_floor_chars": 0, "rebuild": "fresh", **more})


async def spare_ready(run, tid: str) -> str:
    """Wait until the lifecycle has a spare backing thread ready for ``tid``; return its id."""
    return await wait_until(lambda: run.lifecycle.backing.aliases[tid].spare, what="a spare backing thread")


def codex_forgets_zero_turn_threads(tmp_path: Path, store: str = "codex-store.json") -> list[str]:
    """What a Codex restart does to threads that never had an accepted turn
    (0.169.0: no rollout file): they are gone for thread/resume. Codex 0.169.0
    answers their ``thread/resume`` in a fresh process with ``-32600 no
    rollout found for thread id ...``; a warm ``thread/resume`` does not
    materialise one, ``thread/name/set`` and an accepted ``turn/start`` do.
    Applied to the fake's store between two sidecar processes."""
    path = tmp_path / store
    threads = json.loads(path.read_text())
    gone = [tid for tid, t in threads.items() if not t["turns"]]
    path.write_text(json.dumps({tid: t for tid, t in threads.items() if t["turns"]}))
    return gone
