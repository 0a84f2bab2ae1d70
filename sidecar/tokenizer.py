"""The o200k tokenizer, built before the engine's modules are imported.

Building bpe-openai's o200k tokenizer needs ~68 MB on top of what the
process holds at that moment: ~33 MB of its own tables and ~35 MB of the
vocabulary its compiled module embeds, read in: file pages that stay mapped,
counted in the process's RSS, though the tokenizer has its own tables by
then (:func:`release_clean_pages` drops them: -35 MB for as long as the
sidecar runs). The peak RSS is what the process holds when the build starts
plus ~68 MB, so the sidecar builds it where it holds least: first thing
once the client's ``initialize`` is on its way to codex, before the
lifecycle and the engine are imported (``engines`` alone is ~1.5 MB), with
the C heap trimmed.

:func:`build` loads the compiled module exactly as :mod:`engines.tokens`
does (same file, same module name in ``sys.modules``) without importing the
``engines`` package; bpe-openai keeps each built tokenizer, so
``engines.tokens`` then finds it ready.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import re
import sys

BACKEND_MODULE = "bpe_openai._bindings"
"""The name :mod:`engines.tokens` loads bpe-openai's compiled module under."""


def _backend() -> object | None:
    loaded = sys.modules.get(BACKEND_MODULE)
    if loaded is not None:
        return loaded
    package = importlib.util.find_spec("bpe_openai")  # a top-level spec: the package's __init__ does not run
    if package is None or not package.submodule_search_locations:
        return None
    for folder in package.submodule_search_locations:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(folder, "_bindings" + suffix)
            if os.path.isfile(path):
                spec = importlib.util.spec_from_file_location(BACKEND_MODULE, path)
                if spec is None or spec.loader is None:
                    return None
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                sys.modules[BACKEND_MODULE] = module
                return module
    return None


_MADV_DONTNEED = 4
_HEADER = re.compile(r"^[0-9a-f]+-[0-9a-f]+ ", re.M)
_WRITTEN = re.compile(r"^(?:Private_Dirty|Anonymous): +([0-9]+)", re.M)


def clean_read_only_regions(smaps: str, path: str) -> list[tuple[int, int]]:
    """The (start, end) of each mapping of ``path`` in ``smaps`` (the text of
    ``/proc/<pid>/smaps``) that is read-only with no private dirty or
    anonymous page: what can be dropped and read back from the file as it is.
    Reads only the blocks of ``path`` (the file has ~6,000 lines)."""
    regions = []
    for m in re.finditer(r"^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+ +" + re.escape(path) + "$", smaps, re.M):
        if "w" in m.group(3):
            continue
        following = _HEADER.search(smaps, m.end())
        block = smaps[m.end() : following.start() if following else len(smaps)]
        if any(int(kib) for kib in _WRITTEN.findall(block)):
            continue  # written to (relocations: RELRO): it would come back unrelocated
        regions.append((int(m.group(1), 16), int(m.group(2), 16)))
    return regions


def release_clean_pages(path: str) -> int:
    """Drop this process's clean, read-only pages of the file at ``path``
    (bytes released; 0 when nothing could be). A page dropped is read again
    from the page cache if touched."""
    try:
        import ctypes

        with open("/proc/self/smaps") as f:
            regions = clean_read_only_regions(f.read(), path)
        if not regions:
            return 0
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        return sum(hi - lo for lo, hi in regions if libc.madvise(lo, hi - lo, _MADV_DONTNEED) == 0)
    except Exception:  # no /proc, no libc: the pages stay, nothing else changes
        return 0


def trim_heap() -> None:
    """Give the C heap's free pages back (glibc; elsewhere a no-op). The
    start-up garbage is not collected first: the collector is off during
    start-up and a collection then finds ~2,000 objects in ~10 ms."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def build() -> bool:
    """Build the o200k tokenizer, the heap trimmed first and the compiled
    module's clean pages released after; whether it was built. Never raises:
    :mod:`engines.tokens` loads (or fails) as usual."""
    try:
        trim_heap()
        backend = _backend()
        if backend is None:
            return False
        backend.tokenizer_for_encoding("o200k_base")  # type: ignore[attr-defined]
        path = getattr(backend, "__file__", None)
        if path:
            release_clean_pages(os.path.realpath(path))
        return True
    except Exception:
        return False
