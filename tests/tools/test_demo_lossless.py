"""``make demo ENGINE=lossless`` runs and shows what it promises.

The demo itself runs (real codex, the fake model, the sidecar as a process)
and its printout is read: compaction steps, the summaries per depth with the
extractive stand-ins marked (the fake model refuses to summarise one turn),
the summaries the model read, a recall tool call with the engine's answer
and the model's reply built from it, and that the client saw none of it.
"""

from __future__ import annotations

import re

from tests.support.codex import CODEX_BIN, needs_codex
from tools import demo_lossless

pytestmark = needs_codex


def section(out: str, title: str) -> list[str]:
    """The lines under a ``── title ──`` rule, up to the next rule."""
    lines = out.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith(f"── {title} "))
    end = next((n for n in range(start + 1, len(lines)) if lines[n].startswith("── ")), len(lines))
    return lines[start + 1 : end]


async def test_the_lossless_demo_shows_summaries_per_depth_and_a_recall_call(tmp_path, capsys):
    assert CODEX_BIN is not None
    assert await demo_lossless.run(CODEX_BIN, tmp_path) == 0
    out = capsys.readouterr().out

    # Compaction steps after turns, one of them with extractive stand-ins.
    steps = re.findall(r"^compacted: step (\d+) after the turn: (\d+) leaf \+ (\d+) condensed summaries", out, re.MULTILINE)
    assert steps and [int(s[0]) for s in steps] == list(range(1, len(steps) + 1))
    assert re.search(r"^ +\d+ of them extractive: the summariser failed", out, re.MULTILINE)

    # The summaries per depth: counts that match the rows listed, the stand-ins marked.
    stored = section(out, "summaries in the store, by depth")
    heads = [(n, re.fullmatch(r"depth (\d+) \((.*)\): (\d+), (\d+) by the model, (\d+) extractive", line)) for n, line in enumerate(stored)]
    heads = [(n, m) for n, m in heads if m]
    assert [int(m.group(1)) for _, m in heads] == sorted({int(m.group(1)) for _, m in heads}, reverse=True)
    assert {int(m.group(1)) for _, m in heads} >= {0, 1}
    for (n, m), following in zip(heads, [*heads[1:], (len(stored), None)], strict=True):
        rows = stored[n + 1 : following[0]]
        assert len(rows) == int(m.group(3)) and all(re.match(r"  sum_[0-9a-f]{16} turns ", r) for r in rows)
        assert len([r for r in rows if " EXTRACTIVE " in r]) == int(m.group(5))
        assert len([r for r in rows if " model " in r]) == int(m.group(4))
    leaf = next(m for _, m in heads if m.group(1) == "0")
    assert int(leaf.group(5)) >= 1 and int(leaf.group(4)) >= 1

    # What the model read in the last turn: summary headers.
    read = section(out, "summaries the model read in the last turn")
    assert read and all(re.match(r"  \[summary sum_[0-9a-f]{16} depth \d+, turns? ", line) for line in read)

    # The recall: the model called lcm_grep, the sidecar answered with the
    # planted fact, and the model's answer came from it.
    assert re.search(r"^recall: +the model called lcm_grep\(\{\"query\":\"hotel room booked\"\}\)", out, re.MULTILINE)
    answer = re.findall(r"^ +\| (.*)$", out, re.MULTILINE)
    assert re.match(r"\d+ hits? for 'hotel room booked'", answer[0])
    assert any("Avenida Palace" in line for line in answer[1:])
    assert "assistant: You booked the Hotel Avenida Palace, room 512 (found with lcm_grep)." in out

    # The client saw none of the engine's work.
    client = section(out, "what the client saw of the engine")
    assert client[:3] == [
        "server requests for the recall tool: 0",
        "frames naming the recall call:       0",
        "threads in thread/list:              1 (the summariser's threads are not listed)",
    ]
    status = section(out, "codex-sidecar engines lossless status")
    assert re.search(r"extractive +[1-9]\d* pending a model rewrite", "\n".join(status))
