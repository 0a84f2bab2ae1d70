"""docs/ENGINE_GUIDE.md's test recipes run as written.

The guide's "Driving turns without codex" example is what an engine author
copies into a test of their own: it is run here, as the author would run it
(a pytest-trio test taking ``tmp_path``). Its earlier form, a lifecycle
over ``tools.replay``, stopped working when the lifecycle began to send its
own ``thread/read`` after each turn, and nothing noticed."""

from __future__ import annotations

import re

from tests.support.markdown import ROOT

GUIDE = ROOT / "docs" / "ENGINE_GUIDE.md"


def _example(section: str) -> str:
    text = GUIDE.read_text().split(f"### {section}\n", 1)[1].split("\n### ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", text, re.S)
    return code


async def test_the_guide_s_example_without_codex_passes_as_written(tmp_path):
    namespace: dict[str, object] = {}
    exec(compile(_example("Driving turns without codex"), str(GUIDE), "exec"), namespace)
    (test,) = [v for k, v in namespace.items() if k.startswith("test_") and callable(v)]
    await test(tmp_path)  # type: ignore[operator]
