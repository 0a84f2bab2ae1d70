"""Existing history into the store: Codex rollouts and OpenClaw session
transcripts, for ``codex-sidecar engines lossless import``.

Sources
-------
- A **Codex rollout** (``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl``):
  one thread. Its ``response_item`` lines become messages (user prompts,
  assistant text, tool calls and their outputs; developer messages and the
  context Codex injects as user messages, such as ``<environment_context>``,
  are not conversation and are left out). The session is the thread id, as
  the sidecar names a thread that has no OpenClaw session.
- An **OpenClaw transcript**: ``<state>/agents/<id>/sessions/*.jsonl`` (a
  JSONL tree, the session file the engine's ``bootstrap`` reads too; the
  session key from ``sessions.json`` beside it) or, from OpenClaw 2026.9 on,
  the ``transcript_events`` of ``<state>/agents/<id>/agent/openclaw-agent.sqlite``
  (the same entries, one row each; the session key from ``session_windows``).
  The messages on the leaf path are imported. The session is the one the
  sidecar gives that OpenClaw session (:func:`openclaw_session_id`: OpenClaw's
  native hook relay id, from the agent id and the session key), so a session
  OpenClaw continues through the sidecar finds its history already there.

Every message gets the identity the engine gives it (:func:`.messages.identities`),
so an import run twice stores nothing twice. A rollout of a thread the
sidecar served is not the sidecar's record of it (Codex's timestamps, not
the transcript mirror's; a rebuilt thread's later Codex threads are rollouts
of their own), nor is OpenClaw's transcript of a session it served: the
command leaves those out (:func:`sidecar_copy`). Sessions get their agent
(``sessions.agent_id``: OpenClaw's agent, or the agent whose ``codex-home``
holds a rollout).

Reading is pure (:func:`codex_messages`, :func:`openclaw_messages` over lines
and entries); :func:`discover` finds files, :func:`read_source` reads one,
:func:`import_transcript` writes one session.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

import msgspec

from engines.api import AgentMessage, AssistantMessage, TextBlock, ToolCallBlock, ToolResultMessage, UserMessage, from_openclaw
from engines.tokens import estimate_message_tokens

from .messages import identities
from .search import agent_of, set_agent
from .store import Store

__all__ = [
    "ImportResult",
    "HistorySource",
    "Transcript",
    "codex_messages",
    "discover",
    "import_transcript",
    "openclaw_messages",
    "openclaw_session_id",
    "read_source",
    "sidecar_copy",
]

SourceKind = Literal["codex", "openclaw-jsonl", "openclaw-sqlite"]

#: User-role items Codex injects (context, instructions), not the user's words.
_INJECTED = ("<environment_context>", "<user_instructions>", "# AGENTS.md instructions", "<permissions instructions>", "<skills_instructions>", "<user_shell_command>", "<turn_aborted>")
OPENCLAW_DB = "openclaw-agent.sqlite"


class HistorySource(msgspec.Struct, frozen=True):
    kind: SourceKind
    path: str


class Transcript(msgspec.Struct, kw_only=True):
    """One session read from a source."""

    source: str
    kind: SourceKind
    session_id: str
    session_key: str
    agent: str | None
    messages: list[AgentMessage]
    #: Entries left out because they could not be read (compressed, malformed).
    unreadable: int = 0


class ImportResult(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str
    messages: int
    new: int


# ---------------------------------------------------------------- Codex rollouts


def _ms(stamp: Any) -> int:
    if isinstance(stamp, (int, float)):
        return int(stamp)
    if isinstance(stamp, str):
        try:
            moment = _dt.datetime.fromisoformat(stamp)
        except ValueError:
            return 0
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=_dt.UTC)
        return int(moment.timestamp() * 1000)
    return 0


def _texts(content: Any, kinds: tuple[str, ...]) -> list[str]:
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [b["text"] for b in content if isinstance(b, dict) and b.get("type") in kinds and isinstance(b.get("text"), str)]


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, dict):
        for key in ("content", "output", "text"):
            if key in output:
                return _output_text(output[key])
    if isinstance(output, list):
        return "\n".join(_texts(output, ("input_text", "output_text", "text")))
    return json.dumps(output, ensure_ascii=False) if output is not None else ""


def codex_messages(lines: Iterable[bytes | str]) -> tuple[dict[str, Any] | None, list[AgentMessage], int]:
    """A Codex rollout's first ``session_meta`` payload, its conversation as
    OpenClaw messages, and how many lines did not parse."""
    meta: dict[str, Any] | None = None
    out: list[AgentMessage] = []
    names: dict[str, str] = {}
    bad = 0
    for raw in lines:
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except ValueError:
            bad += 1
            continue
        if not isinstance(line, dict):
            bad += 1
            continue
        payload = line.get("payload")
        if not isinstance(payload, dict):
            continue
        if line.get("type") == "session_meta":
            meta = meta or payload
            continue
        if line.get("type") != "response_item":
            continue
        ts = _ms(line.get("timestamp"))
        kind = payload.get("type")
        if kind == "message":
            role = payload.get("role")
            if role == "user":
                texts = [t for t in _texts(payload.get("content"), ("input_text",)) if not t.lstrip().startswith(_INJECTED)]
                if texts:
                    out.append(UserMessage(content="\n".join(texts), timestamp=ts))
            elif role == "assistant":
                texts = _texts(payload.get("content"), ("output_text",))
                if texts:
                    out.append(AssistantMessage(content=[TextBlock(text="\n".join(texts))], timestamp=ts))
        elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
            call_id = str(payload.get("call_id") or payload.get("id") or f"call_{len(out)}")
            name = str(payload.get("name") or ("shell" if kind == "local_shell_call" else "tool"))
            if kind == "function_call":
                try:
                    arguments = json.loads(payload.get("arguments") or "{}")
                except ValueError:
                    arguments = {"raw": payload.get("arguments")}
            elif kind == "custom_tool_call":
                arguments = {"input": payload.get("input")}
            else:
                arguments = payload.get("action") if isinstance(payload.get("action"), dict) else {}
            if not isinstance(arguments, dict):
                arguments = {"value": arguments}
            names[call_id] = name
            out.append(AssistantMessage(content=[ToolCallBlock(id=call_id, name=name, arguments=arguments)], timestamp=ts))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id = str(payload.get("call_id") or "")
            out.append(
                ToolResultMessage(
                    tool_call_id=call_id,
                    tool_name=names.get(call_id, "tool"),
                    content=[TextBlock(text=_output_text(payload.get("output")))],
                    is_error=False,
                    timestamp=ts,
                )
            )
    return meta, out, bad


def _codex_agent(path: Path) -> str | None:
    """The OpenClaw agent whose ``codex-home`` holds a rollout, if any."""
    for parent in path.parents:
        if parent.name == "codex-home":
            return agent_of(None, str(parent))
    return None


def read_codex(path: Path) -> list[Transcript]:
    with open(path, "rb") as f:
        meta, messages, bad = codex_messages(f)
    if meta is None or not isinstance(meta.get("id"), str):
        return []
    thread = meta["id"]
    return [Transcript(source=str(path), kind="codex", session_id=thread, session_key=thread, agent=_codex_agent(path), messages=messages, unreadable=bad)]


# ---------------------------------------------------------------- OpenClaw transcripts


def openclaw_session_id(agent: str, session_key: str) -> str:
    """The sidecar's session for an OpenClaw session: OpenClaw's native hook
    relay id (``buildCodexNativeHookRelayId``: sha256 of a fixed prefix, the
    agent id and the session key, NUL between)."""
    digest = hashlib.sha256(f"openclaw:codex:native-hook-relay:v1\0{agent.strip()}\0{session_key.strip()}".encode()).hexdigest()
    return f"codex-{digest[:40]}"


def openclaw_messages(entries: Iterable[dict[str, Any]]) -> tuple[list[AgentMessage], int]:
    """The messages on the leaf path of an OpenClaw transcript (a tree of
    entries by ``id``/``parentId``: root to the last entry), and how many
    message entries were not readable."""
    by_id: dict[str, dict[str, Any]] = {}
    leaf: str | None = None
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str) or entry.get("type") == "session":
            continue
        by_id[entry["id"]] = entry
        leaf = entry["id"]
    path: list[dict[str, Any]] = []
    seen: set[str] = set()
    current = by_id.get(leaf) if leaf else None
    while current is not None and current["id"] not in seen:
        seen.add(current["id"])
        path.append(current)
        parent = current.get("parentId")
        current = by_id.get(parent) if isinstance(parent, str) else None
    out: list[AgentMessage] = []
    bad = 0
    for entry in reversed(path):
        if entry.get("type") != "message":
            continue
        try:
            out.append(from_openclaw(entry.get("message")))
            continue
        except Exception:  # a block type outside the contract: its text, if any, below
            pass
        try:
            out.append(from_openclaw(_plain_blocks(entry.get("message"))))
        except Exception:  # a role outside the contract or a bad shape: not context
            bad += 1
    return out, bad


_KNOWN_BLOCKS = ("text", "image", "thinking", "toolCall")


def _plain_blocks(message: Any) -> Any:
    """``message`` with each content block of a type outside the contract
    (OpenClaw 2026.9's Codex harness writes ``{"type": "toolResult", "text": ...}``
    blocks into tool results) as a text block of its text, or left out."""
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return message
    blocks = []
    for b in message["content"]:
        if isinstance(b, dict) and b.get("type") in _KNOWN_BLOCKS:
            blocks.append(b)
        elif isinstance(b, dict):
            text = b.get("text") if isinstance(b.get("text"), str) else b.get("content")
            if isinstance(text, str):
                blocks.append({"type": "text", "text": text})
    return {**message, "content": blocks}


def _json_lines(path: Path) -> Iterator[dict[str, Any]]:
    with open(path, "rb") as f:
        for raw in f:
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            if isinstance(entry, dict):
                yield entry


def _agent_of_path(path: Path) -> str | None:
    """``<id>`` of ``.../agents/<id>/...``."""
    parts = path.parts
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == "agents":
            return parts[i + 1]
    return None


def _session_keys(folder: Path) -> dict[str, str]:
    """session id -> session key, from OpenClaw's ``sessions.json`` (key -> entry with ``sessionId``)."""
    try:
        data = json.loads((folder / "sessions.json").read_text())
    except (OSError, ValueError):
        return {}
    out: dict[str, str] = {}
    if isinstance(data, dict):
        for key, entry in data.items():
            if isinstance(entry, dict) and isinstance(entry.get("sessionId"), str):
                out.setdefault(entry["sessionId"], key)
    return out


def read_openclaw_jsonl(path: Path) -> list[Transcript]:
    entries = list(_json_lines(path))
    header = next((e for e in entries if e.get("type") == "session"), None)
    session = str(header.get("id")) if header and header.get("id") else path.stem
    agent = _agent_of_path(path) or "main"
    key = _session_keys(path.parent).get(session, session)
    messages, bad = openclaw_messages(entries)
    return [
        Transcript(
            source=str(path), kind="openclaw-jsonl", session_id=openclaw_session_id(agent, key), session_key=key, agent=agent_of(key) or agent, messages=messages, unreadable=bad
        )
    ]


def _zstd_decoder() -> Any:
    try:
        import zstandard  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    return zstandard.ZstdDecompressor()


def read_openclaw_db(path: Path) -> list[Transcript]:
    """Every session of an OpenClaw 2026.9 agent database (read-only).
    Events stored zstd-compressed (the large ones) need ``zstandard``;
    without it they count as unreadable."""
    agent = _agent_of_path(path) or "main"
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    decoder = _zstd_decoder()
    try:
        windows = conn.execute("SELECT session_id, session_key FROM session_windows ORDER BY created_at, session_id").fetchall()
        out: list[Transcript] = []
        for session, key in windows:
            entries: list[dict[str, Any]] = []
            unreadable = 0
            for event_json, event_zstd in conn.execute(
                "SELECT event_json, event_zstd FROM transcript_events WHERE session_id = ? ORDER BY seq", (session,)
            ):
                try:
                    if event_json is None:
                        if decoder is None:
                            unreadable += 1
                            continue
                        event_json = decoder.decompress(event_zstd).decode()
                    entry = json.loads(event_json)
                except Exception:  # a corrupt or unreadable event
                    unreadable += 1
                    continue
                if isinstance(entry, dict):
                    entries.append(entry)
            messages, bad = openclaw_messages(entries)
            key = key or session
            out.append(
                Transcript(
                    source=f"{path}#{session}",
                    kind="openclaw-sqlite",
                    session_id=openclaw_session_id(agent, key),
                    session_key=key,
                    agent=agent_of(key) or agent,
                    messages=messages,
                    unreadable=unreadable + bad,
                )
            )
        return out
    finally:
        conn.close()


# ---------------------------------------------------------------- finding and importing


def _sniff(path: Path) -> SourceKind | None:
    if path.name == OPENCLAW_DB:
        return "openclaw-sqlite"
    if path.suffix != ".jsonl":
        return None
    try:
        with open(path, "rb") as f:
            first = json.loads(f.readline() or b"null")
    except (OSError, ValueError):
        return None
    if not isinstance(first, dict):
        return None
    if first.get("type") == "session_meta":
        return "codex"
    if first.get("type") == "session" or "message" in first:
        return "openclaw-jsonl"
    return None


def _in_openclaw_agent(path: Path) -> bool:
    """Whether a rollout is one of an OpenClaw agent's own Codex threads
    (``.../agents/<id>/agent/codex-home/...``)."""
    parts = path.parts
    return any(parts[i] == "agents" and parts[i + 2 : i + 4] == ("agent", "codex-home") for i in range(len(parts) - 3))


def discover(paths: Iterable[str | Path]) -> list[HistorySource]:
    """The sources under each path, in a stable order. A file is taken as
    what its content says. A folder is searched for OpenClaw transcripts
    (``agents/*/sessions/*.jsonl`` and ``agents/*/agent/openclaw-agent.sqlite``
    at any depth) and Codex rollouts (``rollout-*.jsonl``); the rollouts of
    OpenClaw's agents (``agents/<id>/agent/codex-home``) are the Codex
    threads behind its transcripts, the same conversations, and are left
    out unless given as files."""
    found: dict[str, HistorySource] = {}
    for given in paths:
        p = Path(given).expanduser()
        if p.is_file():
            candidates = [p]
        elif p.is_dir():
            candidates = sorted(
                [c for c in p.rglob("*.jsonl") if c.parent.name == "sessions" and c.parent.parent.parent.name == "agents"]
                + list(p.rglob(OPENCLAW_DB))
                + [c for c in p.rglob("rollout-*.jsonl") if not _in_openclaw_agent(c)]
            )
        else:
            continue
        for c in candidates:
            kind = _sniff(c)
            if kind is not None:
                found.setdefault(str(c.resolve()), HistorySource(kind, str(c)))
    return list(found.values())


def read_source(source: HistorySource) -> list[Transcript]:
    """The sessions of one source (a rollout or JSONL file: one)."""
    path = Path(source.path)
    if source.kind == "codex":
        return read_codex(path)
    if source.kind == "openclaw-jsonl":
        return read_openclaw_jsonl(path)
    return read_openclaw_db(path)


def import_transcript(
    store: Store | None, transcript: Transcript, *, dry_run: bool = False, seen: dict[str, set[str]] | None = None, redact: bool = True
) -> ImportResult:
    """Store the messages of ``transcript`` the store does not hold yet (by
    identity), in one transaction, and the session's agent. With ``dry_run``
    only count them: ``store`` may then be None (no store yet), and ``seen``
    keeps the identities counted so far, so that a session found in two
    sources is counted once, as the import would store it. ``redact``: the
    engine's ``redact_secrets``, credentials kept out of the store."""
    messages = transcript.messages
    idents = list(dict.fromkeys(identities(messages)))
    if dry_run:
        known = store.known_idents(transcript.session_id, idents) if store is not None and idents else set()
        counted = (seen if seen is not None else {}).setdefault(transcript.session_id, set())
        fresh = [i for i in idents if i not in known and i not in counted]
        counted.update(fresh)
        return ImportResult(session_id=transcript.session_id, messages=len(messages), new=len(fresh))
    if store is None:
        raise ValueError("a store is needed to import into")
    count: Callable[[Any], int] = estimate_message_tokens
    to_store = list(messages)
    if redact and messages:  # as the engine stores a turn: credentials out, identities and tokens of the originals
        from .redact import redact_batch

        to_store, count = redact_batch(messages, estimate_message_tokens)
    stored = store.ingest(transcript.session_id, transcript.session_key, to_store, identities(messages), count) if messages else []
    if transcript.agent is not None and messages:
        set_agent(store, transcript.session_id, transcript.agent)
    return ImportResult(session_id=transcript.session_id, messages=len(messages), new=len(stored or ()))  # None only with expect_stored


#: Why a session is left out: the sidecar served it, so the store holds it
#: from the sidecar's own transcript mirror (the engine's ``bootstrap``
#: reads it, if not stored yet, when the session resumes); the rollout or
#: transcript is a second record of it, with other timestamps, hence other
#: identities.
SKIP_REASONS = {
    "served": "a thread or OpenClaw session the sidecar served",
    "bound": "a Codex thread bound to a session the sidecar served",
    "backing": "a Codex thread a rebuild moved a served thread onto",
}


def sidecar_copy(transcript: Transcript, known: dict[str, str]) -> str | None:
    """Why ``transcript`` is one the sidecar holds already (a key of
    :data:`SKIP_REASONS`), else None. ``known``: id -> reason, the
    sidecar's threads and sessions (its state dir's ``sessions/``,
    ``bindings/``, ``relays/`` and ``backing/``). A rollout is known by its
    thread id, an OpenClaw transcript by the session the sidecar gives it."""
    return known.get(transcript.session_id)


def skipped_text(skipped: dict[str, int]) -> str:
    """The summary line's part for the sessions left out, '' for none."""
    total = sum(skipped.values())
    if not total:
        return ""
    parts = ", ".join(f"{n} {reason}" for reason, n in sorted(skipped.items()))
    return f"; skipped {total} session(s) the sidecar already stored ({parts})"


def default_places(env: dict[str, str], home: Path) -> list[Path]:
    """Where history is looked for when no path is given: Codex's sessions
    (``$CODEX_HOME/sessions``, else ``~/.codex/sessions``) and OpenClaw's
    state dir (``$OPENCLAW_STATE_DIR``, else ``~/.openclaw``)."""
    codex = Path(env["CODEX_HOME"]) if env.get("CODEX_HOME") else home / ".codex"
    openclaw = Path(env["OPENCLAW_STATE_DIR"]) if env.get("OPENCLAW_STATE_DIR") else home / ".openclaw"
    return [codex / "sessions", openclaw]


def default_paths(env: dict[str, str], home: Path) -> list[Path]:
    """Those of :func:`default_places` that exist."""
    return [p for p in default_places(env, home) if p.is_dir()]


def progress_text(done: int, total: int, sessions: int, new: int, width: int = 24) -> str:
    """One line of the import's progress bar."""
    filled = width * done // total if total else width
    return f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} files, {sessions} sessions, {new} new messages"
