"""The ``[engines.lossless]`` table the benchmarks run the engine on
(``tools.bench_lossless``, and ``tools.bench_scale``'s ``lossless``
configuration): the engine's defaults but for a summary model of its own
and no hourly cap."""

from __future__ import annotations

from collections.abc import Sequence

SUMMARY_MODEL = "bench-summary-mini"
"""The bench's ``summary_model`` unless ``--engine-setting`` sets one: the
fake model logs each request's model, so the report checks that every
summary call asked for it and no turn request did."""
BENCH_DEFAULTS = {"summary_model": f'"{SUMMARY_MODEL}"', "summary_max_calls_per_hour": "0"}
"""Engine settings the bench adds unless ``--engine-setting`` gives them: its
summary model, and no hourly cap (the bench runs hours of turns in minutes)."""


def engine_table(engine_settings: Sequence[str] = ()) -> tuple[str, set[str]]:
    """The sidecar config's ``[engines.lossless]`` table: each ``KEY=VALUE``
    of ``engine_settings`` (TOML values), then :data:`BENCH_DEFAULTS` for the
    keys they leave out; and the keys given. ``make bench-lossless`` and ``tools.bench_scale``'s
    ``lossless`` configuration run on it."""
    table = ["[engines.lossless]"]
    given: set[str] = set()
    for item in engine_settings:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"--engine-setting {item!r}: expected KEY=VALUE")
        table.append(f"{key.strip()} = {value.strip()}")
        given.add(key.strip())
    table += [f"{key} = {value}" for key, value in BENCH_DEFAULTS.items() if key not in given]
    return "\n".join(table) + "\n", given
