"""Engine tools on the client's threads: offered, answered, kept out of sight.

* ``thread/start``: the engine's tools are appended to the client's
  ``dynamicTools`` (a name the client declares stays the client's); once
  Codex answers, the thread's offered names are recorded
  (:class:`~.offered.OfferedTools`). A fork inherits its parent's (Codex
  copies the parent's dynamic tools).
* ``item/tool/call`` for one of them: answered by the sidecar through the
  engine's ``call_tool`` under the engine deadline (an exception or a
  timeout becomes an error result the model reads); the client never gets
  the request, nor Codex's ``serverRequest/resolved`` for it.
* Their ``dynamicToolCall`` items: ``item/started`` and ``item/completed``
  are dropped (before the lifecycle's hooks, so the transcript mirror never
  has them: they are the engine's own recall, not the conversation), and
  every read (``thread/read``, ``thread/resume``, ``thread/fork``,
  ``thread/turns/list``, ``thread/items/list``, ``turn/completed``) loses
  them, whether Codex answered it or the sidecar's archive did.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from engines import RuntimeContext, ToolCallParams, ToolCallResult, ToolSpec, optional_method
from protocol import encode_response

from ..relay import HANDLED, Decision, Message, PendingRequest, Slot
from ..session.context import LifecycleContext
from ..session.identity import session_key
from ..session.state import ThreadSession
from ..thread.session_events import EngineToolAnswered
from ..thread.state import handle
from .contain import contained, contained_sync
from .offered import NONE, OfferedTools
from .tools import call_arguments, engine_call, failed_answer, is_engine_item, mentions_tool_call, merge_tools, tool_answer, usable_specs, without_engine_items

log = logging.getLogger("codex_sidecar.host")

ANSWERED_KEPT = 1024

# What a client request's hooks keep on it for its answer's (PendingRequest.note):
OFFERED = Slot[tuple[str, ...]]("engine_tools.offered")
"""A thread/start's: the names its rewritten params offer."""
PARENT = Slot[str]("engine_tools.parent")
"""A thread/fork's: the parent thread."""
LISTED = Slot[str]("engine_tools.listed")
"""A listing's: its thread."""
TOOL_CALLS_KEPT = 32
"""Engine tool calls a turn's inspection record keeps (the first)."""
TOOL_TEXT_KEPT = 16_384
"""Characters of an answer an inspection record keeps."""
"""Ids of answered tool calls remembered for their ``serverRequest/resolved``
(and listings remembered for their answers)."""


def engine_specs(engine: Any) -> list[ToolSpec]:
    """The engine's tools Codex can take, or none (no ``tools`` or no
    ``call_tool``, or ``tools()`` failed: logged, the engine runs without)."""
    tools = optional_method(engine, "tools")
    if tools is None or optional_method(engine, "call_tool") is None:
        return []
    try:
        specs = list(contained_sync(tools))
    except Exception as exc:
        log.warning("engine tools() failed; no engine tools offered", extra={"fields": {"error": type(exc).__name__}})
        return []
    usable = usable_specs(specs)
    if len(usable) != len(specs):
        log.warning("engine tools left out (no name, a duplicate or no object schema)", extra={"fields": {"leftOut": len(specs) - len(usable)}})
    return usable


class EngineTools:
    def __init__(
        self,
        ctx: LifecycleContext,
        engine: Any,
        specs: list[ToolSpec],
        offered: OfferedTools,
        runtime: Callable[[ThreadSession], RuntimeContext],
    ) -> None:
        self.proxy = ctx.proxy
        self.engine = engine
        self.specs = specs
        self.names = frozenset(s.name for s in specs)
        self.offered = offered
        self.sessions = ctx.sessions
        self.options = ctx.options
        self.runtime = runtime
        self._answered: dict[Any, None] = {}
        """Server request ids the sidecar answered (oldest first)."""
        self.stats = {"calls": 0, "errors": 0, "framesDropped": 0}

    # ------------------------------------------------------------ wiring
    # Its hooks are rows of sidecar.methods.METHODS (part TOOLS): the
    # request hooks and the item drops run before the lifecycle's (FRONT:
    # the rewritten thread/start is what the lifecycle remembers, so a
    # backing thread is started with the same tools, and the engine's items
    # never reach the mirror); the answers' after them (BACK: what the
    # client reads, archived turns spliced in, loses the engine's items).

    def names_for(self, thread_id: str) -> frozenset[str]:
        return self.offered.get(thread_id)

    # ------------------------------------------------------- offering them

    def on_thread_start(self, msg: Message) -> Decision:
        params = msg.params()
        if not isinstance(params, dict):
            return None
        merged, names = merge_tools(params, self.specs)
        if merged is None:
            return None
        msg.note(OFFERED, names)
        msg.set_params(merged)
        return None

    def on_started(self, msg: Message, pending: PendingRequest) -> Decision:
        names = pending.noted(OFFERED)
        thread_id = _thread_id(msg.result())
        if names and thread_id is not None and not pending.fell_back:  # (fell back: started without them)
            # (assemble's available_tools, the client's own tools, were read
            # from the request before these were merged in: sidecar.lifecycle.core.)
            self._record(thread_id, frozenset(names))
        return None

    def on_fork(self, msg: Message) -> Decision:
        params = msg.params()
        if isinstance(params, dict) and isinstance(params.get("threadId"), str):
            msg.note(PARENT, params["threadId"])
        return None

    def _record(self, thread_id: str | None, names: frozenset[str]) -> None:
        if thread_id is None or not names:
            return
        self.offered.note(thread_id, names)
        self.proxy.spawn(self._write, thread_id, names)

    async def _write(self, thread_id: str, names: frozenset[str]) -> None:
        try:
            await trio.to_thread.run_sync(self.offered.write, thread_id, names)
        except OSError as exc:
            log.warning("engine-tools record not written (kept in memory)", extra={"fields": {"threadId": thread_id, "error": type(exc).__name__}})

    # ------------------------------------------------------ answering them

    def on_tool_call(self, msg: Message) -> Decision:
        params = msg.params()
        if not engine_call(params, self.names_for):
            return None
        self.proxy.spawn(self.answer, msg.id, params)
        return HANDLED

    async def answer(self, request_id: Any, params: dict[str, Any]) -> None:
        """Answer one call through the engine; never raises."""
        thread_id, name = params["threadId"], params["tool"]
        given = params.get("callId")
        call_id = given if isinstance(given, str) else ""
        session = self.sessions.get(thread_id)
        started = trio.current_time()
        arguments = call_arguments(params.get("arguments"))
        if arguments is None:
            answer = failed_answer(name, "its arguments must be a JSON object")
        else:
            call = ToolCallParams(
                session_id=session.session_id if session is not None else thread_id,
                session_key=session.session_key if session is not None else session_key(self.options.session_key_template, thread_id),
                call_id=call_id,
                name=name,
                arguments=arguments,
                runtime_context=self.runtime(session) if session is not None else RuntimeContext(),
            )
            try:
                with trio.fail_after(self.options.engine_deadline):
                    result = await contained(self.engine.call_tool(call))
                answer = tool_answer(result) if isinstance(result, ToolCallResult) else failed_answer(name, "the engine gave no answer")
            except trio.TooSlowError:
                answer = failed_answer(name, f"no answer within {self.options.engine_deadline:g} seconds")
            except Exception as exc:
                log.warning("engine tool call failed", extra={"fields": {"threadId": thread_id, "tool": name, "error": type(exc).__name__}})
                answer = failed_answer(name, f"the engine raised {type(exc).__name__}")
        self.stats["calls"] += 1
        took = round((trio.current_time() - started) * 1000, 1)
        if session is not None:
            text = "".join(i.get("text") or "" for i in answer["contentItems"])
            call_record = {"tool": name, "arguments": arguments, "success": answer["success"], "result": text[:TOOL_TEXT_KEPT], "ms": took}
            handle(session, EngineToolAnswered(call_record, kept=TOOL_CALLS_KEPT))
        if not answer["success"]:
            self.stats["errors"] += 1
        self._answered[request_id] = None
        while len(self._answered) > ANSWERED_KEPT:
            del self._answered[next(iter(self._answered))]
        log.info(
            "engine tool call answered",
            extra={"fields": {"threadId": thread_id, "tool": name, "success": answer["success"], "ms": took}},
        )
        self.proxy.router.send_to_child(encode_response(request_id, answer), raw=True)

    def on_resolved(self, msg: Message) -> Decision:
        params = msg.params()
        if isinstance(params, dict) and params.get("requestId") in self._answered:
            self._answered.pop(params["requestId"], None)
            self.stats["framesDropped"] += 1
            return HANDLED
        return None

    # ------------------------------------------------------- hiding items

    def on_item(self, msg: Message) -> Decision:
        if not mentions_tool_call(msg.line):
            return None
        params = msg.params()
        if not isinstance(params, dict) or not isinstance(params.get("threadId"), str):
            return None
        if is_engine_item(params.get("item"), self.names_for(params["threadId"])):
            self.stats["framesDropped"] += 1
            return HANDLED
        return None

    def on_turn_completed(self, msg: Message) -> Decision:
        return self._strip_frame(msg)

    def on_list(self, msg: Message) -> Decision:
        params = msg.params()
        if isinstance(params, dict) and isinstance(params.get("threadId"), str):
            msg.note(LISTED, params["threadId"])
        return None

    def on_read_response(self, msg: Message, pending: PendingRequest) -> Decision:
        listed = pending.noted(LISTED)
        parent = pending.noted(PARENT)
        if pending.method == "thread/fork" and parent is not None:
            inherited = self.names_for(parent)
            if inherited:
                self._record(_thread_id(msg.result()), inherited)
        if not mentions_tool_call(msg.line):
            return None
        result = msg.result()
        thread_id = listed or _thread_id(result)
        names = self.names_for(thread_id) if thread_id else NONE
        if parent is not None:
            names = names | self.names_for(parent)
        stripped = without_engine_items(result, names)
        if stripped is not result:
            msg.set_result(stripped)
        return None

    def visible_page(self, thread_id: str, page: Any) -> Any:
        """A page the sidecar answers from its archive, without the engine's items."""
        return without_engine_items(page, self.names_for(thread_id))

    def visible_turns(self, thread_id: str, turns: Any) -> Any:
        """Codex's turns of a thread (imported into the mirror), without the engine's items."""
        return without_engine_items(turns, self.names_for(thread_id))

    def _strip_frame(self, msg: Message) -> Decision:
        if not mentions_tool_call(msg.line):
            return None
        value = msg.params()
        thread_id = value.get("threadId") if isinstance(value, dict) else None
        if not isinstance(thread_id, str):
            return None
        stripped = without_engine_items(value, self.names_for(thread_id))
        if stripped is not value:
            msg.set_params(stripped)
        return None

    def status(self) -> dict[str, Any]:
        return {"tools": sorted(self.names), **self.stats}


def _thread_id(result: Any) -> str | None:
    thread = result.get("thread") if isinstance(result, dict) else None
    thread_id = thread.get("id") if isinstance(thread, dict) else None
    return thread_id if isinstance(thread_id, str) else None
