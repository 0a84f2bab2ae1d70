"""The differential conformance suite (issue 25): every scenario run against
the real codex alone and through the sidecar with no engine, with an
identity engine and with a rebuilding engine; the client must see the same
frames (in :func:`tests.conformance.normalise.canonical` order, modulo ids,
clocks and the fields each scenario says). One process per mode plays every
scenario (``scenarios.run_modes``); the comparisons then cost nothing.

``pytest tests/conformance -s`` prints which of codex's own client methods
the scenarios cover (``test_the_suite_covers_or_names_every_client_method``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protocol import experimental

from tests.support.codex import CODEX_BIN, needs_codex

from .methods import NOT_COVERED, absent_from, client_methods, codex_version, coverage_table
from .normalise import UNORDERED, differences
from .scenarios import BY_NAME, MODES, SCENARIOS, STABLE_MODES, ModeRun, base, baseline, run_modes, view

pytestmark = needs_codex

ALL_MODES = MODES + STABLE_MODES
COMPARED = [m for m in ALL_MODES if base(m) != "direct"]
CASES = [("initialize", mode) for mode in COMPARED] + [(s.name, mode) for mode in COMPARED for s in SCENARIOS if base(mode) in s.modes]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, ModeRun]:
    return run_modes(ALL_MODES, tmp_path_factory.mktemp("conformance"))


@pytest.fixture(scope="module")
def codex() -> tuple[int, int, int]:
    """The version of the codex under test (``make test-codex-matrix`` runs several)."""
    assert CODEX_BIN is not None
    return codex_version(CODEX_BIN)


def _explain(direct: ModeRun, run: ModeRun) -> str:
    return f"codex stderr tail:\n{direct.stderr[-1500:]}\n--- {run.mode} stderr tail:\n{run.stderr[-1500:]}"


@pytest.mark.parametrize(("name", "mode"), CASES, ids=[f"{n}-{m}" for n, m in CASES])
def test_the_client_sees_what_codex_alone_shows(runs, codex, name, mode):
    direct, run = runs[baseline(mode)], runs[mode]
    d, r = direct.records[name], run.records[name]
    assert d.error is None, f"the scenario failed against codex alone: {d.error}\n{_explain(direct, run)}"
    assert r.error is None, f"the scenario failed through the sidecar ({mode}): {r.error}\n{_explain(direct, run)}"
    assert r.sent == d.sent
    scenario = BY_NAME.get(name)
    seen, expected = view(scenario, mode, r, run.root, codex), view(scenario, mode, d, direct.root, codex)
    assert seen == expected, "\n".join(differences(seen, expected))


def test_the_rebuilding_engine_did_rebuild_and_the_identity_engine_did_not(runs):
    """Otherwise the rebuild mode would compare nothing the plain relay does not."""
    assert runs["rebuild"].records["reads"].summarised
    assert runs["rebuild"].records["plain_turns"].summarised
    assert not any(r.summarised for r in runs["identity"].records.values())


def test_codex_sends_only_experimental_clients_the_notifications_the_sidecar_hides_from_stable_ones(runs, codex):
    """What codex alone sends an experimental client and not a stable one,
    scenario by scenario (the schema does not say): the sidecar, which
    declares the experimental API for its engine, must hide exactly these."""
    only_experimental: set[str] = set()
    for name, record in runs["direct"].records.items():
        scenario = BY_NAME.get(name)
        # what comes or not with codex alone: the scenario's drops, and what the comparison leaves out (rate limits, ...)
        drop = (scenario.drop if scenario is not None else frozenset()) | UNORDERED
        stable = {f.get("method") for f in runs["stable-direct"].records[name].frames}
        only_experimental |= {f["method"] for f in record.frames if "method" in f and "id" not in f and f["method"] not in stable | drop}
    only_experimental.discard("thread/started")  # experimental_members: the thread only the experimental client could start
    assert only_experimental <= set(experimental.NOTIFICATIONS)
    if codex == tuple(int(x) for x in experimental.CODEX_VERSION.split(".")):  # the table's own codex: all of them seen
        assert only_experimental == set(experimental.NOTIFICATIONS)


def test_an_engine_projects_for_a_client_that_negotiated_nothing(runs):
    """The rebuilding engine rebuilt for the stable client too (its context
    went as codex's experimental ``additionalContext``), and ``lossless``
    offered its tools: neither fell back to the client's request."""
    assert runs["stable-rebuild"].records["plain_turns"].summarised
    for run in (runs["stable-lossless"], runs["stable-rebuild"]):
        for fallback in ("forwarding the original request", "bind failed", "running legacy", "requires experimentalApi"):
            assert fallback not in run.stderr, f"{run.mode}: {fallback}"


def test_the_suite_covers_or_names_every_client_method(runs, codex, tmp_path):
    assert CODEX_BIN is not None
    methods = client_methods(CODEX_BIN, tmp_path / "schema")
    sent = {m for record in runs["direct"].records.values() for m in record.sent}
    covered = {m for m in methods if m in sent}
    print("\n" + coverage_table(methods, covered))
    # What an older (or newer) codex of the matrix lacks, by the table; a
    # scenario still sends such a method, and the client must see codex's
    # refusal through the sidecar as from codex alone.
    absent = absent_from(codex)
    assert not absent & set(methods), f"SINCE/UNTIL say codex lacks methods it has: {sorted(absent & set(methods))}"
    declared = {m for s in SCENARIOS for m in s.methods}
    assert declared - absent <= set(methods), f"scenarios name methods codex does not have: {sorted(declared - absent - set(methods))}"
    assert declared <= sent, f"scenarios declare methods they never sent: {sorted(declared - sent)}"
    uncovered = set(methods) - covered
    assert not uncovered - set(NOT_COVERED), f"codex has client methods no scenario covers and no reason names: {sorted(uncovered - set(NOT_COVERED))}"
    assert not set(NOT_COVERED) & covered, f"covered now, drop them from NOT_COVERED: {sorted(set(NOT_COVERED) & covered)}"
    gone = set(NOT_COVERED) - absent - set(methods)
    assert not gone, f"no longer in codex's schema: {sorted(gone)}"


def _mirrored_user_texts(state: Path, marker: str) -> list[str]:
    """The user messages of the mirrored session holding ``marker``."""
    for path in sorted((state / "sessions").glob("*.jsonl")):
        entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        users = []
        for entry in entries:
            message = entry.get("message") if entry.get("type") == "message" else None
            if isinstance(message, dict) and message.get("role") == "user":
                content = message.get("content")
                users.append(content if isinstance(content, str) else "".join(b.get("text", "") for b in content if isinstance(b, dict)))
        if marker in users:
            return users
    return []


@pytest.mark.parametrize("mode", ["identity", "rebuild"])
def test_a_joined_input_is_mirrored_once_with_the_running_turn(runs, mode):
    state = Path(runs[mode].root) / "state"
    assert _mirrored_user_texts(state, "first part") == ["first part", "second part"]
    assert _mirrored_user_texts(state, "one") == ["one", "two"]  # back to back: joined too
