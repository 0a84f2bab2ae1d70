"""Which OpenClaw session a Codex thread belongs to (pure, no I/O).

OpenClaw's unit is the session; one session spans many Codex threads
(OpenClaw starts a new thread whenever the old one's binding no longer fits:
web search switched, tools changed, ``--local`` to gateway, ...) and many
app-server processes. The sidecar's engine, mirror and store follow the
session, so it needs the session of every thread:

1. OpenClaw's native hook relay id, ``--relay-id codex-<40 hex>`` inside the
   hook command string at ``config["hooks.PermissionRequest"][0].hooks[0].command``
   of ``thread/start`` and ``thread/resume`` (a hash of OpenClaw's agent id
   and session key: the same over processes and threads, another for
   another session). Absent when OpenClaw turns hooks off.
2. Else, a new thread whose first turn input is OpenClaw's continuity
   projection of a known session's transcript continues that session
   (:func:`match_transcript`, by content).
3. Else the Codex thread id: the thread is a session of its own.

A thread's binding, once made, is persisted (``sidecar.store.bindings``), so
a later process resuming the thread finds its session again without any of
these clues; it comes before the relay id, whose format OpenClaw may change
(its source trees carry a v2 hash that adds a generation: a new relay id for
each new binding, and so possibly each process).

**Resets** (:func:`first_turn`). OpenClaw's ``/new`` and ``/reset`` keep the
session key and id (so the v1 relay id), write a reset marker into OpenClaw's
transcript, retire the Codex thread and start a new one. What reaches the
wire: a ``thread/start`` with the session's relay id whose first turn carries
no continuity projection, although the session has history (a rotation always
renders OpenClaw's transcript into the new thread's first turn; after a reset
OpenClaw's context starts at the marker, empty). The new thread then starts a
new engine session of its own (:func:`reset_session`), and the relay id names
it from then on (``sidecar.store.bindings`` keeps the relay's current session).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from engines import AgentMessage, AssistantMessage, TextBlock, UserMessage

from ..projection import user_request
from .continuity import needle, normalise

Via = Literal["relay", "continuity", "thread", "bound", "reset"]
"""How a thread's session was found: OpenClaw's hook relay id, a continuity
projection matched by content, the thread itself, the persisted binding, or
OpenClaw's reset (the thread began a new session)."""

FirstTurn = Literal["keep", "match", "reset"]
"""What a new thread's first turn says of its session: nothing new (keep),
look for the known session its continuity projection renders (match), or
OpenClaw reset the session (reset)."""

RELAY_ID = re.compile(r"--relay-id(?:=|['\"]?\s+)['\"]?(codex-[0-9a-f]{40})(?![0-9A-Za-z])")
HOOK_KEY = "hooks.PermissionRequest"
MAX_SCAN = 64
"""Hook entries looked at beyond the documented one (a shape we do not know)."""

RECENT_MESSAGES = 8
"""Newest mirrored messages of a candidate session a match is judged on
(OpenClaw drops the oldest context first, never the newest)."""



def _commands_at(value: Any) -> Iterable[str]:
    """Hook command strings in a ``hooks.<Event>`` value: a list of matcher
    groups, each with a ``hooks`` list of ``{type, command}``."""
    if not isinstance(value, list):
        return
    for group in value[:MAX_SCAN]:
        hooks = group.get("hooks") if isinstance(group, Mapping) else None
        if not isinstance(hooks, list):
            continue
        for hook in hooks[:MAX_SCAN]:
            command = hook.get("command") if isinstance(hook, Mapping) else None
            if isinstance(command, str):
                yield command
            elif isinstance(command, list):  # an argv form
                yield " ".join(str(a) for a in command)


def _relay_ids(commands: Iterable[str]) -> list[str]:
    found: list[str] = []
    for command in commands:
        for match in RELAY_ID.finditer(command[:65536]):
            if match.group(1) not in found:
                found.append(match.group(1))
    return found


def relay_id(params: Any) -> str | None:
    """OpenClaw's native hook relay id in ``thread/start`` / ``thread/resume``
    params, or None. The documented place first (``hooks.PermissionRequest``,
    as a dotted key of ``config`` or nested under ``config.hooks``); else any
    other hook event's commands, when they name one id only. Never raises."""
    try:
        config = params.get("config") if isinstance(params, Mapping) else None
        if not isinstance(config, Mapping):
            return None
        nested = config.get("hooks")
        nested = nested if isinstance(nested, Mapping) else {}
        for value in (config.get(HOOK_KEY), nested.get("PermissionRequest")):
            ids = _relay_ids(_commands_at(value))
            if len(ids) == 1:
                return ids[0]
            if ids:
                return None  # two sessions named at once: trust neither
        others = sorted(k for k in list(config)[:MAX_SCAN] if isinstance(k, str) and k.startswith("hooks."))
        commands = [c for key in others for c in _commands_at(config[key])]
        commands += [c for key in sorted(k for k in nested if isinstance(k, str)) for c in _commands_at(nested[key])]
        ids = _relay_ids(commands)
        return ids[0] if len(ids) == 1 else None
    except Exception:  # a shape we never imagined: no id, never an error
        return None


def decide(*, relay: str | None, bound: str | None, thread_id: str, relay_session: str | None = None) -> tuple[str, Via]:
    """A thread's session when it is opened (``thread/start`` or
    ``thread/resume``): the persisted binding (a thread stays in the session
    it was bound to, whatever relay id a later process resumes it with),
    else the session the relay id names (``relay_session``: the one a reset
    or a content match gave it; else the relay id itself), else the thread
    itself (a continuity match may still bind a new thread at its first
    turn)."""
    if bound is not None:
        return bound, "bound"
    if relay is not None:
        return (relay_session or relay), "relay"
    return thread_id, "thread"


def first_turn(*, via: str, had_history: bool, projected: bool) -> FirstTurn:
    """The rule for the first turn of a thread started in this process.

    ``projected``: the input carries OpenClaw's continuity projection;
    ``had_history``: the session the thread was opened in has mirrored
    messages. A continuity projection on a thread with no session of its
    own yet (the thread itself, or a relay id naming nothing known: a relay
    id that changes with each binding) is matched by content. No projection
    on a new thread of a relay-named session with history is OpenClaw's
    reset: its context starts empty at its reset marker, where a rotation
    renders its transcript. Anything else keeps the session."""
    if projected:
        return "match" if via == "thread" or (via == "relay" and not had_history) else "keep"
    return "reset" if via == "relay" and had_history else "keep"


def reset_session(thread_id: str) -> str:
    """The engine session a reset begins: the new thread's own id (the
    session a thread with no clue has; unique, and the same in every
    process that decides it)."""
    return thread_id


def session_key(template: str, session_id: str) -> str:
    """The engine's ``session_key`` from the ``session_key`` setting:
    ``{thread_id}`` (the historical name) and ``{session_id}`` are both the
    session. A template that does not format gives the session id."""
    try:
        return template.format_map({"thread_id": session_id, "session_id": session_id})
    except (KeyError, ValueError, IndexError, AttributeError, TypeError):
        return session_id


# ----------------------------------------------------------------------
# matching a continuity projection to a known session, by content


def _message_text(message: AgentMessage) -> str:
    if isinstance(message, UserMessage):
        if isinstance(message.content, str):
            return user_request(message.content)
        return "\n".join(user_request(b.text) for b in message.content if isinstance(b, TextBlock))
    if isinstance(message, AssistantMessage):
        return "\n".join(b.text for b in message.content if isinstance(b, TextBlock))
    return ""


def needles(messages: Sequence[AgentMessage]) -> list[str]:
    """What of a session's newest messages a rendering of it must contain:
    the start of each user and assistant text, newest last (not the role
    tag: OpenClaw may render a part before the text, a thinking
    placeholder, a sender); texts too short to tell apart are left out."""
    return [n for n in (needle(_message_text(m)) for m in messages[-RECENT_MESSAGES:]) if n is not None]


def match_transcript(context: str, candidates: Mapping[str, Sequence[AgentMessage]]) -> str | None:
    """The one known session whose transcript ``context`` (the body of a
    continuity projection) renders, or None.

    A candidate scores the number of its :func:`needles` found in the
    context; it must find at least half of them (and one), and score
    strictly more than every other candidate: a tie binds nothing, so two
    sessions are never merged on a guess. Deterministic: the same inputs
    give the same answer whatever the candidates' order."""
    haystack = normalise(context)
    if not haystack:
        return None
    scores: list[tuple[int, str]] = []
    for session_id in sorted(candidates):
        wanted = needles(candidates[session_id])
        if not wanted:
            continue
        found = sum(1 for n in wanted if n in haystack)
        if found >= max(1, math.ceil(len(wanted) / 2)):
            scores.append((found, session_id))
    if not scores:
        return None
    scores.sort(key=lambda s: (-s[0], s[1]))
    if len(scores) > 1 and scores[0][0] == scores[1][0]:
        return None
    return scores[0][1]
