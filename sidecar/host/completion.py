"""``host.complete``: one model call on a Codex thread the sidecar owns.

The call goes through the same Codex app-server as the client's turns, so
it uses the user's model, provider and credentials:

1. ``thread/start`` from the sidecar (never mapped at the edge), with
   ``ephemeral: true`` (Codex writes no rollout, so the thread is in no
   ``thread/list``), the client's last ``cwd``, ``model`` and
   ``modelProvider`` (the call's ``model`` wins), the engine's ``system``
   as ``developerInstructions``, no dynamic tools, ``approvalPolicy:
   "never"`` and a read-only sandbox (nothing to approve, nothing written).
   It is *lean*: short ``baseInstructions`` in place of Codex's coding-agent
   prompt, and ``config`` overrides that leave out the tools a text-only
   call cannot use (sub-agents, web search, goals, the shell). That cuts
   Codex's framing of each call from about 8.9k tokens to about 1.4k
   (codex 0.169.0), and none of it would be cached: each call is a thread
   of its own. A Codex that refuses those params gets the plain start from
   then on;
2. from the moment Codex answers, the thread is *owned*: the edge
   (:class:`~sidecar.history.backing.BackingThreads`) drops every frame
   naming it before any hook or the client sees it, hands it to this call's
   :class:`Collector`, and leaves it out of ``thread/loaded/list``;
3. ``turn/start`` with the prompt (and the call's ``effort``); the answer is the last ``agentMessage``
   of the turn, once ``turn/completed`` comes;
4. afterwards (in the background, also after a timeout or cancellation):
   ``turn/interrupt`` if the turn is still running, then
   ``thread/unsubscribe``. The thread stays hidden for the life of the
   process, so a late frame about it is dropped too.

Everything runs under the engine deadline; any failure raises
:class:`~engines.api.EngineHostError`. At most :data:`CONCURRENCY` calls
run at once; more wait their turn (within their deadline).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import msgspec
import trio

from engines import CompleteParams, CompleteResult, EngineHostError, Usage
from protocol import encode_error

from ..history.backing import BackingThreads
from ..rebuild.fresh import SPARE_QUIET
from ..relay import Proxy, RpcError

log = logging.getLogger("codex_sidecar.host")

CONCURRENCY = 2
"""Model calls of the engine's running at once."""
START_KEYS = ("cwd", "model", "modelProvider")
"""What a completion thread takes from the client's last thread."""
CLIENT_OPENING = frozenset({"thread/start", "thread/resume", "thread/fork"})
LEAN_BASE_INSTRUCTIONS = "You are called by a program, not a person. Follow the developer instructions and answer with text only."
"""Codex's base instructions on a completion thread (its own are a coding agent's)."""
LEAN_CONFIG = {"agents.enabled": False, "web_search": "disabled", "features.goals": False, "features.shell_tool": False}
"""Config overrides of a completion thread: no tools a text-only call could use."""


def start_params(client: dict[str, Any], params: CompleteParams, *, lean: bool = True) -> dict[str, Any]:
    """The ``thread/start`` params of one completion thread."""
    out: dict[str, Any] = {k: client[k] for k in START_KEYS if isinstance(client.get(k), str)}
    if params.model:
        out["model"] = params.model
    out.update(
        {
            "ephemeral": True,
            "developerInstructions": params.system,
            "approvalPolicy": "never",
            "sandbox": "read-only",
        }
    )
    if lean:
        out["baseInstructions"] = LEAN_BASE_INSTRUCTIONS
        out["config"] = dict(LEAN_CONFIG)
    return out


def turn_params(thread_id: str, params: CompleteParams) -> dict[str, Any]:
    """The ``turn/start`` params of one completion: the prompt, and the
    call's ``effort`` when it gives one (else the model's default)."""
    out: dict[str, Any] = {"threadId": thread_id, "input": [{"type": "text", "text": params.prompt, "text_elements": []}]}
    if params.effort:
        out["effort"] = params.effort
    return out


class Collector(msgspec.Struct):
    """What the frames of one completion thread say, sans I/O: fed each
    frame the edge drops for the thread, in order."""

    thread_id: str
    text: str | None = None
    usage: Usage | None = None
    error: str | None = None
    turn_id: str | None = None
    finished: bool = False
    requests: list[Any] = msgspec.field(default_factory=list)
    """Ids of server requests Codex sent about the thread (refused)."""

    def feed(self, line: bytes) -> None:
        try:
            msg = json.loads(line)
        except ValueError:
            return
        if not isinstance(msg, dict):
            return
        method, params = msg.get("method"), msg.get("params")
        if "id" in msg and isinstance(method, str):
            self.requests.append(msg["id"])
            return
        if not isinstance(params, dict):
            return
        if method == "item/completed":
            item = params.get("item")
            if isinstance(item, dict) and item.get("type") == "agentMessage" and isinstance(item.get("text"), str):
                self.text = item["text"]
        elif method == "thread/tokenUsage/updated":
            last = (params.get("tokenUsage") or {}).get("last") if isinstance(params.get("tokenUsage"), dict) else None
            if isinstance(last, dict):
                cached = int(last.get("cachedInputTokens") or 0)
                self.usage = Usage(
                    input=max(0, int(last.get("inputTokens") or 0) - cached),
                    output=int(last.get("outputTokens") or 0),
                    cache_read=cached,
                    cache_write=int(last.get("cacheWriteInputTokens") or 0),
                    total_tokens=int(last.get("totalTokens") or 0),
                )
        elif method == "turn/started":
            started = params.get("turn")
            if isinstance(started, dict) and isinstance(started.get("id"), str):
                self.turn_id = started["id"]
        elif method == "turn/completed":
            done = params.get("turn")
            turn: dict[str, Any] = done if isinstance(done, dict) else {}
            status = turn.get("status")
            if status != "completed":
                error = turn.get("error") if isinstance(turn.get("error"), dict) else {}
                self.error = f"the model call ended {status or 'without a status'}" + (": codex reported an error" if error else "")
            self.finished = True

    def result(self) -> CompleteResult:
        """The answer, once finished; raises :class:`EngineHostError` for a failed turn."""
        if self.error is not None:
            raise EngineHostError(self.error)
        return CompleteResult(text=self.text or "", usage=self.usage)


class Completions:
    """Runs ``host.complete`` through ``proxy``; frames hidden by ``backing``."""

    def __init__(self, proxy: Proxy, backing: BackingThreads, deadline: float) -> None:
        self.proxy = proxy
        self.backing = backing
        self.deadline = deadline
        self.client_thread: dict[str, Any] = {}
        """The settings of the client's newest thread (cwd, model, provider as
        Codex answered), noted by the lifecycle: a completion thread takes them."""
        self.limiter = trio.CapacityLimiter(CONCURRENCY)
        self.lean = True
        """Start completion threads lean until Codex refuses it once."""
        self.stats = {"calls": 0, "failed": 0, "threads": 0}

    async def complete(self, params: CompleteParams) -> CompleteResult:
        if not isinstance(params, CompleteParams):
            raise EngineHostError("complete takes a CompleteParams")
        if not self.proxy.running:
            raise EngineHostError("the codex app-server is not running")
        self.stats["calls"] += 1
        started = trio.current_time()
        try:
            with trio.fail_after(self.deadline):
                async with self.limiter:
                    result = await self._call(params)
        except trio.TooSlowError:
            self.stats["failed"] += 1
            log.warning("host completion timed out", extra={"fields": {"deadlineSeconds": self.deadline}})
            raise EngineHostError(f"no answer within {self.deadline:g} seconds") from None
        except RpcError as exc:
            self.stats["failed"] += 1
            log.warning("host completion refused by codex", extra={"fields": {"code": exc.code}})
            raise EngineHostError(f"codex refused the call ({exc.code})") from None
        except EngineHostError:
            self.stats["failed"] += 1
            raise
        log.info("host completion answered", extra={"fields": {"ms": round((trio.current_time() - started) * 1000, 1)}})
        return result

    async def _call(self, params: CompleteParams) -> CompleteResult:
        done = trio.Event()
        state: dict[str, Any] = {"collector": None, "abandoned": False}

        def owned(result: Any) -> None:
            # As Codex's answer is read: hidden before the thread's first frame.
            thread = result.get("thread") if isinstance(result, dict) else None
            thread_id = thread.get("id") if isinstance(thread, dict) else None
            if not isinstance(thread_id, str):
                return
            collector = Collector(thread_id)
            state["collector"] = collector
            self.stats["threads"] += 1

            def listen(line: bytes) -> None:
                collector.feed(line)
                while collector.requests:
                    # Nothing of this thread may wait on the client: refuse.
                    self.proxy.router.send_to_child(encode_error(collector.requests.pop(), -32601, "not available to the sidecar's own model calls"), raw=True)
                if collector.finished:
                    done.set()

            self.backing.own(thread_id, listen)
            if state["abandoned"]:
                self.proxy.spawn(self._release, collector)

        await self._quiet()
        self.backing.spare_starts += 1  # its unattributed notifications are not the client's
        try:
            await self._start(params, owned)
            collector: Collector | None = state["collector"]
            if collector is None:
                raise EngineHostError("codex started no thread")
            await self.proxy.request("turn/start", turn_params(collector.thread_id, params), raw=True)
            await done.wait()
            return collector.result()
        finally:
            self.proxy.spawn(self._quieted)
            if state["collector"] is not None:
                self.proxy.spawn(self._release, state["collector"])
            else:
                state["abandoned"] = True  # a late answer to the start releases it

    async def _start(self, params: CompleteParams, owned: Callable[[Any], None]) -> None:
        """``thread/start`` the lean way; once, the plain way, if Codex refuses it."""
        client = self.client_thread
        if self.lean:
            try:
                await self.proxy.request("thread/start", start_params(client, params), raw=True, on_result=owned)
                return
            except RpcError as exc:
                self.lean = False
                log.warning("codex refused a lean completion thread; using plain ones", extra={"fields": {"code": exc.code}})
        await self.proxy.request("thread/start", start_params(client, params, lean=False), raw=True, on_result=owned)

    async def _quiet(self) -> None:
        """Wait until no client thread/start, resume or fork is unanswered:
        the notifications a start sends that name no thread would be taken
        for the client's."""
        while self.proxy.router.pending.methods() & CLIENT_OPENING:
            await trio.sleep(0.02)

    async def _quieted(self) -> None:
        await trio.sleep(SPARE_QUIET)  # notifications that trail the answer
        self.backing.spare_starts = max(0, self.backing.spare_starts - 1)

    async def _release(self, collector: Collector) -> None:
        """Stop the turn if it still runs, and let Codex unload the thread
        (it stays hidden: a late frame is dropped too)."""
        thread_id = collector.thread_id
        try:
            with trio.fail_after(self.deadline):
                if not collector.finished and collector.turn_id is not None:
                    await self.proxy.request("turn/interrupt", {"threadId": thread_id, "turnId": collector.turn_id}, raw=True)
                await self.proxy.request("thread/unsubscribe", {"threadId": thread_id}, raw=True)
        except (RpcError, trio.TooSlowError) as exc:
            log.info("completion thread not released", extra={"fields": {"error": type(exc).__name__}})
        finally:
            self.backing.disown(thread_id)
