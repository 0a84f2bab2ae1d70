#!/usr/bin/env python3
"""Test child: a small, deterministic double of ``codex app-server``.

It speaks the app-server's wire (newline-delimited JSON, no ``"jsonrpc"``;
shapes as in ``fixtures/*.jsonl``, recorded from codex 0.169.0) for the
methods the lifecycle cares about, and nothing else:

* ``initialize`` -> ``{userAgent, codexHome, platformFamily, platformOs}``;
* ``thread/start`` -> ``{thread:{id, cwd, path, turns:[], ...}, model, cwd, ...}``,
  then ``thread/started``; thread ids are ``thr-1``, ``thr-2``, ... per store;
* ``thread/resume`` -> the stored thread with its turns (none when
  ``excludeTurns`` is true); an unknown id is an error, as in Codex;
* ``thread/fork`` -> a new thread holding a copy of the parent's turns (cut
  before ``beforeTurnId`` or after ``lastTurnId``), ``forkedFromId`` set, then
  ``thread/started``;
* ``thread/read`` -> the thread, with turns when ``includeTurns`` is true;
* ``turn/start`` -> ``{turn:{id, status:"inProgress", ...}}``, then
  ``turn/started``, a ``userMessage`` item whose content is the input the
  child RECEIVED (so a test sees the projected text), an ``agentMessage``
  (unless the turn is interrupted or failed), ``thread/tokenUsage/updated``
  and ``turn/completed`` with the scripted status;
* ``thread/compact/start`` -> ``{}`` then a compaction turn (``turn/started``,
  a ``contextCompaction`` item, ``turn/completed``), or an error when scripted;
* ``thread/revert {threadId, beforeTurnId}`` -> drops that turn and every
  later one from the stored thread, in place (same id). As in Codex 0.169.0:
  ``thread/status/changed`` notLoaded, ``thread/readState/changed`` and
  ``thread/status/changed`` idle come BEFORE the response, and
  ``thread/reverted {threadId}`` AFTER it; the answer's
  ``turnsBackwardsCursor``/``itemsBackwardsCursor`` are ``fake:0``/``fakei:0``
  (a newest-first listing from the newest kept), null when none is kept. Errors (-32600): ``thread not
  found: <id>``, ``turn not found: <id>``, and ``thread/revert only supports
  paginated threads`` for a legacy thread (``historyMode: "legacy"`` in
  ``thread/start``, or every new thread with the script's ``legacy: true``);
* ``thread/turns/list {threadId, sortDirection, limit, cursor}`` ->
  ``{data: [turn...], nextCursor, backwardsCursor}``, newest first unless
  ``sortDirection`` is "asc", ``nextCursor`` ``fake:<offset>`` while more
  remain (null at the end), like Codex's own paging; ``thread/resume``
  with ``initialTurnsPage {limit, sortDirection}`` carries such a page;
* ``thread/items/list {threadId, turnId, sortDirection, limit, cursor}`` ->
  ``{data: [{item, turnId, startedAtMs, completedAtMs}...], nextCursor,
  backwardsCursor}``, oldest first unless "desc", cursors ``fakei:<offset>``
  or an item anchor ``{"type": "item", "itemId"}`` (the items after it);
* ``thread/unsubscribe {threadId}`` -> ``{status: "unsubscribed"}``, then,
  as Codex does once its unload delay is over, ``thread/status/changed``
  notLoaded and ``thread/closed {threadId}``; the thread leaves the loaded
  list (unless the script's ``closedButLoaded`` is true: the close is
  spurious and the thread stays loaded);
* ``thread/archive`` and ``thread/delete {threadId}`` -> ``{}``, then, as
  Codex 0.169.0 does, the thread leaves the loaded list and
  ``thread/archived`` (``thread/deleted``) ``{threadId}``, no ``thread/closed``;
* ``thread/loaded/list`` -> ``{data: [thread id...], nextCursor: null}``:
  the threads started, resumed or forked by this process and not closed;
* ``thread/inject_items {threadId, items}`` -> ``{}``; the items join the
  thread's history after its turns so far (``{"injected": items}`` in the
  model log's ``held``); a revert keeps those injected at or before its cut
  and drops the later ones, as Codex 0.169.0 does;
* ``turn/interrupt`` -> ``{}``; any other request -> error -32601.

``turn/start`` refuses (-32600, no turn) an input item of a type Codex does
not know (e.g. ``{"type": "no-such-input"}``), like Codex. A turn whose input
contains ``HOLD`` keeps running (no agent message, no ``turn/completed``)
until a ``turn/interrupt`` or a ``thread/revert`` of its thread ends it as
interrupted. A ``turn/start`` while such a turn runs joins it, as in Codex:
the answer carries the running turn's id and the input becomes a further
``userMessage`` item of that turn; a joined input containing ``RELEASE``
then lets the turn complete (an agent message, ``turn/completed``).

Environment:

* ``FAKE_CODEX_LOG``: every line received is appended here, byte for byte;
* ``FAKE_CODEX_SENT``: every line sent is appended here, byte for byte;
* ``FAKE_CODEX_MODEL``: what each turn's model would see, one JSON line per
  accepted ``turn/start``: ``{"threadId", "turnId", "held": [{"turnId",
  "additionalContext", "input", "reply"} or {"turnId", "compaction": true}...],
  "additionalContext", "input"}``, where ``held`` is the thread's stored history before this turn
  (what Codex would re-send) and the last two keys are this turn's own
  (``additionalContext`` is null when the request had none);
* ``FAKE_CODEX_STORE``: a JSON file holding the threads (so a fresh process
  can resume what an earlier one ran, like Codex's own rollout files);
* ``FAKE_CODEX_SCRIPT``: a JSON file with optional keys ``turns`` (a list,
  by the process's turn number from 0, of ``{"status": "completed" |
  "interrupted" | "failed", "reply": str, "repeatCompleted": bool, "codexErrorInfo": str
  (a failed turn's), "dropCompleted": bool, "dropIdle": bool}``; the last two leave out the
  turn's ``turn/completed`` or its ``thread/status/changed`` idle, as a lost
  notification would),
  ``defaultReply`` (str, ``{n}`` is the turn number from 1),
  ``compact`` (``"ok"`` or ``"error"``) and ``revertedLate`` (true or a
  number N: a revert's ``thread/reverted`` comes only after the next (N-th
  next) request is answered, as a slow Codex could send it) and
  ``revertNoAnswer`` (true: ``thread/revert`` is never answered) and
  ``revertDelay`` (seconds a ``thread/revert`` takes, nothing else answered
  meanwhile) and ``uuidThreadIds`` (true: thread ids shaped like Codex's
  UUIDs, ``01a20000-0000-7000-8000-<12 digits>``, instead of ``thr-N``) and
  ``threadStartFailsAfter`` (N: every ``thread/start`` after the first N is
  refused with -32603) and ``threadStartSlowAfter`` (N: every
  ``thread/start`` after the first N takes ``threadStartDelay`` seconds,
  default 0.5, nothing else answered meanwhile) and
  ``threadStartLate`` (a list, by the process's ``thread/start`` number
  from 0, of false, true or ``"never"``: true makes that start's thread at
  once, loaded, but sends its answer and ``thread/started`` only right
  after the next ``thread/loaded/list`` answer, as Codex's answer to a list
  can overtake a start's; ``"never"`` never sends them) and
  ``refuseAdditionalContext`` (N: the first N ``turn/start`` carrying
  ``additionalContext`` are refused with -32600, as a codex that will not
  take it would) and ``contextWindowChars``
  (N: a turn whose model input, the thread's held turns and this turn's
  input and ``additionalContext`` as JSON, is longer than N characters fails
  as codex 0.169.0 fails a turn over the model's context window:
  ``thread/status/changed`` systemError, ``error`` with ``codexErrorInfo``
  ``contextWindowExceeded``, ``turn/completed`` failed; a turn scripted
  ``{"status": "failed", "codexErrorInfo": "contextWindowExceeded"}`` fails
  so whatever its size).

Everything is deterministic: ids are counters, timestamps are fixed.
"""

from __future__ import annotations

import json
import os
import sys
import time

OVERFLOW_MESSAGE = "Codex ran out of room in the model's context window. Start a new thread or clear earlier history before retrying."
NOW_MS = 1_795_316_416_000
NOW_S = NOW_MS // 1000

out = sys.stdout.buffer
recv_log = open(os.environ["FAKE_CODEX_LOG"], "ab", buffering=0) if os.environ.get("FAKE_CODEX_LOG") else None
sent_log = open(os.environ["FAKE_CODEX_SENT"], "ab", buffering=0) if os.environ.get("FAKE_CODEX_SENT") else None
model_log = open(os.environ["FAKE_CODEX_MODEL"], "ab", buffering=0) if os.environ.get("FAKE_CODEX_MODEL") else None
store_path = os.environ.get("FAKE_CODEX_STORE")
script: dict = {}
if os.environ.get("FAKE_CODEX_SCRIPT"):
    with open(os.environ["FAKE_CODEX_SCRIPT"]) as f:
        script = json.load(f)

loaded: set[str] = set()  # threads this process started, resumed or forked and has not closed
threads: dict[str, dict] = {}  # id -> {"cwd", "turns": [turn...], "forkedFromId", "historyMode", "model": {turn id: what the model got}}
if store_path and os.path.exists(store_path):
    with open(store_path) as f:
        threads = json.load(f)
turn_number = 0  # turns run by this process (the script's index)
compactions = 0


def save() -> None:
    if store_path:
        tmp = store_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(threads, f)
        os.replace(tmp, store_path)


def send(obj: dict) -> None:
    line = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
    if sent_log:
        sent_log.write(line)
    out.write(line)


def result(rid, value) -> None:
    send({"id": rid, "result": value})


def error(rid, code: int, message: str) -> None:
    send({"id": rid, "error": {"code": code, "message": message}})


def notification(method: str, params: dict) -> dict:
    return {"method": method, "params": params, "emittedAtMs": NOW_MS}


def notify(method: str, params: dict) -> None:
    send(notification(method, params))


def thread_obj(tid: str, *, with_turns: bool) -> dict:
    t = threads[tid]
    return {
        "id": tid,
        "sessionId": tid,
        "forkedFromId": t.get("forkedFromId"),
        "preview": "",
        "ephemeral": False,
        "historyMode": t.get("historyMode", "paginated"),
        "modelProvider": "fake",
        "model": "fake-model",
        "createdAt": NOW_S,
        "updatedAt": NOW_S,
        "status": {"type": "idle"},
        "path": f"/tmp/fake-codex-home/sessions/rollout-{tid}{t.get('segment', '')}.jsonl",
        "cwd": t["cwd"],
        "cliVersion": "0.169.0",
        "source": "vscode",
        "turns": [dict(turn, itemsView="full") for turn in t["turns"]] if with_turns else [],
    }


def thread_result(tid: str, *, with_turns: bool) -> dict:
    return {
        "thread": thread_obj(tid, with_turns=with_turns),
        "model": "fake-model",
        "modelProvider": "fake",
        "cwd": threads[tid]["cwd"],
        "approvalPolicy": "never",
        "sandbox": {"type": "readOnly", "networkAccess": False},
        "reasoningEffort": None,
    }


def new_thread_id() -> str:
    if script.get("uuidThreadIds"):  # shaped like Codex's own (UUIDv7-like), numbered
        return f"01a20000-0000-7000-8000-{len(threads) + 1:012d}"
    return f"thr-{len(threads) + 1}"


def turn_obj(turn_id: str, status: str, items: list, view: str, error_obj=None) -> dict:
    done = status != "inProgress"
    return {
        "id": turn_id,
        "rootTurnId": turn_id,
        "items": items,
        "itemsView": view,
        "status": status,
        "error": error_obj,
        "startedAt": NOW_S,
        "completedAt": NOW_S if done else None,
        "durationMs": 5 if done else None,
    }


def item_completed(tid: str, turn_id: str, item: dict) -> None:
    notify("item/started", {"item": dict(item, completedAtMs=None), "threadId": tid, "turnId": turn_id, "startedAtMs": NOW_MS})
    notify(
        "item/completed",
        {"item": item, "threadId": tid, "turnId": turn_id, "contentTokenCount": None, "completedAtMs": NOW_MS},
    )


def token_usage(tid: str, turn_id: str, n: int) -> None:
    last = {"totalTokens": 100 + n, "inputTokens": 90 + n, "cachedInputTokens": 40, "cacheWriteInputTokens": 0, "outputTokens": 10, "reasoningOutputTokens": 0}
    notify(
        "thread/tokenUsage/updated",
        {"threadId": tid, "turnId": turn_id, "tokenUsage": {"total": last, "last": last, "modelContextWindow": 258400}},
    )


def run_turn(rid, params: dict) -> None:
    global turn_number
    tid = params.get("threadId")
    if tid not in threads:
        error(rid, -32600, f"thread not found: {tid}")
        return
    for item in params.get("input") or []:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind not in INPUT_TYPES:
            error(rid, -32600, f"Invalid request: unknown variant `{kind}`")
            return
    if tid in running:
        # A turn/start while the thread's turn runs joins it, as in Codex
        # 0.169.0: the running turn's id back, the input a further userMessage.
        turn_id = running[tid]
        result(rid, {"turn": turn_obj(turn_id, "inProgress", [], "notLoaded")})
        stored = next(t for t in threads[tid]["turns"] if t["id"] == turn_id)
        user = {"type": "userMessage", "id": f"{turn_id}-user-{len(stored['items']) + 1}", "clientId": None, "content": params.get("input") or [], "startedAtMs": NOW_MS, "completedAtMs": NOW_MS}
        item_completed(tid, turn_id, user)
        stored["items"].append(user)
        save()
        if "RELEASE" in json.dumps(params.get("input") or []):
            finish_running(tid)
        return
    spec = {}
    turns_script = script.get("turns") or []
    if turn_number < len(turns_script):
        spec = turns_script[turn_number] or {}
    turn_number += 1
    thread = threads[tid]
    # Numbered per thread, never reused: after a revert the thread holds fewer turns.
    thread["turnSeq"] = thread.get("turnSeq", len(thread["turns"])) + 1
    turn_id = f"{tid}-turn-{thread['turnSeq']}"
    status = spec.get("status", "completed")
    reply = spec.get("reply", script.get("defaultReply", "Reply {n}.").format(n=turn_number))
    seen = {"additionalContext": params.get("additionalContext"), "input": params.get("input") or []}
    if model_log:
        model = thread.setdefault("model", {})
        held = []
        for n, t in enumerate(thread["turns"]):
            held += [{"injected": i["items"]} for i in thread.get("injected", []) if i["at"] == n]
            held.append(dict(turnId=t["id"], **model.get(t["id"], {})))
        held += [{"injected": i["items"]} for i in thread.get("injected", []) if i["at"] == len(thread["turns"])]
        model_log.write(json.dumps({"threadId": tid, "turnId": turn_id, "held": held, **seen}, separators=(",", ":")).encode() + b"\n")
    window = script.get("contextWindowChars")
    if isinstance(window, int) and status == "completed":
        model_seen = thread.get("model", {})
        size = len(json.dumps([model_seen.get(t["id"], {}) for t in thread["turns"]] + [seen]))
        if size > window:
            status, spec = "failed", {**spec, "codexErrorInfo": "contextWindowExceeded"}
    thread.setdefault("model", {})[turn_id] = seen
    result(rid, {"turn": turn_obj(turn_id, "inProgress", [], "notLoaded")})
    notify("thread/status/changed", {"threadId": tid, "status": {"type": "active", "activeFlags": []}})
    notify("turn/started", {"threadId": tid, "turn": turn_obj(turn_id, "inProgress", [], "notLoaded")})
    user = {"type": "userMessage", "id": f"{turn_id}-user", "clientId": None, "content": params.get("input") or [], "startedAtMs": NOW_MS, "completedAtMs": NOW_MS}
    item_completed(tid, turn_id, user)
    if "HOLD" in json.dumps(params.get("input") or []) and status != "failed":
        # Runs until turn/interrupt or thread/revert ends it (interrupted).
        thread["turns"].append(turn_obj(turn_id, "inProgress", [user], "full"))
        save()
        running[tid] = turn_id
        return
    items = [user]
    summary: list = []
    error_obj = None
    if status == "completed":
        agent = {"type": "agentMessage", "moderation": None, "id": f"{turn_id}-agent", "text": reply, "phase": None, "memoryCitation": None, "delivery": None, "questions": None, "startedAtMs": NOW_MS, "completedAtMs": NOW_MS}
        notify("item/agentMessage/delta", {"threadId": tid, "turnId": turn_id, "itemId": agent["id"], "delta": reply})
        item_completed(tid, turn_id, agent)
        items.append(agent)
        summary = [agent]
        seen["reply"] = reply
        token_usage(tid, turn_id, turn_number)
    elif status == "failed" and spec.get("codexErrorInfo") == "contextWindowExceeded":
        # As codex 0.169.0 reports a model input over the context window.
        error_obj = {"message": OVERFLOW_MESSAGE, "codexErrorInfo": "contextWindowExceeded", "additionalDetails": None, "misalignment": None}
        notify("thread/status/changed", {"threadId": tid, "status": {"type": "systemError"}})
        notify("error", {"error": error_obj, "willRetry": False, "threadId": tid, "turnId": turn_id})
    elif status == "failed":
        error_obj = {"message": "scripted model failure", "codexErrorInfo": spec.get("codexErrorInfo", "other"), "additionalDetails": None}
        notify("error", {"error": error_obj, "willRetry": False, "threadId": tid, "turnId": turn_id})
    thread["turns"].append(turn_obj(turn_id, status, items, "full", error_obj))
    save()
    if not spec.get("dropIdle"):
        notify("thread/status/changed", {"threadId": tid, "status": {"type": "idle"}})
    view = "summary" if summary else "notLoaded"
    completed = {"threadId": tid, "turn": turn_obj(turn_id, status, summary, view, error_obj)}
    if not spec.get("dropCompleted"):
        notify("turn/completed", completed)
    if spec.get("repeatCompleted"):
        notify("turn/completed", completed)  # a replay of the same turn


def compact(rid, params: dict) -> None:
    global compactions
    tid = params.get("threadId")
    if tid not in threads:
        error(rid, -32600, f"thread not found: {tid}")
        return
    if script.get("compact") == "error":
        error(rid, -32603, "scripted compaction failure")
        return
    compactions += 1
    result(rid, {})
    thread = threads[tid]
    turn_id = f"{tid}-compaction-{compactions}"
    notify("turn/started", {"threadId": tid, "turn": turn_obj(turn_id, "inProgress", [], "notLoaded")})
    item = {"type": "contextCompaction", "id": f"{turn_id}-item", "startedAtMs": NOW_MS, "completedAtMs": NOW_MS}
    item_completed(tid, turn_id, item)
    thread["turns"].append(turn_obj(turn_id, "completed", [item], "full"))
    thread.setdefault("model", {})[turn_id] = {"compaction": True}
    save()
    notify("turn/completed", {"threadId": tid, "turn": turn_obj(turn_id, "completed", [], "notLoaded")})


INPUT_TYPES = ("text", "image", "localImage", "skill", "mention")


running: dict[str, str] = {}  # thread id -> its HOLD turn still running


def end_running(tid) -> None:
    """A running HOLD turn ends, interrupted (as Codex does on turn/interrupt
    or on a thread/revert of its thread)."""
    turn_id = running.pop(tid, None)
    if turn_id is None:
        return
    for t in threads[tid]["turns"]:
        if t["id"] == turn_id:
            t["status"] = "interrupted"
    save()
    notify("thread/status/changed", {"threadId": tid, "status": {"type": "idle"}})
    notify("turn/completed", {"threadId": tid, "turn": turn_obj(turn_id, "interrupted", [], "notLoaded")})


def finish_running(tid) -> None:
    """A running HOLD turn that a joined ``RELEASE`` input lets finish: an
    agent message, then ``turn/completed`` completed with every item."""
    turn_id = running.pop(tid)
    stored = next(t for t in threads[tid]["turns"] if t["id"] == turn_id)
    agent = {"type": "agentMessage", "moderation": None, "id": f"{turn_id}-agent", "text": "Joined reply.", "phase": None, "memoryCitation": None, "delivery": None, "questions": None, "startedAtMs": NOW_MS, "completedAtMs": NOW_MS}
    notify("item/agentMessage/delta", {"threadId": tid, "turnId": turn_id, "itemId": agent["id"], "delta": agent["text"]})
    item_completed(tid, turn_id, agent)
    stored["items"].append(agent)
    stored["status"] = "completed"
    save()
    notify("thread/status/changed", {"threadId": tid, "status": {"type": "idle"}})
    notify("turn/completed", {"threadId": tid, "turn": turn_obj(turn_id, "completed", [agent], "summary")})


def revert(rid, params: dict) -> None:
    """In place, as Codex 0.169.0 does it (docs/research/history-rebuild.md §2.3)."""
    tid = params.get("threadId")
    if tid not in threads:
        error(rid, -32600, f"thread not found: {tid}")
        return
    if script.get("revertNoAnswer"):
        return  # a Codex that never answers
    if script.get("revertDelay"):
        out.flush()
        time.sleep(float(script["revertDelay"]))  # a slow Codex: everything waits
    if tid in running:
        end_running(tid)  # a running turn is interrupted
    thread = threads[tid]
    if thread.get("historyMode") == "legacy":
        error(rid, -32600, "thread/revert only supports paginated threads")
        return
    before = params.get("beforeTurnId")
    ids = [t["id"] for t in thread["turns"]]
    if before not in ids:
        error(rid, -32600, f"turn not found: {before}")
        return
    cut = ids.index(before)
    for turn in thread["turns"][cut:]:
        thread.get("model", {}).pop(turn["id"], None)
    del thread["turns"][cut:]
    # As Codex 0.169.0's: items injected after a kept turn stay, later ones go.
    thread["injected"] = [i for i in thread.get("injected", []) if i["at"] <= cut]
    thread["reverts"] = thread.get("reverts", 0) + 1
    thread["segment"] = f"_segment-{thread['reverts']}"  # Codex writes a new rollout segment
    save()
    notify("thread/status/changed", {"threadId": tid, "status": {"type": "notLoaded"}})
    notify("thread/readState/changed", {"threadId": tid, "readState": {"firstUnread": None, "revision": f"rev-{thread['reverts']}"}})
    notify("thread/status/changed", {"threadId": tid, "status": {"type": "idle"}})
    # As Codex's: newest first from (and with) the newest turn and item kept;
    # none when nothing is left. Offsets into a desc listing, as this fake's are.
    kept_items = any(t.get("items") for t in thread["turns"])
    result(
        rid,
        {
            "thread": thread_obj(tid, with_turns=False),
            "turnsBackwardsCursor": "fake:0" if thread["turns"] else None,
            "itemsBackwardsCursor": "fakei:0" if kept_items else None,
        },
    )
    if script.get("revertedLate"):
        late.append([int(script["revertedLate"]), "thread/reverted", {"threadId": tid}])
    else:
        notify("thread/reverted", {"threadId": tid})


late: list[list] = []  # [requests to wait, method, params]: notifications held back
after_list: list[dict] = []  # frames sent right after the next thread/loaded/list answer


def turns_list(rid, params: dict) -> None:
    tid = params.get("threadId")
    if tid not in threads:
        error(rid, -32600, f"thread not found: {tid}")
        return
    page = turns_page(tid, params)
    if isinstance(page, str):
        error(rid, -32600, page)
        return
    result(rid, page)


def turns_page(tid: str, params: dict):
    """A thread/turns/list page (also resume's initialTurnsPage), or an error text."""
    turns = [dict(turn, itemsView="full") for turn in threads[tid]["turns"]]
    if params.get("sortDirection") != "asc":  # Codex's default is newest first
        turns.reverse()
    cursor = params.get("cursor")
    if cursor is not None:
        if not (isinstance(cursor, str) and cursor.startswith("fake:") and cursor[5:].isdigit()):
            return f"invalid cursor: {cursor}"
        turns = turns[int(cursor[5:]) :]
    start = int(cursor[5:]) if cursor else 0
    limit = params.get("limit")
    more = None
    if isinstance(limit, int) and limit >= 0 and len(turns) > limit:
        turns, more = turns[:limit], f"fake:{start + limit}"
    return {"data": turns, "nextCursor": more, "backwardsCursor": f"fake-back:{start}" if turns else None}


def items_list(rid, params: dict) -> None:
    tid = params.get("threadId")
    if tid not in threads:
        error(rid, -32600, f"thread not found: {tid}")
        return
    turns = threads[tid]["turns"]
    if params.get("turnId") is not None:
        turns = [t for t in turns if t["id"] == params["turnId"]]
        if not turns:
            error(rid, -32600, f"turn not found: {params['turnId']}")
            return
    entries = [
        {"item": item, "turnId": t["id"], "startedAtMs": item.get("startedAtMs"), "completedAtMs": item.get("completedAtMs")}
        for t in turns
        for item in t.get("items") or []
    ]
    if params.get("sortDirection") == "desc":  # Codex's default here is oldest first
        entries.reverse()
    cursor = params.get("cursor")
    start = 0
    if isinstance(cursor, dict) and cursor.get("type") == "item":
        ids = [e["item"].get("id") for e in entries]
        start = ids.index(cursor.get("itemId")) + 1 if cursor.get("itemId") in ids else len(ids)
    elif cursor is not None:
        if not (isinstance(cursor, str) and cursor.startswith("fakei:") and cursor[6:].isdigit()):
            error(rid, -32600, f"invalid cursor: {cursor}")
            return
        start = int(cursor[6:])
    entries = entries[start:]
    limit = params.get("limit")
    more = None
    if isinstance(limit, int) and limit >= 0 and len(entries) > limit:
        entries, more = entries[:limit], f"fakei:{start + limit}"
    result(rid, {"data": entries, "nextCursor": more, "backwardsCursor": f"fakei-back:{start}" if entries else None})


def handle(msg: dict) -> None:
    method = msg.get("method")
    if "id" not in msg or method is None:
        return  # notifications (initialized) and responses need no answer
    rid = msg["id"]
    params = msg.get("params") or {}
    if method == "initialize":
        result(rid, {"userAgent": "fake_codex/0.169.0 (Linux; test)", "codexHome": "/tmp/fake-codex-home", "platformFamily": "unix", "platformOs": "linux"})
    elif method == "thread/start":
        starts = script.setdefault("_starts", 0) + 1
        script["_starts"] = starts
        limit = script.get("threadStartFailsAfter")
        if isinstance(limit, int) and starts > limit:
            error(rid, -32603, "thread/start refused (scripted)")
            return
        slow = script.get("threadStartSlowAfter")
        if isinstance(slow, int) and starts > slow:
            out.flush()
            time.sleep(float(script.get("threadStartDelay", 0.5)))  # a slow Codex: everything waits
        tid = new_thread_id()
        threads[tid] = {"cwd": params.get("cwd") or "/tmp/fake-work", "turns": [], "forkedFromId": None}
        if params.get("historyMode") == "legacy" or script.get("legacy"):
            threads[tid]["historyMode"] = "legacy"
        save()
        loaded.add(tid)
        frames = [{"id": rid, "result": thread_result(tid, with_turns=False)}, notification("thread/started", {"thread": thread_obj(tid, with_turns=False)})]
        answered_late = script.get("threadStartLate") or []
        if starts <= len(answered_late) and answered_late[starts - 1]:
            if answered_late[starts - 1] != "never":
                after_list.extend(frames)  # loaded already: the list names it
            return
        for one in frames:
            send(one)
    elif method == "thread/resume":
        tid = params.get("threadId")
        if tid not in threads:
            error(rid, -32600, f"no rollout found for thread id {tid}")
            return
        loaded.add(tid)
        answer = thread_result(tid, with_turns=not params.get("excludeTurns"))
        if isinstance(params.get("initialTurnsPage"), dict):
            answer["initialTurnsPage"] = turns_page(tid, params["initialTurnsPage"])
        result(rid, answer)
    elif method == "thread/fork":
        parent = params.get("threadId")
        if parent not in threads:
            error(rid, -32600, f"no rollout found for thread id {parent}")
            return
        turns = []
        for turn in threads[parent]["turns"]:
            if turn["id"] == params.get("beforeTurnId"):
                break
            turns.append(json.loads(json.dumps(turn)))
            if turn["id"] == params.get("lastTurnId"):
                break
        tid = new_thread_id()
        threads[tid] = {"cwd": params.get("cwd") or threads[parent]["cwd"], "turns": turns, "forkedFromId": parent}
        model = threads[parent].get("model", {})
        threads[tid]["model"] = {t["id"]: model[t["id"]] for t in turns if t["id"] in model}
        if threads[parent].get("historyMode") == "legacy":
            threads[tid]["historyMode"] = "legacy"  # a fork of a legacy thread is legacy too
        save()
        loaded.add(tid)
        result(rid, thread_result(tid, with_turns=not params.get("excludeTurns")))
        notify("thread/started", {"thread": thread_obj(tid, with_turns=False)})
    elif method == "thread/read":
        tid = params.get("threadId")
        if tid not in threads:
            error(rid, -32600, f"thread not found: {tid}")
            return
        result(rid, {"thread": thread_obj(tid, with_turns=bool(params.get("includeTurns")))})
    elif method == "turn/start":
        refusals = script.get("refuseAdditionalContext", 0)
        if params.get("additionalContext") is not None and refusals:
            script["refuseAdditionalContext"] = refusals - 1
            error(rid, -32600, "turn/start.additionalContext requires experimentalApi capability")
            return
        run_turn(rid, params)
    elif method == "thread/compact/start":
        compact(rid, params)
    elif method == "thread/revert":
        revert(rid, params)
    elif method == "thread/turns/list":
        turns_list(rid, params)
    elif method == "thread/items/list":
        items_list(rid, params)
    elif method == "thread/unsubscribe":
        tid = params.get("threadId")
        result(rid, {"status": "unsubscribed" if tid in loaded else "notLoaded"})
        if tid in loaded:
            if not script.get("closedButLoaded"):
                loaded.discard(tid)
            notify("thread/status/changed", {"threadId": tid, "status": {"type": "notLoaded"}})
            notify("thread/closed", {"threadId": tid})
    elif method in ("thread/archive", "thread/delete"):
        tid = params.get("threadId")
        if tid not in threads:
            error(rid, -32600, f"thread not found: {tid}")
            return
        result(rid, {})
        loaded.discard(tid)
        notify("thread/archived" if method == "thread/archive" else "thread/deleted", {"threadId": tid})
    elif method == "thread/loaded/list":
        result(rid, {"data": sorted(loaded), "nextCursor": None})
        for one in after_list:
            send(one)
        after_list.clear()
    elif method == "thread/inject_items":
        tid = params.get("threadId")
        if tid not in threads:
            error(rid, -32600, f"thread not found: {tid}")
            return
        threads[tid].setdefault("injected", []).append({"at": len(threads[tid]["turns"]), "items": params.get("items") or []})
        save()
        result(rid, {})
    elif method == "turn/interrupt":
        result(rid, {})
        end_running(params.get("threadId"))
    else:
        error(rid, -32601, f"method not found: {method}")


for line in sys.stdin.buffer:
    if recv_log:
        recv_log.write(line if line.endswith(b"\n") else line + b"\n")
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if isinstance(msg, dict):
        waiting = list(late)  # held before this request: one request nearer
        handle(msg)
        for entry in waiting:
            entry[0] -= 1
            if entry[0] <= 0:
                late.remove(entry)
                notify(entry[1], entry[2])
    out.flush()
