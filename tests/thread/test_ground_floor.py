"""``sidecar/thread/`` is a ground floor: importing it loads neither trio nor
the store, nor the relay (a fresh interpreter, so nothing else loaded them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_thread_package_imports_neither_trio_nor_the_store_nor_the_relay() -> None:
    probe = (
        "import sys\n"
        "import sidecar.thread.state, sidecar.thread.holdings, sidecar.thread.opening, sidecar.thread.learned\n"
        "print(sorted(m for m in sys.modules if m == 'trio' or m.startswith(('trio.', 'sidecar.store', 'sidecar.relay', 'sidecar.lifecycle'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True, env={"PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "[]"
