"""The context engine's lifecycle around every Codex turn.

This is the spec (``codex-context-engine-harness.md``) implemented at the
protocol boundary. Each Codex thread is an OpenClaw session: session id =
thread id, session key from a template (default: the thread id), transcript
mirror = an OpenClaw JSONL file under the state directory.

Before a turn (``turn/start`` is held while this runs; other traffic flows):
read the mirror; bootstrap and bootstrap maintenance once, when history
exists; assemble with the mirrored messages, budget, tool names, model and
prompt; project the result into the turn's input; forward. Any engine error,
timeout or projection problem forwards the client's original request.

After a turn (``turn/completed`` is forwarded first): mirror the turn's items
(the user's original prompt, never the projected text), idempotently by
Codex item id; then ``after_turn``, else ``ingest_batch``, else ``ingest``
per message, with the full mirrored snapshot; then turn maintenance, only
after a completed turn whose finalisation succeeded. The next turn of the
same thread waits for this; other threads never do.

How the system prompt addition reaches the model: Codex fixes a thread's
developer instructions once it is loaded (a later ``thread/resume`` with new
ones is ignored, FACTS §2), so the addition travels per turn in
``turn/start.additionalContext``, which Codex renders as a developer message
before that turn's input and keeps in the thread's history. It is sent on a
turn when it differs from the last one delivered on that thread, so an
unchanged addition is not stacked up in history turn after turn.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import trio

from engines import (
    AfterTurnParams,
    AgentMessage,
    AssembleParams,
    BootstrapParams,
    CompactParams,
    CompactResult,
    MaintainParams,
    PromptCacheInfo,
    RuntimeContext,
    Usage,
    after_turn_with_fallback,
    encode_openclaw,
    optional_method,
)
from protocol import parse, rewrite

from .mirror import MirrorError, TranscriptMirror, session_path
from .archive import TurnArchive, archive_path, archived_turn
from .backing import BackingThreads
from .inspect import InspectLog, inspect_path
from .reads import ArchivedTurns
from .projection import (
    CHARS_PER_TOKEN,
    ProjectionError,
    already_projected,
    char_budget_for_tokens,
    input_text_chars,
    project_turn_input,
)
from .spares import Spares
from .relay import HANDLED, Decision, Hooks, Message, PendingRequest, Proxy, RpcError
from .translate import key_turn_id, messages_of, translate_turn, turn_key_prefix

log = logging.getLogger("codex_sidecar.lifecycle")

T = TypeVar("T")

FINALIZED_CUSTOM_TYPE = "openclaw-codex-sidecar/turn-finalized"
ENGINE_COMPACTION_KEY = "codex-sidecar:{thread_id}:compaction:{n}"


@dataclass
class LifecycleOptions:
    engine_deadline: float = 20.0
    """Seconds one engine call may take before the sidecar falls back."""
    token_budget: int | None = None
    session_key_template: str = "{thread_id}"
    citations_mode: str | None = None
    previous_turn_wait: float = 120.0
    """How long a turn waits for the previous turn's finalisation at most."""
    spare_wait: float = 0.15
    """fresh: how long a rebuild waits for a spare whose ``thread/start`` is
    on its way (Codex answers one in 11-15 ms) before it reverts in place
    instead (23-43 ms, then a cold first request)."""
    stale_slack: float = 0.10
    """delta: content the engine dropped may stay in the thread, instead of a
    rebuild, while it is at most this share of what the thread holds. A
    rebuild costs Codex a new session (~36 ms of CPU, a login-shell
    snapshot) and a cold first request, and costs a provider's prompt cache
    the whole history once; stale content costs its tokens on each request,
    cached after the first (README, "Stale content and the slack")."""
    stale_floor_chars: int = 4000
    """...and always this many characters (about 1,000 tokens), so a young
    thread, where 10% is less than one recalled snippet, does not rebuild on
    every turn. ``stale_slack`` 0 means exact: rebuild on any drop."""
    projection_mode: str = "auto"
    """``per_turn``, ``epoch``, ``delta``, or ``auto``: what the engine's
    assemble result asks for (``thread_bootstrap`` means epoch, an explicit
    ``per_turn`` means per turn), else ``delta``."""
    rebuild: str = "fresh"
    """``fresh``: a rebuild switches the client's thread onto a spare Codex
    thread (``sidecar.backing``), or reverts in place when it cannot;
    ``revert``: it always reverts the Codex thread in place."""


PROJECTION_MODES = ("auto", "per_turn", "epoch", "delta")
REVERT_NOTIFICATIONS = ("thread/status/changed", "thread/readState/changed", "thread/reverted")
CATCH_UP_TURNS = 4
"""Newest turns checked against the mirror when a thread is resumed without its turns."""
LOADED_LIST_PAGES = 100
"""Pages of ``thread/loaded/list`` read to confirm Codex unloaded a closed thread."""
SETTLE_PAGES = 50
"""Pages of 20 turns looked through to settle a client revert whose answer a kill lost."""
REVERTED_NOTICE_WAIT = 2.0
"""Seconds the ``thread/reverted`` of a rebuild's revert is waited for (and
swallowed) after Codex answered the revert; the turn does not wait for it."""
REVERT_CUSTOM_TYPE = "codex-sidecar.client-revert"
"""Mirror entry that takes the turns a client's own ``thread/revert`` dropped off the session's path."""


@dataclass
class _Unfollowed:
    """A client revert Codex answered that the mirror has not followed yet."""

    before: str
    into_archive: bool
    in_flight: frozenset[str]
    """Turns running or finalising at the answer: the only ones that may be
    mirrored before the follow (Codex interrupted them; they are reverted too)."""
    holder: Any
    """The proxy gate holding the client's later requests on the thread."""


@dataclass
class _RevertNoise:
    """What the client must not see of a thread's rebuild reverts: while one
    is unanswered, every status notification of the thread; and one
    ``thread/reverted`` per revert (Codex sends it after the answer). Each
    revert has a ticket; a ``thread/reverted`` takes the oldest."""

    answered: bool = False
    tickets: list[trio.Event] = field(default_factory=list)


@dataclass
class TurnState:
    client_id: Any
    original_input: list[dict[str, Any]] | None
    pre_prompt_count: int = 0
    history: list[AgentMessage] = field(default_factory=list)
    turn_id: str | None = None
    items: dict[str, dict[str, Any]] = field(default_factory=dict)
    item_times: dict[str, int] = field(default_factory=dict)
    projected: bool = False
    assembled_count: int | None = None
    estimated_tokens: int | None = None
    fallback_reason: str | None = None
    mode: str | None = None
    epoch: str | None = None
    assembled_roles: list[list[Any]] = field(default_factory=list)
    channels: list[str] = field(default_factory=list)
    context_chars: int = 0
    rendered: int = 0
    dropped: int = 0
    original_chars: int = 0
    sent_chars: int = 0
    stale: int = 0
    addition_pending: str | None = None
    epoch_pending: str | None = None
    received: float = field(default_factory=trio.current_time)
    hold_ms: float | None = None
    revert_ms: float | None = None
    """How long Codex took to answer this turn's rebuild revert (part of hold_ms)."""
    switched: bool = False
    """The rebuild moved the thread onto a fresh backing thread (not a revert)."""
    held_plan: list[str] | None = None
    """Fingerprints of what the Codex thread holds once this turn's projection
    is in (before the turn's own messages); None when nothing was tracked."""
    rebuilt: bool = False


@dataclass
class ThreadSession:
    thread_id: str
    session_key: str
    path: Path
    cwd: str | None = None
    model: str | None = None
    tools: frozenset[str] = frozenset()
    mirror: TranscriptMirror | None = None
    had_history: bool = False
    bootstrapped: bool = False
    ready: trio.Event = field(default_factory=trio.Event)
    slot: trio.Semaphore = field(default_factory=lambda: trio.Semaphore(1))
    """One turn at a time per thread, in arrival order (trio semaphores are
    FIFO and, unlike locks, may be released by the finalising task)."""
    turns: dict[str, TurnState] = field(default_factory=dict)
    current: TurnState | None = None
    last_usage: Usage | None = None
    prompt_cache: PromptCacheInfo | None = None
    current_token_count: int | None = None
    context_window: int | None = None
    addition_sent: str | None = None
    warned_double_projection: bool = False
    compactions: int = 0
    completed_turns: set[str] = field(default_factory=set)
    """Turn ids whose ``turn/completed`` was taken (a replay is not finalised twice)."""
    marking: set[trio.Event] = field(default_factory=set)
    """Finalized markers being written (each set once written): the next
    turn need not wait for them, the session's release does."""
    projected_epoch: str | None = None
    held: list[str] | None = None
    """Fingerprints of the mirrored messages the Codex thread holds, in order
    (its own turns plus what the sidecar projected); None: not known."""
    turns_since_rebuild: list[str] | None = None
    force_rebuild: bool = False
    revert_unsupported: bool = False
    rebuilds: int = 0
    sizes: dict[str, int] = field(default_factory=dict)
    """Characters of each fingerprinted message (for the stale slack)."""
    inspect: "InspectLog | None" = None
    framing_only: bool = False
    """A fork the sidecar made from Codex's framing: its ledger starts empty."""
    reverts_unanswered: int = 0
    """Client thread/reverts sent to Codex and not answered yet."""
    reverts_answered: trio.Event = field(default_factory=trio.Event)
    """Set whenever the last of them is answered."""
    unfollowed: _Unfollowed | None = None
    """A client revert the mirror has not followed yet: whichever comes first
    with the turn slot (the forget, or a turn/start queued before the revert)
    follows it before anything assembles; after a failed follow, the next turn."""
    live_turns: list[str] | None = None
    """Archived turns Codex still holds (a revert to the framing drops them
    all); None: not known in this process, the archive knows."""
    last_items: dict[str, str | None] = field(default_factory=dict)
    """Turn id -> id of its last item (None: none), for the turns finalised in
    this process: where a client revert's ``itemsBackwardsCursor`` points."""
    stats: dict[str, Any] = field(default_factory=dict)
    closed: bool = False
    """Codex sent ``thread/closed`` (it unloaded the thread) and no request
    has opened the thread again since: the session is released once idle."""

    @property
    def busy(self) -> bool:
        return self.slot.value == 0

    @property
    def settled(self) -> bool:
        """No turn under way and every finalized marker written."""
        return not self.busy and not self.marking


class Lifecycle:
    """Installs the hooks that run ``engine`` around the turns ``proxy`` relays."""

    def __init__(self, proxy: Proxy, engine: Any, state_dir: str | Path, options: LifecycleOptions | None = None) -> None:
        self.proxy = proxy
        self.engine = engine
        self.state_dir = Path(state_dir)
        self.options = options or LifecycleOptions()
        self.sessions: dict[str, ThreadSession] = {}
        self.archived = ArchivedTurns(proxy, state_dir)
        """The read side: answers thread/read, resume, fork, turns/list and
        items/list with the turns rebuilds took out of Codex (``sidecar.reads``)."""
        self.archived.wrap_cursors = self.options.projection_mode != "per_turn"  # cursors outlive rebuilds
        self._requests: dict[Any, dict[str, Any]] = {}  # client id -> params of thread/start|resume|fork
        self._native_pending: dict[Any, tuple[ThreadSession, CompactResult]] = {}
        self._reverting: dict[str, _RevertNoise] = {}
        self._archive_reverts: set[Any] = set()
        """Client ids of thread/revert requests into archived turns, rewritten to Codex's first turn."""
        self._unanswered: dict[Any, ThreadSession] = {}
        """Client ids of client thread/reverts Codex has not answered, and their session."""
        self._archive_forks: set[Any] = set()
        """The same for thread/fork: the fork holds Codex's framing only."""
        self._released = {"threads": 0, "rebuilds": 0}
        """Sessions released after Codex closed their thread, and their rebuilds."""
        self.backing: BackingThreads | None = None
        """``rebuild = "fresh"``: the client's threads and the Codex threads behind them."""
        self.spares = Spares(self)
        """Starting spares and switching onto them (``sidecar.spares``)."""
        if self.options.rebuild == "fresh":
            self.backing = BackingThreads(state_dir)
            proxy.edge = self.backing
        info = engine.info
        self.engine_id: str = info.id
        self.owns_compaction: bool = bool(getattr(info, "owns_compaction", False))
        self.background_maintenance: bool = getattr(info, "turn_maintenance_mode", "foreground") == "background"

    # ------------------------------------------------------------ install

    def install(self, hooks: Hooks) -> None:
        # (client request, its response): the request hook sees it on the way
        # in, the response hook on the way back.
        pairs = [
            ("thread/start", self._remember_params, self._on_thread_response),
            ("thread/resume", self._on_resume, self._on_thread_response),
            ("thread/fork", self._on_client_fork, self._on_thread_response),
            ("thread/read", self.archived.on_thread_read, self.archived.on_thread_read_response),
            ("thread/revert", self._on_client_revert, self._on_client_revert_response),
            ("thread/turns/list", self.archived.on_turns_list, self.archived.on_list_response),
            ("thread/items/list", self.archived.on_items_list, self.archived.on_list_response),
            ("thread/list", None, self.archived.on_thread_list_response),
            ("turn/start", self._on_turn_start, self._on_turn_start_response),
            ("thread/compact/start", self._on_compact_start, self._on_compact_response),
        ]
        for method, on_request, on_response in pairs:
            if on_request is not None:
                hooks.on_client_request(method, on_request)
            hooks.on_response(method, on_response)
        hooks.on_server_notification("item/completed", self._on_item_completed)
        hooks.on_server_notification("thread/tokenUsage/updated", self._on_token_usage)
        hooks.on_server_notification("turn/completed", self._on_turn_completed)
        hooks.on_server_notification("thread/closed", self._on_thread_closed)
        if self.backing is not None:
            hooks.on_client_request("thread/name/set", self.spares.on_name_set)
            for method in ("thread/delete", "thread/archive"):
                hooks.on_client_request(method, self._remember_request)
                hooks.on_response(method, self.spares.follow_to_retired)
        for method in REVERT_NOTIFICATIONS:
            hooks.on_server_notification(method, self._swallow_revert_noise)
        self.proxy.add_async_control("sidecar/compact", self._control_compact)
        self.proxy.add_async_control("sidecar/inspect", self._control_inspect)
        self.proxy.add_status_provider("lifecycle", self.status)

    async def dispose(self) -> None:
        """Give the engine its ``dispose`` (if any) when the sidecar stops cleanly.

        Best effort, under the deadline: OpenClaw usually SIGKILLs, so an
        engine must never depend on it.
        """
        dispose = optional_method(self.engine, "dispose")
        if dispose is None:
            return
        try:
            with trio.move_on_after(self.options.engine_deadline):
                await dispose()
        except Exception as exc:
            log.warning("context engine dispose failed", extra={"fields": {"engineId": self.engine_id, "error": type(exc).__name__}})
        for session in self.sessions.values():
            if session.mirror is not None:
                session.mirror.close()

    def status(self) -> dict[str, Any]:
        return {
            "engine": {"id": self.engine_id, "ownsCompaction": self.owns_compaction},
            "projectionMode": self.options.projection_mode,
            "rebuilds": self._released["rebuilds"] + sum(s.rebuilds for s in self.sessions.values()),
            "releasedThreads": self._released["threads"],
            "rebuild": self.options.rebuild,
            **(
                {
                    "backingThreads": {
                        "switched": sum(1 for a in self.backing.aliases.values() if a.retired),
                        "spares": sum(1 for a in self.backing.aliases.values() if a.spare),
                        "framesDropped": self.backing.dropped,
                    }
                }
                if self.backing is not None
                else {}
            ),
            "threads": {
                tid: {
                    "sessionFile": str(s.path),
                    "bootstrapped": s.bootstrapped,
                    "busy": not s.settled,
                    "mirrorEntries": s.mirror.entry_count if s.mirror else 0,
                    "rebuilds": s.rebuilds,
                    **s.stats,
                }
                for tid, s in sorted(self.sessions.items())
            },
        }

    # ---------------------------------------------------------- sessions

    def _on_resume(self, msg: Message) -> Decision:
        self._remember_params(msg)
        if self.backing is not None:
            self.spares.backing_resume(msg.params())
        params = self._requests.get(msg.id)
        return self.archived.on_resume(msg, params) if params else None

    def _remember_params(self, msg: Message) -> Decision:
        """thread/start and thread/resume: keep the params for the answer."""
        if self.backing is not None:
            self.backing.spare_starts = 0  # the client's own start: its notifications are its
        return self._remember_request(msg)

    def _remember_request(self, msg: Message) -> Decision:
        params = msg.params()
        if isinstance(params, dict):
            self._requests[msg.id] = params
        return None

    def _on_thread_response(self, msg: Message, pending: PendingRequest) -> Decision:
        params = self._requests.pop(pending.client_id, None) or {}
        framing_fork = pending.client_id in self._archive_forks
        self._archive_forks.discard(pending.client_id)
        result = msg.result()
        thread = result.get("thread") if isinstance(result, dict) else None
        if not isinstance(thread, dict) or not isinstance(thread.get("id"), str):
            return None  # an error response, or a shape we do not know: nothing to track
        thread_id = thread["id"]
        try:
            session = self._session(thread_id)
        except ValueError:
            log.warning("thread id unusable as a session file name; lifecycle off for it")
            return None
        session.closed = False  # opened again: a release under way keeps it
        if self.backing is not None and pending.method == "thread/start":
            alias = self.backing.remember_start(thread_id, params)
            if alias is not None:
                self.proxy.spawn(self.spares.save_alias, alias)
        session.cwd = thread.get("cwd") or params.get("cwd") or session.cwd
        session.model = (result.get("model") if isinstance(result.get("model"), str) else None) or params.get("model") or session.model
        tools = params.get("dynamicTools")
        if isinstance(tools, list):
            session.tools = frozenset(t["name"] for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str))
        if pending.method == "thread/fork":
            parent = self.sessions.get(params.get("threadId", ""))
            if parent is not None and parent.tools and not session.tools:
                session.tools = parent.tools
        if pending.method == "thread/fork" and isinstance(params.get("threadId"), str) and params["threadId"] != thread_id:
            self.archived.seed_fork(thread_id, params["threadId"], params)
        if framing_fork:
            session.framing_only = True
        self.proxy.spawn(self._open_session, session, pending.method, params, thread)
        if pending.method == "thread/resume":
            return self.archived.splice_resume(msg, result, thread, params)
        if pending.method == "thread/fork" and not params.get("excludeTurns"):
            return self.archived.splice_thread(msg, result, thread)
        return None

    def _on_client_revert(self, msg: Message) -> Decision:
        """A client's own ``thread/revert``. The client's later requests on
        the thread wait until Codex answered it and the mirror followed (a
        turn/start sent right after it must not assemble, nor be mirrored
        before, the reverted turns).

        One to a turn a rebuild took out of Codex (the client still sees it
        in its reads) cannot go to Codex as it is: Codex no longer knows the
        turn. Every turn Codex holds comes after it, so Codex reverts to its
        first turn instead, and the archive, mirror and ledger follow the
        client's request."""
        params = msg.params()
        session: ThreadSession | None = None
        if isinstance(params, dict) and isinstance(params.get("threadId"), str):
            holder = ("client-revert", msg.id)
            self.proxy.gate(params["threadId"], holder)
            self.proxy.spawn(self._expire_revert_gate, params["threadId"], holder)  # never answered
            session = self.sessions.get(params["threadId"])
            if session is not None:
                # A turn/start already queued for the slot (not gated: a turn was
                # running) must not assemble before Codex answered this revert.
                session.reverts_unanswered += 1
                session.reverts_answered = trio.Event()
                self._unanswered[msg.id] = session
        decision = self._redirect_if_archived(msg, ("beforeTurnId",), self._archive_reverts)
        if decision is None and session is not None and isinstance(params.get("beforeTurnId"), str):  # type: ignore[union-attr]
            # Before it goes: a kill after Codex carried it out but before its
            # answer is read must not leave the reverted turns in the mirror.
            with contextlib.suppress(ValueError):
                TurnArchive(archive_path(self.state_dir, session.thread_id)).begin_revert(
                    params["beforeTurnId"], sorted(self._in_flight(session))  # type: ignore[index]
                )
        return decision

    @staticmethod
    def _in_flight(session: ThreadSession) -> set[str]:
        """The thread's turns running or finalising (a revert interrupts them)."""
        turns = set(session.turns)
        if session.current is not None and session.current.turn_id is not None:
            turns.add(session.current.turn_id)
        return turns

    def _on_client_fork(self, msg: Message) -> Decision:
        if self.backing is not None:
            self.backing.spare_starts = 0
        return self._on_client_fork_archived(msg)

    def _on_client_fork_archived(self, msg: Message) -> Decision:
        """A fork through (``lastTurnId``) or before (``beforeTurnId``) a turn
        a rebuild took out of Codex: Codex forks its framing (before its
        first turn); the fork's mirror and archive are cut at the client's
        turn, and its ledger says Codex holds nothing, so its first turn
        projects the engine's assembly."""
        return self._redirect_if_archived(msg, ("lastTurnId", "beforeTurnId"), self._archive_forks)

    def _redirect_if_archived(self, msg: Message, keys: tuple[str, ...], flagged: set[Any]) -> Decision:
        self._remember_params(msg)
        params = self._requests.get(msg.id) or {}
        thread_id = params.get("threadId")
        cut = next((params[k] for k in keys if isinstance(params.get(k), str)), None)
        if not isinstance(thread_id, str) or cut is None:
            return None
        if not any(t.get("id") == cut for t in self.archived.hidden_for(thread_id)):
            return None
        self.proxy.gate(thread_id, id(msg))  # the client's later requests stay behind it
        self.proxy.spawn(self._into_archive, msg, thread_id, flagged)
        return HANDLED

    async def _into_archive(self, msg: Message, thread_id: str, flagged: set[Any]) -> None:
        """Send a client's revert or fork that names an archived turn to
        Codex as the same request before Codex's first turn."""
        line = msg.line
        try:
            try:
                first = await self._first_codex_turn(thread_id, self.sessions.get(thread_id))
            except (RpcError, trio.TooSlowError) as exc:
                first = None
                log.warning("cannot list the thread's turns for a request into archived turns", extra={"fields": {"threadId": thread_id, "error": type(exc).__name__}})
            if isinstance(first, str):
                params = {k: v for k, v in msg.params().items() if k != "lastTurnId"}
                line = rewrite(msg.line, params={**params, "beforeTurnId": first})
                flagged.add(msg.id)
            # else: Codex holds no turn (or did not say): the request goes as
            # it is, and Codex's answer (turn not found) reaches the client.
            self.proxy.forward_client_request(Message(parse(line), line))
        finally:
            self.proxy.ungate(thread_id, id(msg))

    def _on_client_revert_response(self, msg: Message, pending: PendingRequest) -> Decision:
        """The client reverted its thread itself: the turns it dropped must
        not come back in its reads, whatever the sidecar rebuilds later."""
        self._revert_answered(pending.client_id)
        params = self._requests.pop(pending.client_id, None) or {}
        into_archive = pending.client_id in self._archive_reverts
        self._archive_reverts.discard(pending.client_id)
        thread_id, before = params.get("threadId"), params.get("beforeTurnId")
        holder = ("client-revert", pending.client_id)
        if msg.result() is None or not isinstance(thread_id, str) or not isinstance(before, str):
            if isinstance(thread_id, str):
                self.proxy.ungate(thread_id, holder)  # refused: nothing to follow
                if isinstance(before, str) and not into_archive:
                    with contextlib.suppress(ValueError):
                        TurnArchive(archive_path(self.state_dir, thread_id)).revert_refused(before)
            return None
        try:
            archive = TurnArchive(archive_path(self.state_dir, thread_id))
        except ValueError:
            self.proxy.ungate(thread_id, holder)
            return None
        # Codex has reverted. The intent goes to disk before the client hears
        # of it (one small append, here on the loop as the inspect record is),
        # so a kill before the mirror follows leaves the work to the next
        # opening of the thread: the reverted turns must never come back.
        session = self.sessions.get(thread_id)
        in_flight = self._in_flight(session) if session is not None else set()
        archive.begin_forget(before, into_archive, sorted(in_flight))  # best effort, as every archive write
        wrapped = None
        if session is not None and isinstance(msg.result(), dict):
            # Before the turns go from the archive's list: the cursors name
            # the newest turn and item the client keeps.
            wrapped = self.archived.wrap_revert_cursors(thread_id, before, session.live_turns, session.last_items, msg.result())
        if session is not None:
            # Set now: a turn/start already queued for the slot follows it first.
            session.unfollowed = _Unfollowed(before, into_archive, frozenset(in_flight), holder)
        self.proxy.spawn(self._forget_turns, thread_id, archive, before, holder)
        return None if wrapped is None else rewrite(msg.line, result=wrapped)

    async def _expire_revert_gate(self, thread_id: str, holder: Any) -> None:
        """The client's requests never wait longer than a turn/start would,
        nor do later turns wait for an answer that never came."""
        await trio.sleep(self.options.previous_turn_wait)
        self.proxy.ungate(thread_id, holder)
        self._revert_answered(holder[1])

    def _revert_answered(self, client_id: Any) -> None:
        """A client revert was answered (or given up on): turns stop waiting for it."""
        session = self._unanswered.pop(client_id, None)
        if session is not None:
            session.reverts_unanswered = max(0, session.reverts_unanswered - 1)
            if not session.reverts_unanswered:
                session.reverts_answered.set()

    async def _forget_turns(self, thread_id: str, archive: TurnArchive, before: str, holder: Any) -> None:
        acquired: ThreadSession | None = None
        try:
            session = self.sessions.get(thread_id)
            if session is None:
                await trio.to_thread.run_sync(archive.forget_from, before)
                self.archived.forget(thread_id)
                return  # the mirror follows when the thread is next opened
            # After the turn Codex interrupted for the revert (if any) is
            # finalised; the client's next turn/start waits at the gate.
            with trio.move_on_after(self.options.previous_turn_wait):
                await session.ready.wait()
                await session.slot.acquire()
                acquired = session
            if acquired is None:
                # That turn never ended (lost turn/completed): follow anyway, as
                # a turn/start takes over the slot, so the client is not stuck.
                log.warning("a turn never finished; following the client's revert anyway", extra={"fields": {"threadId": thread_id}})
            pending = session.unfollowed
            if pending is not None and pending.holder == holder:  # else a turn followed it first
                await self._follow_client_revert(session, archive, pending)
        finally:
            self.proxy.ungate(thread_id, holder)
            if acquired is not None:
                acquired.slot.release()

    async def _follow_client_revert(self, session: ThreadSession, archive: TurnArchive, pending: _Unfollowed) -> None:
        """Archive, mirror and ledger forget the turns from ``before`` on. No
        turn of the thread may be assembled or mirrored meanwhile: the caller
        holds the turn slot (or took it over), or the session is opening and
        not ready yet."""
        thread_id, before, into_archive = session.thread_id, pending.before, pending.into_archive
        gone = await trio.to_thread.run_sync(archive.forget_from, before)
        self.archived.forget(thread_id)
        await self.archived.load(thread_id)
        if session.live_turns is not None:
            session.live_turns = [t for t in session.live_turns if t not in gone]
        followed = True
        if session.mirror is not None:
            # The engine's history loses the reverted turns as Codex's did.
            try:
                await trio.to_thread.run_sync(
                    lambda: session.mirror.rewind(
                        turn_key_prefix(thread_id, before),
                        f"{turn_key_prefix(thread_id, before)}client-revert",
                        REVERT_CUSTOM_TYPE,
                        {"beforeTurnId": before},
                        turn_id=before,  # a fork's inherited turns keep their parent's keys
                    )
                )
            except (MirrorError, OSError) as exc:
                followed = False  # the intent stays: the next turn (or opening) tries again
                log.warning("transcript mirror could not follow the client's revert", extra={"fields": self._fields(session, error=type(exc).__name__)})
        if not into_archive:
            since = session.turns_since_rebuild
            session.turns_since_rebuild = since[: since.index(before)] if since is not None and before in since else None
        if into_archive or session.turns_since_rebuild == []:
            # Codex is back at its framing (the rebuild's own turn was reverted,
            # or the revert went before Codex's first turn): it holds nothing,
            # no epoch either, and the next turn projects the whole assembly.
            session.held, session.turns_since_rebuild, session.projected_epoch = [], [], None
            if into_archive:
                session.live_turns = []
        elif session.rebuilds or session.force_rebuild or session.projected_epoch is not None:
            # Codex holds a projection plus turns since, so the mirror's history
            # is not what it holds; what it holds is the ledger as it stood
            # after the last turn kept, which that turn's inspect record has.
            kept = session.turns_since_rebuild[-1] if session.turns_since_rebuild else None
            ledger = await self._ledger_after(session, kept) if kept is not None else None
            if ledger is not None:
                session.held, session.projected_epoch, session.force_rebuild = ledger
                session.addition_sent = None  # it may have come in a reverted turn: send it again
            else:  # not known: project the assembly afresh (exact, at a revert's cost)
                session.held, session.force_rebuild = None, True
        else:
            # Never rebuilt: Codex holds the mirror's turns, worked out afresh
            # from it (a later mismatch with the assembly rebuilds).
            session.held = None
        if session.inspect is not None:
            # The ledger a restart restores (the last record, a marker included).
            marker = {
                "clientRevert": before,
                "held": session.held,
                "turnsSinceRebuild": session.turns_since_rebuild,
                "rebuilds": session.rebuilds,
                "projectedEpoch": session.projected_epoch,
                "forceRebuild": session.force_rebuild,
            }
            await trio.to_thread.run_sync(session.inspect.append, marker)
        if session.unfollowed is pending:
            session.unfollowed = None if followed else pending
        elif not followed and session.unfollowed is None:
            session.unfollowed = pending  # (a restart's pending intent) the next turn retries
        self.proxy.ungate(thread_id, pending.holder)  # followed, or the next turn retries
        if followed and session.mirror is not None:
            await trio.to_thread.run_sync(archive.end_forget, before)
        log.info("client reverted its thread; mirror and ledger follow", extra={"fields": self._fields(session, turnsForgotten=len(gone))})

    async def _ledger_after(self, session: ThreadSession, turn_id: str) -> tuple[list[str], Any, bool] | None:
        """(held, projectedEpoch, forceRebuild) as the inspect log recorded them
        after ``turn_id``; None when no full record of it is there."""
        if session.inspect is None:
            return None
        records = await trio.to_thread.run_sync(session.inspect.records)
        record = next((r for r in reversed(records) if r.get("turnId") == turn_id), None)
        if record is None or not isinstance(record.get("held"), list) or "forceRebuild" not in record:
            return None
        return list(record["held"]), record.get("projectedEpoch"), bool(record["forceRebuild"])

    def _session(self, thread_id: str) -> ThreadSession:
        session = self.sessions.get(thread_id)
        if session is None:
            key = self.options.session_key_template.format(thread_id=thread_id)
            session = ThreadSession(thread_id, key, session_path(self.state_dir, thread_id))
            self.sessions[thread_id] = session
        return session

    def _on_thread_closed(self, msg: Message) -> Decision:
        """Codex unloaded a thread (after ``thread/unsubscribe`` and its unload
        delay): release the session's open mirror and in-memory state, so a
        long-running sidecar holds what Codex holds and no more. The client
        gets the notification unchanged; a ``thread/resume`` opens the session
        again from disk, as after a restart."""
        params = msg.params()
        thread_id = params.get("threadId") if isinstance(params, dict) else None
        session = self.sessions.get(thread_id) if isinstance(thread_id, str) else None
        if session is not None:
            session.closed = True
            self.proxy.spawn(self._release_session, session)
        return None

    async def _release_session(self, session: ThreadSession) -> None:
        await session.ready.wait()
        while True:
            for written in list(session.marking):
                await written.wait()
            async with session.slot:  # after the last turn's finalisation
                if not session.marking:
                    await self._release_now(session)
                    return

    async def _release_now(self, session: ThreadSession) -> None:
        """The session, idle (its turn slot held): release it if Codex really
        unloaded the thread and nothing reopened it meanwhile."""
        if not self._releasable(session) or not await self._unloaded(session.thread_id):
            return
        if not self._releasable(session):  # opened again while Codex was asked
            return
        del self.sessions[session.thread_id]
        self.spares.drop_spare(session.thread_id)
        self._released["threads"] += 1
        self._released["rebuilds"] += session.rebuilds
        self.archived.forget(session.thread_id)
        if session.mirror is not None:
            session.mirror.close()
        log.info("thread closed by codex; session released", extra={"fields": self._fields(session)})

    def _releasable(self, session: ThreadSession) -> bool:
        """Closed, still this thread's session, and nothing of it under way."""
        return (
            session.closed
            and self.sessions.get(session.thread_id) is session
            and not session.turns
            and session.current is None
            and session.unfollowed is None
            and session.reverts_unanswered == 0
            and not session.marking
            and session.thread_id not in self._reverting
            and session.slot.statistics().tasks_waiting == 0
            and not any(s is session for s, _ in self._native_pending.values())
        )

    async def _unloaded(self, thread_id: str) -> bool:
        """Codex's ``thread/loaded/list`` does not name the thread (a
        ``thread/closed`` is taken at its word only once Codex confirms it)."""
        cursor = None
        try:
            for _ in range(LOADED_LIST_PAGES):
                page = await self.proxy.request("thread/loaded/list", {"cursor": cursor} if cursor else {}, timeout=self.options.engine_deadline)
                data = page.get("data") if isinstance(page, dict) else None
                if not isinstance(data, list) or thread_id in data:
                    return False
                cursor = page.get("nextCursor")
                if not cursor:
                    return True
        except Exception as exc:  # an error answer, a timeout, a child gone
            log.info("thread/loaded/list failed; session kept", extra={"fields": {"threadId": thread_id, "error": type(exc).__name__}})
        return False

    async def _open_session(self, session: ThreadSession, method: str, params: dict[str, Any], thread: dict[str, Any]) -> None:
        """Open (fork, import) the mirror; a turn/start waits for this."""
        opened = False
        try:
            if session.mirror is None:
                parent_id = params.get("threadId") if method == "thread/fork" else None
                forked = bool(parent_id and parent_id != session.thread_id)
                if forked:
                    # The archive first: the fork's mirror existing is what says
                    # the fork was opened (a kill in between must not leave a
                    # mirror without the archived turns the fork inherits).
                    session.mirror = await trio.to_thread.run_sync(self._fork_archive_then_mirror, parent_id, session, params)
                else:
                    session.mirror = await trio.to_thread.run_sync(
                        lambda: TranscriptMirror.open(session.path, session.thread_id, session.cwd)
                    )
                opened = True
                # A fork's copy of its parent's mirror is its history (keyed by
                # the parent's ids: importing Codex's copy too would store it twice).
                session.had_history = (session.mirror.existed_before or forked) and bool(
                    await trio.to_thread.run_sync(session.mirror.messages)
                )
            await self.archived.load(session.thread_id)
            if session.inspect is None:
                session.inspect = InspectLog(inspect_path(self.state_dir, session.thread_id))
                last = await trio.to_thread.run_sync(session.inspect.last)
                if last:
                    session.projected_epoch = last.get("projectedEpoch")
                    session.held = last.get("held")
                    session.turns_since_rebuild = last.get("turnsSinceRebuild")
                    session.rebuilds = int(last.get("rebuilds") or 0)
                    session.force_rebuild = bool(last.get("forceRebuild"))
                    if last.get("rebuilding"):
                        # Killed between a revert and the turn that carried the
                        # projection: the thread may hold only its framing.
                        session.held, session.force_rebuild = [], True
            if opened and session.mirror is not None:
                # First opening in this process (within it, a failed follow is
                # retried by the next turn instead, holding the turn slot).
                archive = TurnArchive(archive_path(self.state_dir, session.thread_id))
                pending = await trio.to_thread.run_sync(archive.pending_forget)
                if pending is not None:
                    # Killed after Codex reverted for the client, before the
                    # mirror followed: follow it now, before any turn assembles.
                    log.warning("following a client revert a restart interrupted", extra={"fields": {"threadId": session.thread_id}})
                    before, into_archive = pending
                    await self._follow_client_revert(session, archive, _Unfollowed(before, into_archive, frozenset(), None))
                await self._settle_unanswered_revert(session, archive)
            if self.backing is not None and session.thread_id in self.backing.rolled_back:
                # Back from a switch Codex never accepted: what the thread holds is not known.
                self.backing.rolled_back.discard(session.thread_id)
                session.held, session.force_rebuild, session.turns_since_rebuild = None, True, None
            if session.framing_only:
                # A fork of Codex's framing (the client forked at an archived turn).
                session.held, session.turns_since_rebuild, session.live_turns = [], [], []
            # Import only when the session is first seen: a thread started or
            # imported earlier in this run is mirrored turn by turn already, and
            # importing it again would bootstrap an engine that saw every turn.
            if opened and method in ("thread/resume", "thread/fork") and not session.had_history:
                await self._import_history(session, thread)
            elif opened and method == "thread/resume":
                await self._catch_up(session, thread)
        except (MirrorError, OSError) as exc:
            log.warning(
                "transcript mirror unavailable; turns of this thread pass through",
                extra={"fields": {"threadId": session.thread_id, "error": type(exc).__name__}},
            )
            session.mirror = None
        finally:
            session.ready.set()

    async def _settle_unanswered_revert(self, session: ThreadSession, archive: TurnArchive) -> None:
        """Killed after a client revert went to Codex, before its answer was
        read: Codex's turns, newest first, tell whether it was carried out (a
        turn the archive has before the reverted one comes first) or not (the
        reverted turn itself is still there)."""
        sent = await trio.to_thread.run_sync(archive.pending_revert)
        if sent is None:
            return
        before, in_flight = sent
        order = await trio.to_thread.run_sync(archive.turn_order)
        if before not in order:
            return  # nothing to judge by; asked again at the next opening
        earlier = set(order[: order.index(before)])
        done: bool | None = None
        cursor: Any = None
        try:
            # Newest first: the reverted turn itself (not carried out) or a
            # turn the archive has before it (carried out) settles it; turns
            # the archive never saw (run without this state) are passed over.
            for _ in range(SETTLE_PAGES):
                listed = await self.proxy.request(
                    "thread/turns/list",
                    {"threadId": session.thread_id, "sortDirection": "desc", "limit": 20, "cursor": cursor},
                    timeout=self.options.engine_deadline,
                )
                data = listed.get("data") if isinstance(listed, dict) else None
                for turn in data if isinstance(data, list) else []:
                    tid = turn.get("id") if isinstance(turn, dict) else None
                    if tid == before:
                        done = False
                    elif tid in earlier:
                        done = True
                    if done is not None:
                        break
                cursor = listed.get("nextCursor") if isinstance(listed, dict) else None
                if done is not None or not cursor:
                    break
        except (RpcError, trio.TooSlowError) as exc:
            log.warning("cannot ask Codex whether an interrupted client revert happened", extra={"fields": {"threadId": session.thread_id, "error": type(exc).__name__}})
            return  # asked again at the next opening
        if done is None:
            done = not cursor  # the whole list, and the turn is not in it
        if not done:
            await trio.to_thread.run_sync(archive.revert_refused, before)
            return
        log.warning("following a client revert Codex carried out before a restart", extra={"fields": {"threadId": session.thread_id}})
        await trio.to_thread.run_sync(archive.begin_forget, before, False, in_flight)
        await self._follow_client_revert(session, archive, _Unfollowed(before, False, frozenset(in_flight), None))

    def _fork_mirror(self, parent_id: str, session: ThreadSession, params: dict[str, Any]) -> TranscriptMirror:
        parent_path = session_path(self.state_dir, parent_id)
        before, last = params.get("beforeTurnId"), params.get("lastTurnId")
        stop = None
        if isinstance(before, str):
            # By turn id: the parent may itself be a fork, whose inherited
            # turns keep their own parent's keys.
            stop = lambda key: key_turn_id(key) == before  # noqa: E731
        elif isinstance(last, str):
            stop = _after_turn(last)
        return TranscriptMirror.fork(parent_path, session.path, session.thread_id, cwd=session.cwd, stop_before=stop)

    def _fork_archive_then_mirror(self, parent_id: str, session: ThreadSession, params: dict[str, Any]) -> TranscriptMirror:
        self._fork_archive(parent_id, session, params)
        return self._fork_mirror(parent_id, session, params)

    def _fork_archive(self, parent_id: str, session: ThreadSession, params: dict[str, Any]) -> None:
        before, last = params.get("beforeTurnId"), params.get("lastTurnId")
        TurnArchive(archive_path(self.state_dir, session.thread_id)).copy_from(
            TurnArchive(archive_path(self.state_dir, parent_id)),
            before=before if isinstance(before, str) else None,
            last=last if isinstance(last, str) else None,
        )

    async def _catch_up(self, session: ThreadSession, thread: dict[str, Any]) -> None:
        """A resumed thread whose mirror exists: mirror (and archive) the turns
        Codex holds that the mirror lacks. A kill between forwarding a
        turn/completed and writing the turn leaves one; so does a turn run
        on this thread without the sidecar. Appends are keyed by turn and
        item, so turns already mirrored add nothing."""
        if session.mirror is None:
            return
        turns = thread.get("turns")
        if not turns:
            # Resumed without its turns (excludeTurns): what a kill can leave
            # out is the last turn or two; ask Codex for its newest few.
            try:
                listed = await self.proxy.request(
                    "thread/turns/list",
                    {"threadId": session.thread_id, "sortDirection": "desc", "limit": CATCH_UP_TURNS, "itemsView": "full"},
                    timeout=self.options.engine_deadline,
                )
            except (RpcError, trio.TooSlowError) as exc:
                log.warning("could not list the thread's latest turns to check the mirror", extra={"fields": {"threadId": session.thread_id, "error": type(exc).__name__}})
                return
            turns = list(reversed(listed.get("data") or [])) if isinstance(listed, dict) else []
        turns = [t for t in turns if isinstance(t, dict) and isinstance(t.get("id"), str)]
        if not turns:
            return
        now = _now_ms()
        per_turn = [
            (turn, translate_turn(turn.get("items") or [], thread_id=session.thread_id, turn_id=turn["id"], timestamp=now, turn_status=turn.get("status")))
            for turn in turns
        ]
        archive = TurnArchive(archive_path(self.state_dir, session.thread_id))
        added = await trio.to_thread.run_sync(_catch_up_turns, session.thread_id, archive, per_turn, session.mirror)
        if added:
            # Codex holds these turns natively, as finalisation would have recorded.
            records = {t["id"]: r for t, r in per_turn}
            if session.held is not None:
                for tid in added:
                    fps = self._fingerprints(session, messages_of(records[tid]))
                    if fps and session.held[-len(fps) :] != fps:  # not recorded already (a write that failed)
                        session.held = session.held + fps
            if session.turns_since_rebuild is not None:
                session.turns_since_rebuild = [*session.turns_since_rebuild, *added]
            if session.live_turns is not None:
                session.live_turns.extend(added)
            log.warning(
                "mirrored turns the transcript lacked (killed before writing them, or run without the sidecar)",
                extra={"fields": {"threadId": session.thread_id, "turns": len(added)}},
            )

    async def _import_history(self, session: ThreadSession, thread: dict[str, Any]) -> None:
        """A resumed thread with no mirror: import its turns from the app-server once."""
        turns = thread.get("turns")
        if not isinstance(turns, list) or not turns:
            try:
                result = await self.proxy.request(
                    "thread/read", {"threadId": session.thread_id, "includeTurns": True}, timeout=self.options.engine_deadline
                )
                turns = (result.get("thread") or {}).get("turns") if isinstance(result, dict) else None
            except (RpcError, trio.TooSlowError) as exc:
                log.warning("could not import thread history", extra={"fields": {"threadId": session.thread_id, "error": type(exc).__name__}})
                return
        if not isinstance(turns, list):
            return
        now = _now_ms()
        records = []
        for turn in turns:
            if isinstance(turn, dict) and isinstance(turn.get("id"), str):
                records.extend(
                    translate_turn(turn.get("items") or [], thread_id=session.thread_id, turn_id=turn["id"], timestamp=now, turn_status=turn.get("status"))
                )
        assert session.mirror is not None
        # Archived too, so the reads keep showing them after a rebuild drops them.
        archive = TurnArchive(archive_path(self.state_dir, session.thread_id))
        known = [t for t in turns if isinstance(t, dict) and isinstance(t.get("id"), str)]
        added = await trio.to_thread.run_sync(_archive_many_then_append, archive, known, session.mirror, records)
        session.had_history = session.had_history or bool(messages_of(records))
        log.info("imported thread history into the mirror", extra={"fields": {"threadId": session.thread_id, "entries": added}})

    # ------------------------------------------------------------ turn start

    def _on_turn_start(self, msg: Message) -> Decision:
        params = msg.params()
        if not isinstance(params, dict) or not isinstance(params.get("threadId"), str):
            return None
        if self.backing is not None:
            self.spares.remember_sticky(params)
        session = self.sessions.get(params["threadId"])
        if session is None:
            try:
                session = self._session(params["threadId"])
            except ValueError:
                return None
            self.proxy.spawn(self._open_session, session, "turn/start", {}, {})
        # While this turn/start is held, the client's later requests on the
        # thread (turn/interrupt, thread/revert, thread/read, ...) wait behind
        # it. From now when the thread is idle; after the running turn ends
        # otherwise, so that an interrupt of that turn is not stuck behind this.
        current = session.current
        if not session.busy or (current is not None and current.turn_id in session.completed_turns):
            self.proxy.gate(session.thread_id, id(msg))  # idle, or only finalising the last turn
        self.proxy.spawn(self._prepare_turn, session, msg, params)
        return HANDLED

    async def _prepare_turn(self, session: ThreadSession, msg: Message, params: dict[str, Any]) -> None:
        try:
            await self._hold_turn_start(session, msg, params)
        finally:
            self.proxy.ungate(session.thread_id, id(msg))

    async def _hold_turn_start(self, session: ThreadSession, msg: Message, params: dict[str, Any]) -> None:
        line = msg.line
        state = TurnState(client_id=msg.id, original_input=params.get("input") if isinstance(params.get("input"), list) else None)
        await session.ready.wait()
        with trio.move_on_after(self.options.previous_turn_wait) as waited:
            await session.slot.acquire()
        if waited.cancelled_caught:
            # The previous turn never finished (lost turn/completed): take over its slot.
            log.warning("previous turn never finished; starting the next one anyway", extra={"fields": {"threadId": session.thread_id}})
        session.current = state
        started = trio.current_time()
        self.proxy.gate(session.thread_id, id(msg))
        try:
            if session.reverts_unanswered:
                with trio.move_on_after(self.options.previous_turn_wait):
                    await session.reverts_answered.wait()
            if session.unfollowed is not None:
                # A client revert not followed yet (this turn/start was queued
                # before it, or the mirror failed to follow): before this turn
                # assembles, and is mirrored after the reverted turns.
                await self._follow_client_revert(session, TurnArchive(archive_path(self.state_dir, session.thread_id)), session.unfollowed)
            line = await self._assemble_and_project(session, state, params, msg.line)
            if state.switched:
                line = self.spares.with_sticky(session, line)
        except Exception as exc:  # fail open, whatever happened
            state.fallback_reason = type(exc).__name__
            log.warning(
                "context engine assembly failed; forwarding the original request",
                extra={"fields": self._fields(session, error=type(exc).__name__)},
                exc_info=True,
            )
            line = msg.line
        state.hold_ms = round((trio.current_time() - started) * 1000, 2)
        log.debug("turn/start released", extra={"fields": self._fields(session, holdMs=state.hold_ms, waitedMs=round((started - state.received) * 1000, 2))})
        session.stats["lastTurn"] = {
            "holdMs": state.hold_ms,
            "projected": state.projected,
            "assembledMessageCount": state.assembled_count,
            "estimatedTokens": state.estimated_tokens,
            "fallback": state.fallback_reason,
        }
        if not self.proxy.forward_client_request(Message(parse(line), line)):
            self._end_turn(session, state)

    async def _assemble_and_project(self, session: ThreadSession, state: TurnState, params: dict[str, Any], line: bytes) -> bytes:
        items = state.original_input or []
        if session.mirror is None:
            state.fallback_reason = "no-mirror"
            return line
        history = session.mirror.cached_messages()  # the file as the last turn left it: no worker thread
        if history is None:
            history = await trio.to_thread.run_sync(session.mirror.messages)
        state.history = history
        state.pre_prompt_count = len(history)
        if already_projected(items):
            state.fallback_reason = "already-projected"
            if not session.warned_double_projection:
                session.warned_double_projection = True
                log.warning(
                    "turn input already carries OpenClaw assembled context; not projecting again "
                    "(set OpenClaw's context engine to legacy when using the sidecar)",
                    extra={"fields": self._fields(session)},
                )
            return line
        if session.had_history and not session.bootstrapped:
            await self._bootstrap(session)
        runtime = self._runtime(session, params)
        budget = self._budget(session)
        prompt = "\n".join(i["text"] for i in items if isinstance(i, dict) and i.get("type") == "text" and isinstance(i.get("text"), str))
        try:
            result = await self._call(
                "assemble",
                self.engine.assemble(
                    AssembleParams(
                        session_id=session.thread_id,
                        session_key=session.session_key,
                        messages=history,
                        token_budget=budget,
                        available_tools=session.tools,
                        citations_mode=self.options.citations_mode,
                        model=params.get("model") if isinstance(params.get("model"), str) else session.model,
                        prompt=prompt,
                        runtime_context=runtime,
                    )
                ),
            )
        except trio.TooSlowError:
            state.fallback_reason = "assemble-deadline"
            log.warning("context engine assemble exceeded its deadline; forwarding the original request", extra={"fields": self._fields(session)})
            return line
        except Exception as exc:
            state.fallback_reason = "assemble-error"
            log.warning(
                "context engine assemble failed; forwarding the original request",
                extra={"fields": self._fields(session, error=type(exc).__name__)},
                exc_info=True,
            )
            return line
        state.assembled_count = len(result.messages)
        state.estimated_tokens = result.estimated_tokens
        state.assembled_roles = [[m.role, _message_chars(m)] for m in result.messages]
        mode, epoch = self._mode_for(result)
        state.mode, state.epoch = mode, epoch
        messages = result.messages
        placement = "input"
        if mode in ("delta", "epoch"):
            planned = await self._plan_rebuild_or_delta(session, state, result, history, mode, epoch)
            if planned is None:
                return line
            messages, placement = planned, "additional_context"
            if state.rebuilt:
                session.addition_sent = None  # the revert took the turn that carried it
        else:
            session.force_rebuild = True  # a per-turn projection sits in history untracked
        addition = result.system_prompt_addition or None
        if addition is not None and addition.strip() == (session.addition_sent or "").strip():
            addition = None  # already in the thread's history, unchanged
        try:
            projection = project_turn_input(
                messages,
                items,
                system_prompt_addition=addition,
                # per_turn trims to the budget as the spec says; delta and epoch
                # send the engine's assembly whole (the engine applied the
                # budget), or the ledger would claim messages the model never saw.
                char_budget=char_budget_for_tokens(budget) if placement == "input" else None,
                placement=placement,
            )
        except ProjectionError as exc:
            if state.rebuilt:
                state.held_plan = []  # reverted, and nothing projected after all
            state.fallback_reason = f"projection-{exc.reason}"
            log.warning("projection failed; forwarding the original request", extra={"fields": self._fields(session, reason=exc.reason)})
            return line
        state.rendered, state.dropped = projection.messages_rendered, projection.messages_dropped
        state.context_chars = len(projection.text or "")
        state.original_chars = input_text_chars(items)
        # What this turn adds to the model's input, wherever it travels: the
        # input text, plus the context block and addition in additionalContext.
        state.sent_chars = projection.input_text_chars + len(addition or "")
        if placement == "additional_context":
            state.sent_chars += len(projection.text or "")
        log.info(
            "codex context engine assemble applied",
            extra={
                "fields": self._fields(
                    session,
                    assembledMessageCount=len(result.messages),
                    estimatedTokens=result.estimated_tokens,
                    hasSystemPromptAddition=bool(result.system_prompt_addition),
                    renderedMessages=projection.messages_rendered,
                    droppedMessages=projection.messages_dropped,
                )
            },
        )
        if not projection.changed:
            return line
        state.projected = True
        if projection.text:
            state.channels.append("turn/start.input" if placement == "input" else "turn/start.additionalContext[openclaw_context]")
        if addition is not None:
            state.channels.append("turn/start.additionalContext[openclaw_system_prompt_addition]")
            state.addition_pending = result.system_prompt_addition  # held once Codex accepts the turn
        return rewrite(line, params=projection.apply(params))

    def _mode_for(self, result: Any) -> tuple[str, str | None]:
        """The projection mode for this turn, and the engine's epoch."""
        cp = result.context_projection
        epoch = cp.epoch if cp is not None else None
        mode = self.options.projection_mode
        if mode == "auto":
            if cp is not None and cp.mode == "thread_bootstrap":
                mode = "epoch"
            elif cp is not None and cp.mode == "per_turn":
                mode = "per_turn"
            else:
                mode = "delta"
        if mode == "epoch" and epoch is None:
            mode = "delta"  # no epoch to follow: project what the thread lacks
        return mode, epoch

    async def _plan_rebuild_or_delta(
        self, session: ThreadSession, state: TurnState, result: Any, history: list[AgentMessage], mode: str, epoch: str | None
    ) -> list[AgentMessage] | None:
        """What to project so that the model sees the engine's assembly.

        The ledger (``session.held``) says which mirrored messages the Codex
        thread holds. delta: when the assembly extends it, project only the
        new tail; when it drops or replaces held content, rebuild: revert the
        thread in place to its framing and project the whole assembly in the
        turn's additionalContext. epoch: rebuild when the epoch changes,
        project nothing within an epoch. Returns None to forward the
        original request (no rebuild possible).
        """
        fps = self._fingerprints(session, result.messages)
        held = session.held if session.held is not None else self._fingerprints(session, history)
        if result.context_projection is not None and getattr(result.context_projection, "epoch", None) is not None:
            self.spares.engine_rebuilds = True  # it manages projection epochs: rebuilds will come
        if mode == "epoch":
            rebuild = session.force_rebuild or epoch != session.projected_epoch
            if not rebuild:
                state.held_plan = held
                return []
        else:
            wanted = set(fps)
            kept = [f for f in held if f in wanted]
            stale = [f for f in held if f not in wanted]
            rebuild = (
                session.force_rebuild
                or fps[: len(kept)] != kept
                or not self._within_slack(session, stale, held, result, fps)
            )
            if not rebuild:
                # The thread holds the assembly's head (plus a little the
                # engine dropped): send only the tail it lacks.
                state.held_plan = held + fps[len(kept) :]
                state.stale = len(stale)
                if stale:
                    self.spares.engine_rebuilds = True  # it drops content: a rebuild will come
                return result.messages[len(kept) :]
        if not history and not session.turns_since_rebuild and not fps:
            state.held_plan = []
            if mode == "epoch":
                # The epoch's assembly is empty and so is the thread: it holds
                # this epoch already (else the next turn would revert for nothing).
                state.epoch_pending = epoch
            return []
        if not await self._revert_to_framing(session):
            state.fallback_reason = "rebuild-unavailable"
            return None
        state.rebuilt = True
        state.held_plan = fps
        session.rebuilds += 1
        self.spares.engine_rebuilds = True
        session.force_rebuild = False
        if mode == "epoch":
            state.epoch_pending = epoch  # the thread holds it once Codex accepts the turn
        log.info("model-visible history rebuilt", extra={"fields": self._fields(session, mode=mode, rebuilds=session.rebuilds, assembledMessageCount=len(fps))})
        return result.messages

    def _fingerprints(self, session: ThreadSession, messages: list[AgentMessage]) -> list[str]:
        out = []
        for m in messages:
            f = fingerprint(m)
            session.sizes.setdefault(f, _message_chars(m))
            out.append(f)
        return out

    def _assembled_tokens(self, session: ThreadSession, result: Any, fps: list[str]) -> int:
        """The assembly's size in tokens: the engine's own estimate, or its
        characters over :data:`CHARS_PER_TOKEN` when the estimate is no use."""
        estimate = result.estimated_tokens
        if isinstance(estimate, int) and not isinstance(estimate, bool) and estimate > 0:
            return estimate
        return -(-sum(session.sizes.get(f, 0) for f in fps) // CHARS_PER_TOKEN)

    def _within_slack(self, session: ThreadSession, stale: list[str], held: list[str], result: Any, fps: list[str]) -> bool:
        """Whether content the engine dropped (``stale``) may stay in the
        thread instead of a rebuild: it is a small share of what the thread
        holds (or under the floor), and the assembly plus it still fits the
        token budget the engine assembled for (the slack never makes the
        model see more than the engine was allowed)."""
        if not stale:
            return True
        if self.options.stale_slack == 0:
            return False  # exact: rebuild on any drop (the floor does not apply)
        if any(f not in session.sizes for f in stale):
            return False  # sizes unknown (e.g. after a restart): rebuild to be exact
        stale_chars = sum(session.sizes[f] for f in stale)
        budget = self._budget(session)
        if budget is not None and budget > 0 and self._assembled_tokens(session, result, fps) + -(-stale_chars // CHARS_PER_TOKEN) > budget:
            return False
        held_chars = sum(session.sizes.get(f, 0) for f in held)
        return stale_chars <= max(self.options.stale_slack * held_chars, self.options.stale_floor_chars)

    async def _revert_to_framing(self, session: ThreadSession) -> bool:
        """Drop every turn of the Codex thread in place (same id, same cache key).

        Codex's own notifications about the revert are swallowed: the client
        did not ask for it. Never called with a turn in progress (the caller
        holds the thread's turn slot).
        """
        if session.revert_unsupported:
            return False
        try:
            first = await self._first_codex_turn(session.thread_id, session)
        except (RpcError, trio.TooSlowError) as exc:
            log.warning("cannot list the thread's turns for a rebuild", extra={"fields": self._fields(session, error=type(exc).__name__)})
            return False
        if first is None:
            session.turns_since_rebuild = []
            return True  # nothing but framing yet
        # Persist before reverting: a SIGKILL between the revert and the
        # turn/start that carries the projection must not leave a ledger
        # claiming history the thread no longer holds, nor lose which turns
        # the client's reads must still show (a turn marked dropped that Codex
        # still has is not shown twice: reads splice only the missing ones).
        archive = TurnArchive(archive_path(self.state_dir, session.thread_id))
        self.archived.reverting.add(session.thread_id)
        try:
            return await self._revert_marked(session, archive, first)
        finally:
            self.archived.reverting.discard(session.thread_id)

    async def _first_codex_turn(self, thread_id: str, session: ThreadSession | None) -> str | None:
        """The first turn the Codex thread holds: the ledger's when it knows,
        else Codex's answer (None: no turn). Raises RpcError or TooSlowError."""
        if session is not None and session.turns_since_rebuild is not None:
            if session.turns_since_rebuild:
                return session.turns_since_rebuild[0]
            current = session.current
            if current is not None and current.turn_id is not None:
                return current.turn_id  # the rebuild's own turn, running or finalising
            return None
        listed = await self.proxy.request(
            "thread/turns/list", {"threadId": thread_id, "sortDirection": "asc", "limit": 1}, timeout=self.options.engine_deadline
        )
        data = (listed.get("data") or listed.get("turns")) if isinstance(listed, dict) else None
        first = data[0] if isinstance(data, list) and data else None
        return first.get("id") if isinstance(first, dict) and isinstance(first.get("id"), str) else None

    async def _revert_marked(self, session: ThreadSession, archive: TurnArchive, first: str) -> bool:
        marked = await trio.to_thread.run_sync(
            _before_revert,
            archive,
            session.live_turns,
            session.inspect,
            {"rebuilding": True, "rebuilds": session.rebuilds, "projectedEpoch": session.projected_epoch},
        )
        # A read answered from here on must see the marks (its response may
        # come in the same pipe read as the revert's, before this task resumes).
        self.archived.forget(session.thread_id)
        if await self.spares.switch(session):
            return True
        noise = self._reverting.setdefault(session.thread_id, _RevertNoise())
        ticket = trio.Event()
        noise.answered = False
        noise.tickets.append(ticket)
        started = trio.current_time()
        try:
            await self.proxy.request("thread/revert", {"threadId": session.thread_id, "beforeTurnId": first}, timeout=self.options.engine_deadline)
        except (RpcError, trio.TooSlowError) as exc:
            noise.answered = True
            if ticket in noise.tickets:
                noise.tickets.remove(ticket)  # no thread/reverted for a refused revert
            self._drop_revert_noise(session.thread_id, noise)
            if isinstance(exc, RpcError):
                # Refused: Codex keeps the turns, so they are its to list again.
                await trio.to_thread.run_sync(archive.mark_restored, marked)
                self.archived.forget(session.thread_id)
            message = getattr(exc, "message", "") or ""
            if message.startswith("turn not found") and session.turns_since_rebuild is not None:
                # The ledger's first turn is gone (the client reverted the thread
                # itself, or the sidecar died between a revert and its turn/start):
                # ask Codex for the thread's first turn instead, once.
                session.turns_since_rebuild = None
                return await self._revert_to_framing(session)
            if "paginated" in message:
                session.revert_unsupported = True
            log.warning(
                "rebuild impossible (thread/revert refused); forwarding the original request",
                extra={"fields": self._fields(session, error=type(exc).__name__, legacyHistory=session.revert_unsupported)},
            )
            return False
        answered = trio.current_time()
        noise.answered = True
        self.archived.forget(session.thread_id)
        self.proxy.spawn(self.archived.load, session.thread_id)  # before a read needs it
        session.live_turns = []
        revert_ms = round((answered - started) * 1000, 1)
        if session.current is not None:
            session.current.revert_ms = revert_ms
        # thread/reverted follows the response: it is swallowed when it comes,
        # but the turn need not wait for it (the status notifications, which
        # the turn has its own of, all came before the response).
        noise.answered = True
        self.proxy.spawn(self._expire_revert_noise, session, noise, ticket, revert_ms)
        session.turns_since_rebuild = []
        return True

    async def _expire_revert_noise(self, session: ThreadSession, noise: _RevertNoise, ticket: trio.Event, revert_ms: float) -> None:
        answered = trio.current_time()
        with trio.move_on_after(REVERTED_NOTICE_WAIT):
            await ticket.wait()
        if ticket in noise.tickets:
            noise.tickets.remove(ticket)  # never came: stop waiting for it
        self._drop_revert_noise(session.thread_id, noise)
        log.debug(
            "thread reverted to its framing",
            extra={
                "fields": self._fields(
                    session, revertMs=revert_ms, revertedNoticeMs=round((trio.current_time() - answered) * 1000, 1), revertedNoticeSeen=ticket.is_set()
                )
            },
        )

    def _drop_revert_noise(self, thread_id: str, noise: _RevertNoise) -> None:
        if noise.answered and not noise.tickets and self._reverting.get(thread_id) is noise:
            del self._reverting[thread_id]

    def _swallow_revert_noise(self, msg: Message) -> Decision:
        params = msg.params()
        thread_id = params.get("threadId") if isinstance(params, dict) else None
        noise = self._reverting.get(thread_id) if isinstance(thread_id, str) else None
        if noise is None:
            return None
        if msg.method == "thread/reverted":
            if not noise.tickets:
                return None  # not one of the sidecar's reverts
            noise.tickets.pop(0).set()
            self._drop_revert_noise(thread_id, noise)  # type: ignore[arg-type]
            return HANDLED
        if noise.answered:
            return None  # after the answer, status changes are the next turn's
        return HANDLED

    async def _bootstrap(self, session: ThreadSession) -> None:
        session.bootstrapped = True
        bootstrap = optional_method(self.engine, "bootstrap")
        runtime = self._runtime(session, {})
        if bootstrap is not None:
            log.info("codex context engine bootstrap started", extra={"fields": self._fields(session)})
            try:
                await self._call(
                    "bootstrap",
                    bootstrap(BootstrapParams(session_id=session.thread_id, session_key=session.session_key, session_file=str(session.path), runtime_context=runtime)),
                )
                log.info("codex context engine bootstrap completed", extra={"fields": self._fields(session)})
            except Exception as exc:
                log.warning("codex context engine bootstrap failed", extra={"fields": self._fields(session, error=type(exc).__name__)})
        await self._maintain(session, "bootstrap")

    async def _maintain(self, session: ThreadSession, reason: str) -> bool:
        maintain = optional_method(self.engine, "maintain")
        if maintain is None:
            return False
        try:
            await self._call(
                "maintain",
                maintain(MaintainParams(session_id=session.thread_id, session_key=session.session_key, session_file=str(session.path), reason=reason, runtime_context=self._runtime(session, {}))),
            )
            session.stats[f"lastMaintain{reason.title()}"] = "ok"
            return True
        except Exception as exc:
            session.stats[f"lastMaintain{reason.title()}"] = type(exc).__name__
            log.warning("codex context engine maintenance failed", extra={"fields": self._fields(session, reason=reason, error=type(exc).__name__)})
            return False

    def _on_turn_start_response(self, msg: Message, pending: PendingRequest) -> Decision:
        params = self._requests.pop(pending.client_id, None)  # noqa: F841  (kept symmetric with threads)
        for session in self.sessions.values():
            state = session.current
            if state is None or state.client_id != pending.client_id or state.turn_id is not None:
                continue
            result = msg.result()
            turn = result.get("turn") if isinstance(result, dict) else None
            if isinstance(turn, dict) and isinstance(turn.get("id"), str):
                state.turn_id = turn["id"]
                session.turns[turn["id"]] = state
                if self.backing is not None and self.backing.confirm(session.thread_id):
                    # The backing thread has a turn now: Codex can resume it.
                    self.proxy.spawn(self.spares.save_alias, self.backing.aliases[session.thread_id])
                if state.addition_pending is not None:
                    session.addition_sent = state.addition_pending
                if state.epoch_pending is not None:
                    session.projected_epoch = state.epoch_pending
            else:  # refused: no turn will complete, the thread is free again
                if state.rebuilt:
                    # The revert went through; the projection did not land.
                    session.held, session.turns_since_rebuild = [], []
                    session.projected_epoch = None
                self._end_turn(session, state)
            break
        return None

    # ------------------------------------------------------------ turn end

    def _on_item_completed(self, msg: Message) -> Decision:
        params = msg.params()
        if not isinstance(params, dict):
            return None
        session = self.sessions.get(params.get("threadId"))  # type: ignore[arg-type]
        item = params.get("item")
        turn_id = params.get("turnId")
        if session is None or not isinstance(item, dict) or not isinstance(turn_id, str) or not isinstance(item.get("id"), str):
            return None
        state = session.turns.get(turn_id)
        if state is None:
            state = session.turns[turn_id] = TurnState(client_id=None, original_input=None, turn_id=turn_id)
        state.items[item["id"]] = item
        stamp = params.get("completedAtMs") or item.get("completedAtMs")
        if isinstance(stamp, int):
            state.item_times[item["id"]] = stamp
        if item.get("type") == "contextCompaction":
            session.force_rebuild = True  # Codex rewrote its history: the ledger no longer holds
            log.info(
                "native Codex compaction in turn",
                extra={"fields": self._fields(session, turnId=turn_id, backend="codex-app-server", ownsCompaction=self.owns_compaction)},
            )
        return None

    def _on_token_usage(self, msg: Message) -> Decision:
        params = msg.params()
        if not isinstance(params, dict):
            return None
        session = self.sessions.get(params.get("threadId"))  # type: ignore[arg-type]
        usage = params.get("tokenUsage")
        if session is None or not isinstance(usage, dict):
            return None
        last = usage.get("last") if isinstance(usage.get("last"), dict) else None
        if last:
            cached = int(last.get("cachedInputTokens") or 0)
            total_in = int(last.get("inputTokens") or 0)
            session.last_usage = Usage(
                input=max(0, total_in - cached),
                output=int(last.get("outputTokens") or 0),
                cache_read=cached,
                cache_write=int(last.get("cacheWriteInputTokens") or 0),
                total_tokens=int(last.get("totalTokens") or 0),
            )
            session.prompt_cache = PromptCacheInfo(cached_input_tokens=cached, input_tokens=total_in)
            session.current_token_count = total_in
        if isinstance(usage.get("modelContextWindow"), int):
            session.context_window = usage["modelContextWindow"]
        return None

    def _on_turn_completed(self, msg: Message) -> Decision:
        params = msg.params()
        if not isinstance(params, dict):
            return None
        session = self.sessions.get(params.get("threadId"))  # type: ignore[arg-type]
        turn = params.get("turn")
        if session is None or not isinstance(turn, dict) or not isinstance(turn.get("id"), str):
            return None
        if turn["id"] in session.completed_turns:
            # A replay while the first copy is still being finalised: the
            # mirror's finalized marker is not written yet, so check here.
            log.info("turn already finalized; not ingesting it twice", extra={"fields": self._fields(session, turnId=turn["id"])})
            return None
        session.completed_turns.add(turn["id"])
        self.proxy.spawn(self._finalize, session, turn)
        return None  # forwarded first; the work happens after

    async def _finalize(self, session: ThreadSession, turn: dict[str, Any]) -> None:
        turn_id: str = turn["id"]
        status = turn.get("status")
        state = session.turns.pop(turn_id, None) or TurnState(client_id=None, original_input=None, turn_id=turn_id)
        try:
            await session.ready.wait()
            if session.mirror is None:
                return
            final_key = f"codex-app-server:{session.thread_id}:{turn_id}:finalized"
            if session.mirror.has_key(final_key):
                log.info("turn already finalized; not ingesting it twice", extra={"fields": self._fields(session, turnId=turn_id)})
                return
            archive = TurnArchive(archive_path(self.state_dir, session.thread_id))
            archived = archived_turn(turn, list(state.items.values()))
            unfollowed = session.unfollowed
            if unfollowed is not None and turn_id not in unfollowed.in_flight:
                # The thread went on without the mirror following the client's
                # revert (it kept failing): following later would cut this turn.
                log.warning(
                    "giving up a client revert the transcript mirror could not follow; the engine keeps the reverted turns",
                    extra={"fields": self._fields(session, turnId=turn_id)},
                )
                session.unfollowed = None
                self.proxy.ungate(session.thread_id, unfollowed.holder)
            if session.live_turns is not None:
                session.live_turns.append(turn_id)
            ids = [i.get("id") for i in archived.get("items") or [] if isinstance(i, dict)]
            session.last_items[turn_id] = ids[-1] if ids and isinstance(ids[-1], str) else None
            items = list(state.items.values()) or [i for i in turn.get("items") or [] if isinstance(i, dict)]
            error = turn.get("error")
            records = translate_turn(
                items,
                thread_id=session.thread_id,
                turn_id=turn_id,
                timestamp=_now_ms(),
                item_timestamps=state.item_times,
                original_input=state.original_input,
                usage=session.last_usage,
                model=session.model,
                turn_status=status,
                error_message=error.get("message") if isinstance(error, dict) else None,
            )
            if state.client_id is None and not messages_of(records):
                # A turn the client did not start with turn/start and that says
                # nothing (native compaction runs as one): mirror the marker only.
                try:
                    await trio.to_thread.run_sync(_archive_then_append, archive, archived, session.mirror, records)
                except (MirrorError, OSError) as exc:
                    log.warning(
                        "transcript mirror failed on a turn without messages; not mirrored",
                        extra={"fields": self._fields(session, turnId=turn_id, error=type(exc).__name__)},
                    )
                return
            snapshot: list[AgentMessage]
            try:
                snapshot = await trio.to_thread.run_sync(_append_then_read, archive, archived, session.mirror, records)
            except (MirrorError, OSError) as exc:
                snapshot = state.history + messages_of(records)
                log.warning(
                    "transcript mirror failed; context engine ingests from fallback turn data",
                    extra={"fields": self._fields(session, turnId=turn_id, error=type(exc).__name__)},
                )
            pre = state.pre_prompt_count if state.client_id is not None else max(0, len(snapshot) - len(messages_of(records)))
            ok = True
            try:
                path = await self._call(
                    "after_turn",
                    after_turn_with_fallback(
                        self.engine,
                        AfterTurnParams(
                            session_id=session.thread_id,
                            session_key=session.session_key,
                            session_file=str(session.path),
                            messages=snapshot,
                            pre_prompt_message_count=pre,
                            token_budget=self._budget(session),
                            runtime_context=self._runtime(session, {}),
                        ),
                    ),
                )
                log.info("codex context engine finalize completed", extra={"fields": self._fields(session, turnId=turn_id, path=path)})
            except Exception as exc:
                ok = False
                log.warning("codex context engine finalize failed", extra={"fields": self._fields(session, turnId=turn_id, error=type(exc).__name__)})
            # The finalized marker (a replayed turn/completed is not ingested
            # twice) goes to the mirror while the next turn may already
            # assemble: nothing there depends on it, and the worker trip
            # (~0.4 ms) is not on the client's path. The release waits for it.
            written = trio.Event()
            session.marking.add(written)
            self.proxy.spawn(self._mark_finalized, session, session.mirror, written, final_key, {"turnId": turn_id, "status": status, "ok": ok})
            session.stats["lastFinalize"] = {"turnId": turn_id, "status": status, "ok": ok}  # busy until the marker is written
            if state.client_id is not None:
                base = state.held_plan
                if base is None:
                    base = session.held if session.held is not None else [fingerprint(m) for m in state.history]
                session.held = base + self._fingerprints(session, snapshot[state.pre_prompt_count :])
                if state.rebuilt:
                    session.turns_since_rebuild = [turn_id]
                elif session.turns_since_rebuild is not None:
                    session.turns_since_rebuild = [*session.turns_since_rebuild, turn_id]
                # else: unknown (a fork, a thread from before this state dir)
                # stays unknown: a rebuild asks Codex for the thread's first turn.
            self._inspect_record(session, state, turn_id, status)
            if status == "completed" and ok:
                if self.background_maintenance:
                    self.proxy.spawn(self._maintain, session, "turn")  # the next turn need not wait
                else:
                    await self._maintain(session, "turn")
            else:
                reason = "finalize failed" if not ok else f"turn {status}"
                session.stats["lastMaintainTurn"] = f"skipped: {reason}"
                log.info("codex context engine maintenance skipped", extra={"fields": self._fields(session, turnId=turn_id, reason=reason)})
        finally:
            self._end_turn(session, state)
            self.spares.want_spare(session)

    async def _mark_finalized(self, session: ThreadSession, mirror: TranscriptMirror, written: trio.Event, key: str, data: dict[str, Any]) -> None:
        try:
            await trio.to_thread.run_sync(mirror.append_custom, FINALIZED_CUSTOM_TYPE, data, key)
        except (MirrorError, OSError):
            pass
        finally:
            session.marking.discard(written)
            written.set()

    def _inspect_record(self, session: ThreadSession, state: TurnState, turn_id: str, status: Any) -> None:
        if session.inspect is None or state.client_id is None:
            return
        usage = session.last_usage
        record = {
            "turnId": turn_id,
            "status": status,
            "mode": state.mode,
            "epoch": state.epoch,
            "projectedEpoch": session.projected_epoch,
            "projected": state.projected,
            "fallback": state.fallback_reason,
            "historyMessages": state.pre_prompt_count,
            "assembled": {"count": state.assembled_count, "estimatedTokens": state.estimated_tokens, "messages": state.assembled_roles},
            "injected": {"channels": state.channels, "contextChars": state.context_chars, "rendered": state.rendered, "dropped": state.dropped},
            # The turn's contribution to model input, before and after projection.
            "turnInputChars": {"original": state.original_chars, "sent": state.sent_chars or state.original_chars},
            "codexInputTokens": (usage.input + usage.cache_read) if usage else None,
            "cachedInputTokens": usage.cache_read if usage else None,
            "rebuilt": state.rebuilt,
            "staleHeld": state.stale,
            "holdMs": state.hold_ms,
            "revertMs": state.revert_ms,
            **({"switched": True} if state.switched else {}),
            "rebuilds": session.rebuilds,
            "held": session.held,
            "turnsSinceRebuild": session.turns_since_rebuild,
            "forceRebuild": session.force_rebuild,
        }
        session.inspect.append(record)

    def inspect(self, thread_id: str) -> list[dict[str, Any]]:
        session = self.sessions.get(thread_id)
        log_ = session.inspect if session and session.inspect else InspectLog(inspect_path(self.state_dir, thread_id))
        return log_.records()

    def _end_turn(self, session: ThreadSession, state: TurnState) -> None:
        if session.current is state:
            session.current = None
            if session.slot.value == 0:
                session.slot.release()

    # ------------------------------------------------------------ compaction

    def _on_compact_start(self, msg: Message) -> Decision:
        if not self.owns_compaction:
            return None  # native compaction, unchanged
        params = msg.params()
        session = self.sessions.get(params.get("threadId")) if isinstance(params, dict) else None  # type: ignore[arg-type]
        if session is None:
            return None
        self.proxy.spawn(self._engine_compaction_then_native, session, msg)
        return HANDLED

    async def _engine_compaction_then_native(self, session: ThreadSession, msg: Message) -> None:
        result = await self._engine_compact(session)
        # Native compaction follows best-effort: the client's own request, so
        # the client gets Codex's own answer; its outcome is recorded by
        # _on_compact_response.
        self._native_pending[msg.id] = (session, result)
        if not self.proxy.forward_client_request(msg):
            self._native_pending.pop(msg.id, None)

    def _on_compact_response(self, msg: Message, pending: PendingRequest) -> Decision:
        held = self._native_pending.pop(pending.client_id, None)
        if held is not None:
            session, result = held
            error = msg.error()
            native = {"ok": error is None}
            if isinstance(error, dict):
                native["error"] = error.get("message")
            self.proxy.spawn(self._record_compaction, session, result, native)
        return None  # a native failure does not fail the engine's compaction; the client sees Codex's answer

    async def _engine_compact(self, session: ThreadSession) -> CompactResult:
        try:
            result = await self._call(
                "compact",
                self.engine.compact(
                    CompactParams(
                        session_id=session.thread_id,
                        session_key=session.session_key,
                        token_budget=self._budget(session),
                        force=True,
                        current_token_count=session.current_token_count,
                        compaction_target="budget",
                        runtime_context=self._runtime(session, {}),
                    )
                ),
            )
        except Exception as exc:  # not retried as a prompt: reported
            result = CompactResult(ok=False, compacted=False, reason=f"engine compaction failed: {type(exc).__name__}")
            log.warning("context engine compaction failed", extra={"fields": self._fields(session, error=type(exc).__name__)})
        session.stats["lastEngineCompaction"] = {"ok": result.ok, "compacted": result.compacted, "reason": result.reason}
        return result

    async def _record_compaction(self, session: ThreadSession, result: CompactResult, native: dict[str, Any]) -> None:
        session.compactions += 1
        if session.mirror is None:
            return
        details = dict(result.result.details) if result.result is not None else {}
        details["codexNativeCompaction"] = native
        details["engineId"] = self.engine_id
        summary = result.result.summary if result.result is not None else None
        key = ENGINE_COMPACTION_KEY.format(thread_id=session.thread_id, n=f"{_now_ms()}")
        try:
            if result.compacted and summary:
                await trio.to_thread.run_sync(
                    lambda: session.mirror.append_compaction(
                        summary=summary,
                        first_kept_entry_id=result.result.first_kept_entry_id,
                        tokens_before=result.result.tokens_before,
                        tokens_after=result.result.tokens_after,
                        details=details,
                        key=key,
                    )
                )
            else:
                await trio.to_thread.run_sync(
                    lambda: session.mirror.append_custom(
                        "openclaw-codex-sidecar/compaction", {"ok": result.ok, "compacted": result.compacted, "reason": result.reason, **details}, key
                    )
                )
        except (MirrorError, OSError) as exc:
            log.warning("could not record compaction in the mirror", extra={"fields": self._fields(session, error=type(exc).__name__)})
        log.info(
            "codex native compaction completed alongside context-engine compaction",
            extra={"fields": self._fields(session, nativeOk=native.get("ok"), engineCompacted=result.compacted)},
        )

    async def _control_compact(self, params: dict[str, Any]) -> dict[str, Any]:
        """``sidecar/compact {threadId}``: engine compaction (if it owns it), then native."""
        thread_id = params.get("threadId")
        session = self.sessions.get(thread_id) if isinstance(thread_id, str) else None
        if session is None:
            raise RpcError(-32602, "unknown threadId")
        engine_result = await self._engine_compact(session) if self.owns_compaction else None
        try:
            await self.proxy.request("thread/compact/start", {"threadId": session.thread_id}, timeout=self.options.engine_deadline)
            native = {"ok": True}
        except (RpcError, trio.TooSlowError) as exc:
            native = {"ok": False, "error": getattr(exc, "message", type(exc).__name__)}
        if engine_result is not None:
            await self._record_compaction(session, engine_result, native)
            primary = {"ok": engine_result.ok, "compacted": engine_result.compacted, "reason": engine_result.reason}
            if engine_result.result is not None:
                primary["result"] = {
                    "summary": engine_result.result.summary,
                    "firstKeptEntryId": engine_result.result.first_kept_entry_id,
                    "tokensBefore": engine_result.result.tokens_before,
                    "tokensAfter": engine_result.result.tokens_after,
                    "details": {**engine_result.result.details, "codexNativeCompaction": native},
                }
            else:
                primary["details"] = {"codexNativeCompaction": native}
            return primary
        return {"ok": native["ok"], "compacted": native["ok"], "reason": None if native["ok"] else native.get("error"), "details": {"codexNativeCompaction": native}}

    async def _control_inspect(self, params: dict[str, Any]) -> dict[str, Any]:
        thread_id = params.get("threadId")
        if not isinstance(thread_id, str):
            raise RpcError(-32602, "threadId is required")
        try:
            turns = await trio.to_thread.run_sync(self.inspect, thread_id)
        except ValueError:
            raise RpcError(-32602, "unusable threadId") from None
        return {"threadId": thread_id, "engine": self.engine_id, "turns": turns}

    # --------------------------------------------------------------- helpers

    async def _call(self, name: str, awaitable: Awaitable[T]) -> T:
        """One engine call under the deadline (``trio.TooSlowError`` past it)."""
        with trio.fail_after(self.options.engine_deadline):
            return await awaitable

    def _budget(self, session: ThreadSession) -> int | None:
        return self.options.token_budget or session.context_window

    def _runtime(self, session: ThreadSession, params: dict[str, Any]) -> RuntimeContext:
        return RuntimeContext(
            cwd=params.get("cwd") if isinstance(params.get("cwd"), str) else session.cwd,
            model=params.get("model") if isinstance(params.get("model"), str) else session.model,
            token_budget=self._budget(session),
            current_token_count=session.current_token_count,
            context_window=session.context_window,
            last_usage=session.last_usage,
            prompt_cache=session.prompt_cache,
        )

    def _fields(self, session: ThreadSession, **more: Any) -> dict[str, Any]:
        fields = {"sessionId": session.thread_id, "threadId": session.thread_id, "engineId": self.engine_id}
        if session.current is not None and session.current.turn_id:
            fields["turnId"] = session.current.turn_id
        fields.update(more)
        return fields


def _after_turn(last: str) -> Callable[[str], bool]:
    """A mirror copy's stop test for ``thread/fork`` with ``lastTurnId``:
    stop at the first entry after that turn's own (matched by turn id,
    under whichever thread's keys it was mirrored)."""
    seen = False

    def stop(key: str) -> bool:
        nonlocal seen
        if key_turn_id(key) == last:
            seen = True
            return False
        return seen

    return stop


def _archive_then_append(archive: TurnArchive, turn: dict[str, Any], mirror: TranscriptMirror, records: list[Any]) -> None:
    archive.append_turn(turn)  # best effort, and first: a mirror failure must not cost it
    mirror.append_records(records)


def _catch_up_turns(thread_id: str, archive: TurnArchive, per_turn: list[tuple[dict[str, Any], list[Any]]], mirror: TranscriptMirror) -> list[str]:
    """Mirror and archive the turns of which the mirror has nothing at all (a
    turn with any entry, or its finalised marker, was mirrored: Codex's view
    of it may differ in detail, and must not add a second copy)."""
    added = []
    for turn, records in per_turn:
        finalized = f"{turn_key_prefix(thread_id, turn['id'])}finalized"
        if not records or mirror.has_key(finalized) or any(mirror.has_key(r.key) for r in records):
            continue
        mirror.append_records(records)
        archive.append_turn(turn)
        added.append(turn["id"])
    return added


def _archive_many_then_append(archive: TurnArchive, turns: list[dict[str, Any]], mirror: TranscriptMirror, records: list[Any]) -> int:
    for turn in turns:
        archive.append_turn(turn)
    return mirror.append_records(records)


def _append_then_read(archive: TurnArchive, turn: dict[str, Any], mirror: TranscriptMirror, records: list[Any]) -> list[AgentMessage]:
    """Archive and mirror a turn and read the session back, in one trip to
    a worker thread: each trip costs a thread wake-up and an event-loop
    wake-up, and the next turn of this thread waits for finalisation."""
    _archive_then_append(archive, turn, mirror, records)
    return mirror.messages()


def _before_revert(archive: TurnArchive, dropped: list[str] | None, inspect: InspectLog | None, marker: dict[str, Any]) -> list[str]:
    marked = archive.mark_dropped(dropped)
    if inspect is not None:
        inspect.append(marker)
    return marked


def fingerprint(message: AgentMessage) -> str:
    """A message's identity for the ledger: its canonical OpenClaw encoding."""
    return hashlib.sha256(encode_openclaw(message)).hexdigest()[:16]


def _message_chars(message: AgentMessage) -> int:
    """Size of a message's text, for inspection (never the text itself)."""
    content = getattr(message, "content", None)
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        total = 0
        for block in content:
            for attr in ("text", "thinking"):
                value = getattr(block, attr, None)
                if isinstance(value, str):
                    total += len(value)
        return total
    summary = getattr(message, "summary", None)
    return len(summary) if isinstance(summary, str) else 0


def _now_ms() -> int:
    return int(time.time() * 1000)
