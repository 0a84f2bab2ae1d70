"""Inline SVG for ``codex-sidecar view``: line charts over turns, the thread
timeline and the lossless summary map. Pure: numbers in, markup out, the same
markup for the same numbers (coordinates rounded to 0.1)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

W, H = 600.0, 190.0
WIDE = 1200.0
LEFT, RIGHT, TOP, BOTTOM = 56.0, 12.0, 14.0, 26.0
THREAD_COLOURS = ("#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2", "#dc2626", "#4d7c0f")
MARK_COLOURS = {
    "rotation": "#2563eb",
    "rebuild": "#d97706",
    "switch": "#7c3aed",
    "fallback": "#dc2626",
    "failed": "#dc2626",
    "revert": "#0891b2",
    "compaction": "#059669",
    "recall": "#db2777",
}


LINES = ("rotation", "fallback", "failed")
"""Marks drawn across a chart as dashed lines; rebuilds and switches too up
to :data:`DENSE` turns (beyond, they are ticks only: a line each would hide
the series)."""
DENSE = 120


def mark_kind(mark: str) -> str:
    """The colour family of a turn's mark (``fallback: assemble-error`` is a fallback)."""
    for kind in ("rotation", "rebuild", "switch", "fallback", "revert", "compaction", "recall"):
        if kind in mark:
            return kind
    return "failed"


def _f(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


def _x(i: int, n: int, w: float = W) -> float:
    return LEFT + (w - LEFT - RIGHT) * (i / (n - 1) if n > 1 else 0.5)


def line_chart(
    title: str,
    series: Sequence[tuple[str, str, Sequence[float | None]]],
    *,
    y_max: float | None = None,
    unit: str = "",
    marks: Sequence[list[str]] = (),
    chart_id: str = "",
) -> str:
    """One chart: each series a polyline over the turns (a gap where a value
    is missing), the y axis from 0, the turns' marks as ticks under the axis."""
    n = max((len(v) for _, _, v in series), default=0)
    top = y_max if y_max is not None else max((x for _, _, v in series for x in v if x is not None), default=0.0)
    top = top or 1.0
    plot_h = H - TOP - BOTTOM

    def y(v: float) -> float:
        return TOP + plot_h * (1 - min(v, top) / top)

    out = [
        f'<svg class="chart" id="{escape(chart_id)}" viewBox="0 0 {_f(W)} {_f(H)}" role="img" aria-label="{escape(title)}">',
        f'<text class="ct" x="{_f(LEFT)}" y="10">{escape(title)}</text>',
    ]
    for frac in (0.0, 0.5, 1.0):
        yy = y(top * frac)
        label = _tick(top * frac, unit)
        out.append(f'<line class="grid" x1="{_f(LEFT)}" x2="{_f(W - RIGHT)}" y1="{_f(yy)}" y2="{_f(yy)}"/>')
        out.append(f'<text class="yl" x="{_f(LEFT - 6)}" y="{_f(yy + 4)}">{label}</text>')
    for i, ms in enumerate(marks):
        kinds = sorted({mark_kind(m) for m in ms})
        for k, kind in enumerate(kinds):
            x = _x(i, n)
            if kind in LINES or (n <= DENSE and kind in ("rebuild", "switch")):
                out.append(f'<line class="ev" x1="{_f(x)}" x2="{_f(x)}" y1="{_f(TOP)}" y2="{_f(H - BOTTOM)}" stroke="{MARK_COLOURS[kind]}"/>')
            out.append(f'<rect x="{_f(x - 1.5)}" y="{_f(H - BOTTOM + 3 + 4 * k)}" width="3" height="3" fill="{MARK_COLOURS[kind]}"/>')
    for name, colour, values in series:
        runs: list[list[str]] = [[]]
        for i, v in enumerate(values):
            if v is None:
                if runs[-1]:
                    runs.append([])
                continue
            runs[-1].append(f"{_f(_x(i, n))},{_f(y(v))}")
        for run in runs:
            if len(run) == 1:
                cx, cy = run[0].split(",")
                out.append(f'<circle cx="{cx}" cy="{cy}" r="2.5" fill="{colour}"/>')
            elif run:
                out.append(f'<polyline class="series" fill="none" stroke="{colour}" points="{" ".join(run)}"><title>{escape(name)}</title></polyline>')
    step = max(1, (n + 9) // 10)
    for i in range(0, n, step):
        out.append(f'<text class="xl" x="{_f(_x(i, n))}" y="{_f(H - 2)}">{i + 1}</text>')
    legend = " ".join(f'<tspan fill="{c}">■</tspan> {escape(name)}' for name, c, _ in series)
    out.append(f'<text class="lg" x="{_f(W - RIGHT)}" y="10">{legend}</text>')
    out.append("</svg>")
    return "".join(out)


def _tick(v: float, unit: str) -> str:
    if unit == "%":
        return f"{v:.0f}%"
    if v >= 10_000:
        return f"{v / 1000:.0f}k"
    if v >= 1000:
        return f"{v / 1000:.1f}k"
    return f"{v:.0f}"


def timeline(threads: Sequence[str], turn_threads: Sequence[int], marks: Sequence[list[str]]) -> str:
    """One lane a Codex thread, one cell a turn (a link to it), the turn's
    marks as dots above its cell."""
    n = len(turn_threads)
    lanes = max(1, len(threads))
    lane_h, top = 16.0, 22.0
    h = top + lanes * lane_h + 18
    width = (WIDE - LEFT - RIGHT) / max(n, 1)
    out = [f'<svg class="chart timeline" id="timeline" viewBox="0 0 {_f(WIDE)} {_f(h)}" role="img" aria-label="turns by thread">']
    for k, t in enumerate(threads):
        yy = top + k * lane_h
        out.append(f'<text class="yl" x="{_f(LEFT - 6)}" y="{_f(yy + 11)}">T{k + 1}</text>')
        out.append(f'<line class="grid" x1="{_f(LEFT)}" x2="{_f(WIDE - RIGHT)}" y1="{_f(yy + lane_h - 1)}" y2="{_f(yy + lane_h - 1)}"><title>{escape(t)}</title></line>')
    for i, lane in enumerate(turn_threads):
        x = LEFT + i * width
        colour = THREAD_COLOURS[lane % len(THREAD_COLOURS)]
        out.append(
            f'<a href="#turn-{i + 1}"><rect x="{_f(x)}" y="{_f(top + lane * lane_h + 2)}" width="{_f(max(width - 0.6, 0.6))}" '
            f'height="{_f(lane_h - 5)}" fill="{colour}"><title>turn {i + 1}{": " + escape(", ".join(marks[i])) if marks[i] else ""}</title></rect></a>'
        )
        for k, kind in enumerate(sorted({mark_kind(m) for m in marks[i]})):
            out.append(f'<circle cx="{_f(x + width / 2)}" cy="{_f(top - 5 - 5 * k)}" r="2" fill="{MARK_COLOURS[kind]}"/>')
    step = max(1, (n + 9) // 10)
    for i in range(0, n, step):
        out.append(f'<text class="xl" x="{_f(LEFT + (i + 0.5) * width)}" y="{_f(h - 3)}">{i + 1}</text>')
    out.append("</svg>")
    return "".join(out)


def summary_map(rows: Sequence[tuple[str, int, int, int, bool]], max_seq: int) -> str:
    """The lossless summaries over the message sequence: one row a depth
    (deepest on top), a bar a summary spanning the messages it covers."""
    depths = max((d for _, d, _, _, _ in rows), default=0) + 1
    row_h, top = 18.0, 6.0
    h = top + depths * row_h + 18
    span = max(max_seq, 1)

    def x(seq: float) -> float:
        return LEFT + (WIDE - LEFT - RIGHT) * (seq - 1) / span

    out = [f'<svg class="chart" id="summary-map" viewBox="0 0 {_f(WIDE)} {_f(h)}" role="img" aria-label="summaries by depth">']
    for d in range(depths):
        yy = top + (depths - 1 - d) * row_h
        out.append(f'<text class="yl" x="{_f(LEFT - 6)}" y="{_f(yy + 12)}">d{d}</text>')
    for sid, depth, lo, hi, fallback in rows:
        yy = top + (depths - 1 - depth) * row_h
        cls = "sbar fb" if fallback else "sbar"
        out.append(
            f'<a href="#{escape(sid)}"><rect class="{cls}" x="{_f(x(lo))}" y="{_f(yy + 2)}" width="{_f(max(x(hi + 1) - x(lo) - 1, 1))}" height="{_f(row_h - 5)}">'
            f"<title>{escape(sid)}: messages {lo}-{hi}</title></rect></a>"
        )
    for seq in sorted({1, *range(1, span + 1, max(1, span // 10))}):
        out.append(f'<text class="xl" x="{_f(x(seq + 0.5))}" y="{_f(h - 3)}">{seq}</text>')
    out.append("</svg>")
    return "".join(out)
