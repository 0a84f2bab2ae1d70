"""Private folders: everything under the state dir holds prompt text.

``mkdir(parents=True)`` gives every parent it creates the umask's mode
(usually 0755) and only the last folder the mode asked for, so a state dir
first created as the parent of, say, the ledger's folder would be world
readable. :func:`private_dir` creates each missing folder 0700.
"""

from __future__ import annotations

import os
from pathlib import Path

DIR_MODE = 0o700


def private_dir(path: Path) -> None:
    """Create ``path`` and its missing parents with mode 0700; existing
    folders are left as they are."""
    if path.is_dir():
        return
    missing: list[Path] = []
    current = path
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(directory, DIR_MODE)  # the umask may have removed bits; never adds any
