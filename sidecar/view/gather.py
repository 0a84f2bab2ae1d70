"""What ``codex-sidecar view`` shows, read from the state dir: pure data.

One OpenClaw session across its Codex threads: the threads bound to it
(``bindings/``), each thread's inspection records (``inspect/``, and the
text of its turns in ``inspect-text/``), what its
Codex thread held before each turn (``ledger/``), the session's transcript
(``sessions/<session>.jsonl``: the turns' text, reverts and compactions), and,
when the ``lossless`` engine kept a store, its summaries and messages.
Nothing here writes; torn or unreadable lines are skipped, a missing file is
an empty one, so a session reads the same while the sidecar runs or after.

``redact`` keeps every size and drops every text (as recordings do): the
report then says how long each text was, never what it said.
"""

from __future__ import annotations

import bisect
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec

from engines import from_openclaw

from ..store import bindings
from ..store.inspect import decode_records, inspect_path, inspect_text_path
from ..store.ledger import LedgerState, ledger_path, read_entries
from ..store.mirror import session_path
from ..thread.planner import fingerprint

REVERT = "codex-sidecar.client-revert"
NATIVE_COMPACTION = "codex-native-compaction"
FINALIZED = "openclaw-codex-sidecar/turn-finalized"
COVERED_KEPT = 400
"""Messages a leaf summary lists (the text of each): more is a count."""
HELD_LISTED = 12
"""Messages a turn lists of what its Codex thread held before it (the newest)."""


class Text(msgspec.Struct, frozen=True):
    """A text, or only its size (redacted)."""

    chars: int
    text: str | None = None


class MessageText(msgspec.Struct, frozen=True):
    role: str
    body: Text
    tool: str | None = None


class ToolCall(msgspec.Struct, frozen=True):
    tool: str
    arguments: Text
    result: Text
    success: bool
    ms: float | None


class TurnView(msgspec.Struct, kw_only=True):
    n: int
    thread: str
    turn_id: str
    status: str | None = None
    started: str | None = None
    """ISO time of the turn's first transcript entry."""
    recorded: bool = False
    """An inspection record was found (else only the transcript knows it)."""
    mode: str | None = None
    fallback: str | None = None
    assembled: list[tuple[str, int]] = []
    assembled_count: int | None = None
    assembled_omitted: int = 0
    estimated_tokens: int | None = None
    budget: int | None = None
    channels: list[str] = []
    sent_input: Text | None = None
    sent_context: Text | None = None
    original_chars: int | None = None
    sent_chars: int | None = None
    held_before: tuple[int, int] | None = None
    """What the Codex thread held before the turn: messages, characters (ledger)."""
    held_newest: list[tuple[str, int, int | None]] = []
    """The newest of those: role (``?``: not in the transcript, the engine's
    own, as a summary), characters, the turn whose transcript holds it."""
    held_after: int | None = None
    codex_input: int | None = None
    cached_input: int | None = None
    hold_ms: float | None = None
    revert_ms: float | None = None
    rebuilt: bool = False
    switched: bool = False
    finalize_ok: bool | None = None
    engine_tools: list[ToolCall] = []
    messages: list[MessageText] = []
    marks: list[str] = []
    """Events at the turn: rotation, rebuild, switch, revert, compaction, fallback, failed, ..."""


class Thread(msgspec.Struct, frozen=True):
    thread: str
    via: str
    turns: int
    first: int | None


class Summary(msgspec.Struct, frozen=True):
    id: str
    depth: int
    seq: tuple[int, int]
    tokens: int
    source_tokens: int
    fallback: bool
    parent: str | None
    children: list[str]
    body: Text
    covered: list[tuple[int, MessageText]]
    covered_count: int
    after_turn: int | None
    """The session's turn after which the summary could first be made."""


class Lossless(msgspec.Struct, frozen=True):
    messages: int
    message_tokens: int
    summaries: list[Summary]
    frame_summaries: int
    frame_tokens: int
    steps: int
    budget: int | None
    where: str


class Report(msgspec.Struct, kw_only=True):
    session: str
    asked: str
    threads: list[Thread]
    turns: list[TurnView]
    lossless: Lossless | None = None
    lossless_error: str | None = None
    redacted: bool = False


def _text(value: Any, redact: bool) -> Text:
    s = value if isinstance(value, str) else "" if value is None else msgspec.json.encode(value).decode()
    return Text(len(s), None if redact else s)


def _jsonl(path: Path) -> list[Any]:
    try:
        data = path.read_bytes()
    except OSError:
        return []
    return decode_records(data)


def _content_text(content: Any) -> tuple[str, str | None]:
    """A message's text (its blocks joined) and the tool it calls, if any."""
    if isinstance(content, str):
        return content, None
    parts: list[str] = []
    tool = None
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" or kind == "thinking":
            parts.append(str(block.get(kind) or ""))
        elif kind == "toolCall":
            tool = str(block.get("name") or "")
            parts.append(f"{tool}({msgspec.json.encode(block.get('arguments') or {}).decode()})")
        elif kind == "image":
            parts.append("[image]")
    return "\n".join(parts), tool


def _message(entry: dict[str, Any], redact: bool) -> MessageText | None:
    m = entry.get("message")
    if not isinstance(m, dict):
        return None
    text, tool = _content_text(m.get("content"))
    role = str(m.get("role") or "?")
    if role == "toolResult":
        tool = str(m.get("toolName") or "") or None
    elif role == "compactionSummary" or role == "branchSummary":
        text = str(m.get("summary") or text)
    return MessageText(role, _text(text, redact), tool)


def _key_parts(entry: dict[str, Any]) -> tuple[str, str] | None:
    key = entry.get("idempotencyKey")
    if not isinstance(key, str) or not key.startswith("codex-app-server:"):
        return None
    parts = key.split(":")
    return (parts[1], parts[2]) if len(parts) >= 4 else None


class _Transcript(msgspec.Struct):
    order: list[tuple[str, str]] = []
    messages: dict[tuple[str, str], list[MessageText]] = {}
    started: dict[tuple[str, str], str] = {}
    finalized: dict[tuple[str, str], bool] = {}
    marks: dict[tuple[str, str], list[str]] = {}
    """Marks due at the turn (the next turn, for a revert or a compaction)."""
    known: dict[str, tuple[str, tuple[str, str]]] = {}
    """A message's ledger fingerprint: its role and the turn that said it."""


def _fingerprint(raw: Any) -> str | None:
    """The ledger's identity of a transcript message (as the sidecar computes it)."""
    try:
        return fingerprint(from_openclaw(raw))
    except Exception:
        return None


def _transcript(entries: Iterable[Any], redact: bool) -> _Transcript:
    t = _Transcript(order=[], messages={}, started={}, finalized={}, marks={}, known={})
    pending: list[str] = []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        kind = entry.get("type")
        at = _key_parts(entry)
        if kind == "message" and at is not None:
            if at not in t.messages:
                t.order.append(at)
                t.messages[at] = []
                t.started[at] = str(entry.get("timestamp") or "")
                if pending:
                    t.marks.setdefault(at, []).extend(pending)
                    pending = []
            m = _message(entry, redact)
            if m is not None:
                t.messages[at].append(m)
                f = _fingerprint(entry.get("message"))
                if f is not None:
                    t.known.setdefault(f, (m.role, at))
        elif kind == "custom":
            custom = entry.get("customType")
            data = entry.get("data")
            data = data if isinstance(data, dict) else {}
            if custom == FINALIZED and at is not None:
                t.finalized[at] = bool(data.get("ok", True))
            elif custom == REVERT:
                pending.append("client revert")
            elif custom == NATIVE_COMPACTION:
                pending.append("native compaction")
        elif kind == "compaction":
            pending.append("OpenClaw compaction")
    return t


class _Held(msgspec.Struct, frozen=True):
    count: int
    chars: int
    newest: list[tuple[str, int]]
    """Fingerprint and characters of the newest :data:`HELD_LISTED`."""


def _held_before(state_dir: str | os.PathLike[str], thread: str) -> dict[str, _Held]:
    """Per turn, what the ledger says the Codex thread held when the turn
    came (before a rebuild the turn made: the marker it wrote first)."""
    state = LedgerState()
    out: dict[str, _Held] = {}
    before_rebuild: _Held | None = None

    def now() -> _Held:
        held = state.held or []
        return _Held(len(held), sum(state.sizes.get(f, 0) for f in held), [(f, state.sizes.get(f, 0)) for f in held[-HELD_LISTED:]])

    for entry in read_entries(ledger_path(state_dir, thread)):
        turn = entry.turn
        if entry.rebuilding is True and before_rebuild is None:
            before_rebuild = now()
        if isinstance(turn, str):
            if turn not in out:
                out[turn] = before_rebuild or now()
            before_rebuild = None
        state.apply(entry)
    return out


def _turn_from_record(n: int, thread: str, r: dict[str, Any], held: _Held | None, redact: bool) -> TurnView:
    a = r.get("assembled") or {}
    inj = r.get("injected") or {}
    size = r.get("turnInputChars") or {}
    sent = r.get("sent") or {}
    tools = [
        ToolCall(
            str(c.get("tool") or "?"),
            _text(c.get("arguments"), redact),
            _text(c.get("result"), redact),
            bool(c.get("success")),
            c.get("ms") if isinstance(c.get("ms"), (int, float)) else None,
        )
        for c in r.get("engineTools") or []
        if isinstance(c, dict)
    ]
    roles = [(str(m[0]), int(m[1])) for m in a.get("messages") or [] if isinstance(m, list) and len(m) == 2 and isinstance(m[1], int)]
    return TurnView(
        n=n,
        thread=thread,
        turn_id=str(r.get("turnId")),
        status=r.get("status") if isinstance(r.get("status"), str) else None,
        recorded=True,
        mode=r.get("mode"),
        fallback=r.get("fallback"),
        assembled=roles,
        assembled_count=a.get("count"),
        assembled_omitted=int(a.get("omitted") or 0),
        estimated_tokens=a.get("estimatedTokens"),
        budget=r.get("budget"),
        channels=[str(c) for c in inj.get("channels") or []],
        sent_input=_text(sent["input"], redact) if isinstance(sent.get("input"), str) else None,
        sent_context=_text(sent["additionalContext"], redact) if isinstance(sent.get("additionalContext"), str) else None,
        original_chars=size.get("original"),
        sent_chars=size.get("sent"),
        held_before=None if held is None else (held.count, held.chars),
        held_newest=[(f, chars, None) for f, chars in held.newest] if held is not None else [],
        held_after=r.get("heldMessages"),
        codex_input=r.get("codexInputTokens"),
        cached_input=r.get("cachedInputTokens"),
        hold_ms=r.get("holdMs"),
        revert_ms=r.get("revertMs"),
        rebuilt=bool(r.get("rebuilt")),
        switched=bool(r.get("switched")),
        engine_tools=tools,
    )


def gather(state_dir: str | os.PathLike[str], name: str, *, redact: bool = False, database_url: str | None = None) -> Report:
    """The report of the session ``name`` (a session id or one of its Codex
    thread ids) from ``state_dir``. Raises ``ValueError`` for a name that
    is not an id."""
    session, bound = bindings.session_threads(state_dir, name)
    transcript = _transcript(_jsonl(session_path(state_dir, session)), redact)
    turns: list[TurnView] = []
    threads: list[Thread] = []
    seen: set[tuple[str, str]] = set()
    for b in bound:
        held = _held_before(state_dir, b.thread)
        records = [r for r in _jsonl(inspect_path(state_dir, b.thread)) if isinstance(r, dict) and "turnId" in r]
        texts = {t["turnId"]: t for t in _jsonl(inspect_text_path(state_dir, b.thread)) if isinstance(t, dict) and "turnId" in t}
        first = len(turns) + 1 if records else None
        for r in records:
            key = (b.thread, str(r.get("turnId")))
            if key in seen:
                continue
            seen.add(key)
            turns.append(_turn_from_record(len(turns) + 1, b.thread, {**texts.get(key[1], {}), **r}, held.get(key[1]), redact))
        threads.append(Thread(b.thread, b.via, len(records), first))
    # Turns the transcript knows and no record does (no engine, a record lost).
    for key in transcript.order:
        if key not in seen:
            seen.add(key)
            turns.append(TurnView(n=0, thread=key[0], turn_id=key[1]))
    if any(not t.recorded for t in turns):
        position = {key: i for i, key in enumerate(transcript.order)}
        turns.sort(key=lambda t: position.get((t.thread, t.turn_id), len(position)))
    known = {t.thread for t in threads}
    for t in turns:
        if t.thread not in known:
            known.add(t.thread)
            threads.append(Thread(t.thread, "transcript", sum(1 for u in turns if u.thread == t.thread), None))
    _finish(turns, transcript)
    counts: dict[str, int] = {}
    firsts: dict[str, int] = {}
    for t in turns:
        counts[t.thread] = counts.get(t.thread, 0) + 1
        firsts.setdefault(t.thread, t.n)
    threads = [Thread(th.thread, th.via, counts.get(th.thread, 0), firsts.get(th.thread)) for th in threads]
    report = Report(session=session, asked=name, threads=threads, turns=turns, redacted=redact)
    _add_lossless(report, state_dir, database_url, redact)
    return report


def _finish(turns: list[TurnView], transcript: _Transcript) -> None:
    """Number the turns, join the transcript's text and mark the events."""
    previous: str | None = None
    number = {(t.thread, t.turn_id): i for i, t in enumerate(turns, 1)}
    for i, t in enumerate(turns, 1):
        key = (t.thread, t.turn_id)
        t.n = i
        resolved = []
        for f, chars, _ in t.held_newest:
            role, said = transcript.known.get(str(f), ("?", None))
            resolved.append((role, chars, number.get(said) if said is not None else None))
        t.held_newest = resolved
        t.messages = transcript.messages.get(key, [])
        t.started = transcript.started.get(key) or None
        t.finalize_ok = transcript.finalized.get(key)
        marks = list(transcript.marks.get(key, []))
        if previous is not None and t.thread != previous:
            marks.append("rotation")
        previous = t.thread
        if t.rebuilt:
            marks.append("switch" if t.switched else "rebuild")
        if t.fallback:
            marks.append(f"fallback: {t.fallback}")
        if t.finalize_ok is False:
            marks.append("engine failed: after_turn")
        if t.status not in (None, "completed"):
            marks.append(f"turn {t.status}")
        if t.engine_tools:
            marks.append("recall")
        t.marks = marks


def _add_lossless(report: Report, state_dir: str | os.PathLike[str], database_url: str | None, redact: bool) -> None:
    from ..store.lossless_view import StoreMissing, open_store

    try:
        store = open_store(state_dir, database_url)
    except StoreMissing:
        return  # no lossless store: not a lossless session
    except Exception as exc:  # an extra missing, a store it cannot open: said in the report
        report.lossless_error = f"{type(exc).__name__}: {exc}"
        return
    try:
        report.lossless = _lossless(store, report, redact)
    except Exception as exc:
        report.lossless_error = f"{type(exc).__name__}: {exc}"
    finally:
        store.close()


def _lossless(store: Any, report: Report, redact: bool) -> Lossless | None:
    sid = report.session
    status = store.status(sid)
    if not (status.get("messages") or status.get("compactionSteps")):
        return None
    rows = store.summaries(sid)
    children: dict[str, list[str]] = {}
    for s in rows:
        if s.parent_id:
            children.setdefault(s.parent_id, []).append(s.id)
    starts = sorted((t.started, t.n) for t in report.turns if t.started)
    summaries = []
    for s in rows:
        covered: list[tuple[int, MessageText]] = []
        count = s.seq_hi - s.seq_lo + 1
        if s.depth == 0:
            for m in store.messages_between(sid, s.seq_lo, min(s.seq_hi, s.seq_lo + COVERED_KEPT - 1)):
                covered.append((m.seq, MessageText(m.role, _text(m.text, redact), m.tool_name)))
        summaries.append(
            Summary(
                id=s.id,
                depth=s.depth,
                seq=(s.seq_lo, s.seq_hi),
                tokens=s.tokens,
                source_tokens=s.source_tokens,
                fallback=s.fallback,
                parent=s.parent_id,
                children=children.get(s.id, []),
                body=_text(s.text, redact),
                covered=covered,
                covered_count=count,
                after_turn=_turn_at(starts, s.time_hi),
            )
        )
    for s in summaries:
        if s.after_turn is not None and 1 <= s.after_turn <= len(report.turns):
            turn = report.turns[s.after_turn - 1]
            if "compaction" not in turn.marks:
                turn.marks.append("compaction")
    return Lossless(
        messages=int(status.get("messages") or 0),
        message_tokens=int(status.get("messageTokens") or 0),
        summaries=summaries,
        frame_summaries=len(status.get("frameSummaries") or []),
        frame_tokens=int(status.get("frameTokens") or 0),
        steps=int(status.get("compactionSteps") or 0),
        budget=(status.get("lastAssembly") or {}).get("budget") or status.get("budget"),
        where=str(getattr(store, "where", "")),
    )


def _turn_at(starts: list[tuple[str, int]], ms: int) -> int | None:
    """The turn whose span holds the time ``ms`` (the last to start at or
    before it): a summary of messages up to then is made after it."""
    from ..store.mirror import iso_timestamp

    k = bisect.bisect_right(starts, (iso_timestamp(ms), sys.maxsize))
    return starts[k - 1][1] if k else None
