"""How fast ``codex-sidecar view`` is on a long session (a benchmark, not a test).

Writes a synthetic session of ``--turns`` turns over ``--threads`` Codex
threads in the sidecar's own file formats (``tools/view_session.py``), then
measures, each ``--rounds`` times (median reported):

* generation: reading the state dir and rendering the page (``gather`` +
  ``render``, what ``codex-sidecar view`` does besides writing the file),
  in this process;
* opening: headless Chromium (Debian's, ``make browser``) navigating to the
  file until its load event, and until the first screenshot is taken (the
  page laid out and painted); a fresh page each round, the browser warm.

    python -m tools.bench_view --turns 1000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from sidecar.view import gather, render, write_page
from tools.browser import Browser
from tools.view_session import SESSION, write_session


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--screenshot", help="keep a screenshot of the page here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="codex-sidecar-bench-view-") as tmp:
        state = Path(tmp) / "state"
        write_session(state, turns=args.turns, threads=args.threads)
        size = sum(p.stat().st_size for p in state.rglob("*") if p.is_file())
        gen, gathered, rendered = [], [], []
        page = ""
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            report = gather(state, SESSION)
            t1 = time.perf_counter()
            page = render(report)
            t2 = time.perf_counter()
            gen.append(t2 - t0)
            gathered.append(t1 - t0)
            rendered.append(t2 - t1)
        out = Path(tmp) / "view.html"
        write_page(out, page)
        loads, painted = [], []
        with Browser() as b:
            b.open("about:blank")
            for _ in range(args.rounds):
                b.open("about:blank")
                t0 = time.monotonic()
                b.open(out.as_uri())
                t1 = time.monotonic()
                b.screenshot(Path(tmp) / "shot.png")
                t2 = time.monotonic()
                loads.append(t1 - t0)
                painted.append(t2 - t0)
            turns = b.evaluate("document.querySelectorAll('details.turn').length")
            if args.screenshot:
                b.screenshot(args.screenshot)
        med = statistics.median
        print(f"session: {args.turns} turns over {args.threads} Codex threads, state dir {size / 2**20:.2f} MiB; page {len(page.encode()) / 2**20:.2f} MiB, {turns} turns in the DOM")
        print(f"generation (gather + render), median of {args.rounds}: {med(gen):.3f} s  (gather {med(gathered):.3f} s, render {med(rendered):.3f} s; max {max(gen):.3f} s)")
        print(f"Chromium open, median of {args.rounds}: load event {med(loads):.3f} s, painted (first screenshot) {med(painted):.3f} s; max {max(painted):.3f} s")


if __name__ == "__main__":
    main()
