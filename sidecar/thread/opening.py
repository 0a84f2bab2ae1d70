"""A thread's identity and opening, what it learned and what the client
injected and reverted outside turns: the only writers of those fields."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from engines import PromptCacheInfo, Usage

if TYPE_CHECKING:
    import trio

    from .files import Injection, InspectFile, LedgerFile, Mirror
    from .state import LearnedMachine, ThreadSession, Unfollowed


def answered_open(session: ThreadSession, method: str, *, relay: str | None, cwd: Any, model: Any, framing_fork: bool) -> None:
    """Codex answered the client's ``thread/start``, ``resume`` or ``fork``."""
    session.closed = False  # opened again: a release under way keeps it
    if method in ("thread/start", "thread/resume"):
        session.relay = relay
        session.fresh = method == "thread/start"
        session.turns_this_opening = 0
    session.cwd = cwd or session.cwd
    session.model = model or session.model
    if framing_fork:
        session.framing_only = True


def closed(session: ThreadSession, value: bool = True) -> None:
    """Codex unloaded the thread (``True``), or the release found it opened again."""
    session.closed = value


def bound(session: ThreadSession, session_id: str, session_key: str, path: Path, via: str) -> None:
    """The thread belongs to this session (``sidecar.session.identity``)."""
    session.path = path
    session.session_id = session_id
    session.session_key = session_key
    session.via = via


def mirror_opened(session: ThreadSession, mirror: Mirror | None, *, had_history: bool | None = None) -> None:
    """The session's mirror (None: unavailable, turns pass through), and
    whether it holds history (None: unchanged)."""
    session.mirror = mirror
    if had_history is not None:
        session.had_history = had_history


def history_imported(session: ThreadSession, some: bool) -> None:
    session.had_history = session.had_history or some


def files_opened(session: ThreadSession, *, inspect: InspectFile | None = None, ledger: LedgerFile | None = None) -> None:
    if inspect is not None:
        session.inspect = inspect
    if ledger is not None:
        session.ledger = ledger


def learned_read(session: ThreadSession, machine: LearnedMachine, key: str) -> None:
    """The thread's learned facts as read under ``key``."""
    session.learned = machine
    session.learned_key = key


def usage_reported(session: ThreadSession, usage: Usage, cache: PromptCacheInfo, count: int) -> None:
    session.last_usage = usage
    session.prompt_cache = cache
    session.current_token_count = count


def reported(session: ThreadSession, name: str, value: Any) -> None:
    """The last ``name`` the sidecar did for the thread (``lastOverflow``,
    ``lastEngineCompaction``...), shown by ``sidecar/status``: diagnostics only."""
    session.stats[name] = value


def engine_tool_called(session: ThreadSession, call: dict[str, Any], *, kept: int) -> None:
    """An engine tool answered during the thread's turn: the turn's inspect
    record keeps the first ``kept`` calls (none outside a turn)."""
    if session.current is not None and len(session.current.engine_tools) < kept:
        session.current.engine_tools.append(call)


def native_compaction_sent(session: ThreadSession) -> None:
    """The client's ``thread/compact/start`` went to Codex after the engine's compaction."""
    session.native_compactions += 1


def native_compaction_answered(session: ThreadSession) -> None:
    """Codex answered it (or it could not be sent)."""
    session.native_compactions = max(0, session.native_compactions - 1)


# ------------------------------------------------------------ client reverts


def revert_sent(session: ThreadSession, answered: trio.Event) -> None:
    """A client ``thread/revert`` went to Codex: turns wait for its answer
    (``answered``, a new event, is set when the last is answered)."""
    session.reverts_unanswered += 1
    session.reverts_answered = answered


def revert_answered(session: ThreadSession) -> bool:
    """A client revert was answered (or given up on). True: none is left
    unanswered (the caller sets ``reverts_answered``)."""
    session.reverts_unanswered = max(0, session.reverts_unanswered - 1)
    return not session.reverts_unanswered


def unfollowed(session: ThreadSession, pending: Unfollowed | None) -> None:
    """A client revert the mirror must follow before anything assembles (None: given up)."""
    session.unfollowed = pending


def follow_ended(session: ThreadSession, pending: Unfollowed, followed: bool) -> None:
    """The mirror followed ``pending`` (or failed to: the next turn retries)."""
    if session.unfollowed is pending:
        session.unfollowed = None if followed else pending
    elif not followed and session.unfollowed is None:
        session.unfollowed = pending  # (a restart's pending intent) the next turn retries


# ------------------------------------------------------- injected outside turns


def injected(session: ThreadSession, injection: Injection) -> None:
    """The client injected items (Codex took them): at once, so the next
    turn's rebuild puts them back; before the thread's first turn (with the
    others put back there) they count as framing."""
    if session.injected_framing == len(session.injected) and session.turns_since_rebuild == [] and session.current is None:
        session.injected_framing += 1
    session.injected.append(injection)


def injection_placed(session: ThreadSession, injection: Injection, placed: Injection) -> None:
    """``injection`` now knows the turn it came after (``placed``)."""
    session.injected = [placed if i is injection else i for i in session.injected]


def injections_loaded(session: ThreadSession, loaded: list[Injection], framing: int, unsure: bool, last_turn: str | None) -> None:
    """The session opened: the journal's injections before what came meanwhile."""
    session.injected = loaded + session.injected
    session.injected_framing = framing
    session.injected_unsure = unsure
    session.last_turn = last_turn


def replay_settled(session: ThreadSession, framing: int) -> None:
    """The thread holds the first ``framing`` injections before its first turn, surely."""
    session.injected_framing, session.injected_unsure = framing, False


def replaying(session: ThreadSession) -> None:
    """A replay is on its way: until Codex answers, what the thread holds is unsure."""
    session.injected_unsure = True


def injections_dropped(session: ThreadSession, gone: set[str]) -> bool:
    """The client reverted these turns: what it injected after them goes
    too. False: nothing did."""
    if not any(i.after_turn in gone for i in session.injected):
        return False
    session.injected = [i for i in session.injected if i.after_turn not in gone]
    return True


def history_known(session: ThreadSession, had_history: bool) -> None:
    """Whether the session's mirror holds history (as read from it)."""
    session.had_history = had_history


def releasable(session: ThreadSession) -> bool:
    """Closed by Codex, and nothing of the thread under way: no turn, no
    client revert to follow or answer, no finalized marker being written,
    no turn waiting for the slot, no native compaction Codex has not answered."""
    return (
        session.closed
        and session.native_compactions == 0
        and not session.turns
        and session.current is None
        and session.unfollowed is None
        and session.reverts_unanswered == 0
        and not session.marking
        and session.slot.statistics().tasks_waiting == 0
    )


def fork_keeps_addition(params: dict[str, Any]) -> bool:
    """A whole fork holds its parent's history, and so the engine's
    system-prompt addition that history carries: the fork knows it, so its
    first turn does not send it again (Codex would hold it twice). A fork
    cut at a turn (``lastTurnId``, ``beforeTurnId``) may have lost the turn
    that carried it, so it sends it again: at worst twice, never missing."""
    return not isinstance(params.get("lastTurnId"), str) and not isinstance(params.get("beforeTurnId"), str)
