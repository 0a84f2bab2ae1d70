"""The learned facts journaled (sidecar.lifecycle.learned): what one process
learns, the next one knows; a SIGKILL loses nothing already written."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap

from sidecar.lifecycle.learned import LearnedFacts
from sidecar.session.state import Bootstrapped, Learned, ToolsGiven, WindowReported
from sidecar.store.inspect import decode_records
from sidecar.store.learned import learned_path
from tests.support.harness import ROOT


def test_a_later_process_knows_what_an_earlier_one_learned(tmp_path):
    first = LearnedFacts(tmp_path)
    first.learn("t1", "t1", WindowReported(258_400))
    first.learn("t1", "t1", ToolsGiven(frozenset({"message", "exec"})))
    first.learn("t1", "t1", Bootstrapped())
    later = LearnedFacts(tmp_path)  # a new process: nothing in memory
    assert later.get("t1", "t1") == Learned(window=258_400, tools=frozenset({"message", "exec"}), bootstrapped=True)
    # Another thread of the same session (OpenClaw rotated it): the window
    # and the bootstrap are the session's, the tools stay with their thread.
    assert later.get("t2", "t1") == Learned(window=258_400, tools=None, bootstrapped=True)
    # Another session knows nothing.
    assert LearnedFacts(tmp_path).get("t3", "t3") == Learned()


def test_an_unchanged_fact_writes_nothing(tmp_path):
    facts = LearnedFacts(tmp_path)
    for _ in range(5):
        facts.learn("t1", "t1", WindowReported(258_400))
    assert len(decode_records(learned_path(tmp_path, "t1").read_bytes())) == 1


def test_the_journal_is_private_and_any_key_stays_inside_its_folder(tmp_path):
    facts = LearnedFacts(tmp_path / "state")
    key = "agent:main:../../escape"
    facts.learn("t1", key, Bootstrapped())
    path = learned_path(tmp_path / "state", key)
    assert path.parent == tmp_path / "state" / "learned" and path.exists()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert LearnedFacts(tmp_path / "state").get("t1", key).bootstrapped


def test_a_torn_last_line_costs_only_itself(tmp_path):
    facts = LearnedFacts(tmp_path)
    facts.learn("t1", "t1", WindowReported(100_000))
    path = learned_path(tmp_path, "t1")
    with open(path, "ab") as f:
        f.write(b'{"thread":"t1","win')  # a kill in the middle of a write
    LearnedFacts(tmp_path).learn("t1", "t1", ToolsGiven(frozenset({"a"})))
    assert LearnedFacts(tmp_path).get("t1", "t1") == Learned(window=100_000, tools=frozenset({"a"}))


WRITER = textwrap.dedent(
    """
    import sys
    from sidecar.session.state import WindowReported
    from sidecar.lifecycle.learned import LearnedFacts

    facts = LearnedFacts(sys.argv[1])
    n = 1
    while True:
        facts.learn("t1", "t1", WindowReported(n))  # a new window each time: one write each
        sys.stdout.write(f"{n}\\n")  # acknowledged once the write returned
        sys.stdout.flush()
        n += 1
    """
)


def test_a_sigkill_mid_write_loses_nothing_already_acknowledged(tmp_path):
    """A writer journals a new fact in a loop and acknowledges each one after
    its write returned; it is SIGKILLed at some instant, after a few hundred.
    Every acknowledged fact is in the journal, in order, and the state read
    back is at least the last acknowledged one."""
    for round_ in range(3):
        state = tmp_path / f"state{round_}"
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(state)],
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            cwd=str(ROOT),
        )
        assert proc.stdout is not None
        acked = 0
        while acked < 200 + 150 * round_:
            line = proc.stdout.readline()
            assert line, "writer ended early"
            acked = int(line)
        proc.send_signal(signal.SIGKILL)
        rest = proc.stdout.read()  # acknowledgements already in the pipe
        proc.wait()
        for line in rest.splitlines():
            acked = int(line)
        windows = [e["window"] for e in decode_records(learned_path(state, "t1").read_bytes())]
        assert windows[:acked] == list(range(1, acked + 1))
        assert LearnedFacts(state).get("t1", "t1").window >= acked  # type: ignore[operator]


def test_what_a_thread_learned_before_its_session_was_known_is_found_under_the_session(tmp_path):
    """A fresh thread's first process journals under the thread's own key
    (OpenClaw's session is told only later); the next process asks under
    the session's key and must still find the thread's tools and addition
    (seen live: the addition sent again, doubled in the model's request)."""
    from sidecar.session.state import AdditionSent

    first = LearnedFacts(tmp_path)
    first.learn("t1", "t1", ToolsGiven(frozenset({"message"})))
    first.learn("t1", "codex-abc", AdditionSent("d1"))  # the session got known mid-process
    first.learn("t1", "codex-abc", WindowReported(258_400))
    later = LearnedFacts(tmp_path)
    assert later.get("t1", "codex-abc") == Learned(window=258_400, tools=frozenset({"message"}), addition="d1")
    # Once known, the session's journal is the one written.
    assert LearnedFacts(tmp_path).get("t2", "codex-abc").window == 258_400


def test_a_window_learned_before_the_session_was_known_is_journaled_under_the_session(tmp_path):
    """Codex reports a resumed thread's usage before the sidecar has read the
    thread's binding: the window goes under the thread's key. Once the
    session is known, the session's journal gets it too (when it has none),
    so the session's next Codex thread has it from its first turn."""
    first = LearnedFacts(tmp_path)
    first.learn("t1", "t1", WindowReported(258_400))  # before the binding was read
    assert first.get("t1", "codex-abc").window == 258_400  # the session got known
    assert LearnedFacts(tmp_path).get("t2", "codex-abc").window == 258_400  # a new thread of the session
    # A session journal with a window of its own keeps it (no second entry).
    second = LearnedFacts(tmp_path)
    second.learn("t3", "t3", WindowReported(128_000))
    assert second.get("t3", "codex-abc").window == 128_000  # learned in this process: newer, kept
    assert [e.get("window") for e in decode_records(learned_path(tmp_path, "codex-abc").read_bytes())] == [258_400]


def test_a_thread_that_was_its_own_session_bootstraps_the_session_it_joins(tmp_path):
    """A thread bootstrapped as a session of its own (no relay id told its
    session) and later bound to OpenClaw's session: its tools come along,
    but that session was never bootstrapped, so its first turn bootstraps
    it (a later process and this one alike)."""
    first = LearnedFacts(tmp_path)
    first.learn("t1", "t1", ToolsGiven(frozenset({"message"})))
    first.learn("t1", "t1", Bootstrapped())
    assert first.machine("t1", "t1").opening_step(had_history=True) is None
    # This process: the thread's session got known.
    assert first.machine("t1", "codex-abc").opening_step(had_history=True) == "bootstrap"
    # A later process: the thread's own journal does not bootstrap the session.
    later = LearnedFacts(tmp_path)
    assert later.get("t1", "codex-abc") == Learned(tools=frozenset({"message"}))
    assert later.machine("t1", "codex-abc").opening_step(had_history=True) == "bootstrap"
    # Once the session is bootstrapped, its journal says so to the next process.
    later.learn("t1", "codex-abc", Bootstrapped())
    assert LearnedFacts(tmp_path).machine("t1", "codex-abc").opening_step(had_history=True) == "maintain"
