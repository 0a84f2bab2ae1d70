"""A scriptable fake of the OpenAI Responses API, served on loopback.

Codex only needs `POST /v1/responses` answered with a Server-Sent Events
stream to run whole turns, so tests can drive the real app-server with no
account and no network, and can read back the exact request bodies Codex
sent: that is the ground truth for what the model saw.

The server runs in background threads (not trio) so the same object works
under pytest-trio, in plain scripts and from `python -m tools.fake_model`.
Nothing here writes to stdout: stdout is a protocol channel elsewhere.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import gzip
import hashlib
import itertools
import json
import logging
import random
import re
import select
import signal
import socket
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Union

log = logging.getLogger(__name__)

#: Codex 0.169.0's own shell tool, as advertised in the request's `tools`:
#: the unified-exec `exec_command` function taking `{"cmd": "<shell string>",
#: "workdir", "sandbox_permissions": "use_default"|"require_escalated",
#: "justification", "prefix_rule", "yield_time_ms", "login", "tty", ...}`.
SHELL_TOOL_NAME = "exec_command"


# --------------------------------------------------------------------------
# Script steps.  One step answers one POST /v1/responses.


@dataclasses.dataclass(frozen=True)
class Text:
    """An assistant message that ends the model's part of the turn."""

    text: str


@dataclasses.dataclass(frozen=True)
class FunctionCall:
    """A `function_call` output item: Codex runs the tool, then calls again.

    `arguments` may be a dict (encoded here) or an already-encoded string,
    because the Responses API carries arguments as a JSON string and tests
    sometimes need to send malformed ones on purpose.
    """

    name: str
    arguments: Union[dict, str] = dataclasses.field(default_factory=dict)
    call_id: str | None = None
    namespace: str | None = None

    def encoded_arguments(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, separators=(",", ":"))


def ShellCall(
    cmd: str,
    *,
    call_id: str | None = None,
    workdir: str | None = None,
    sandbox_permissions: str | None = None,
    justification: str | None = None,
    yield_time_ms: int | None = None,
    **more: Any,
) -> FunctionCall:
    """A call of Codex's own shell tool, so Codex runs a real command.

    `sandbox_permissions="require_escalated"` (with a `justification`) is
    how a model asks to run outside the sandbox; under
    `approval_policy = "on-request"` that makes Codex ask the client with
    `item/commandExecution/requestApproval`.
    """
    args: dict[str, Any] = {"cmd": cmd}
    for key, value in (
        ("workdir", workdir),
        ("sandbox_permissions", sandbox_permissions),
        ("justification", justification),
        ("yield_time_ms", yield_time_ms),
    ):
        if value is not None:
            args[key] = value
    args.update(more)
    return FunctionCall(SHELL_TOOL_NAME, args, call_id)


@dataclasses.dataclass(frozen=True)
class HttpError:
    """A plain HTTP error status instead of a stream."""

    status: int = 500
    body: Union[str, dict] = dataclasses.field(
        default_factory=lambda: {"error": {"message": "fake model error", "type": "server_error"}}
    )


@dataclasses.dataclass(frozen=True)
class Failed:
    """A stream that starts, then reports `response.failed`.

    This is how a provider reports a failure after the HTTP status is
    already 200, so Codex must fail the turn from inside the stream.  With
    retries off, Codex 0.169.0 fails the turn with the message
    "stream disconnected before completion: <message>" and
    `codexErrorInfo: "other"`; `code="context_length_exceeded"` instead
    gives `codexErrorInfo: "contextWindowExceeded"` (both seen here).
    """

    message: str = "fake model failure"
    code: str = "server_error"


@dataclasses.dataclass(frozen=True)
class Delay:
    """Wait, then answer with `then`, to make interrupts and races reachable."""

    seconds: float
    then: "Step" = None  # type: ignore[assignment]


@dataclasses.dataclass(frozen=True)
class Gate:
    """Send nothing until the test opens `opened` (a `threading.Event`), then
    answer with `then`: a model request still unanswered when the test acts
    (input joined to the running turn, a steer), answered after it whatever
    the codex. Released when the server closes, like every wait here."""

    opened: threading.Event
    then: "Step" = None  # type: ignore[assignment]


@dataclasses.dataclass(frozen=True)
class Hang:
    """Send `response.created`, then never finish.

    The handler waits until the client drops the connection (what Codex does
    on `turn/interrupt`) or the server closes, so a hang never blocks
    shutdown and never leaks a thread past the test.
    """


#: A step may also be a callable taking the decoded request body and
#: returning a step, for replies that depend on what Codex sent.
Step = Union[Text, FunctionCall, HttpError, Failed, Delay, Gate, Hang, Callable[[dict], Any]]


#: The OpenAI Responses API's answer to an input over the model's context
#: window.  Codex 0.169.0 fails the turn with `codexErrorInfo:
#: "contextWindowExceeded"` whether it comes as this HTTP 400 or as a
#: `response.failed` with this code (both seen here).
CONTEXT_LENGTH_EXCEEDED = {
    "error": {
        "message": "Your input exceeds the context window of this model. Please adjust your input and try again.",
        "type": "invalid_request_error",
        "param": "input",
        "code": "context_length_exceeded",
    }
}


def context_window(max_chars: int, then: Step | None = None) -> Callable[[dict], Any]:
    """A step that rejects an oversized request as the Responses API does.

    Called with the request body: when the texts of its `input` (see
    `input_chars`) are longer than `max_chars`, an HTTP 400
    `context_length_exceeded`; otherwise `then` (None: the default reply).
    Like every step it answers one request: script it where an input may be
    too large, once per attempt.
    """

    def step(body: dict) -> Any:
        if input_chars(body) > max_chars:
            return HttpError(400, CONTEXT_LENGTH_EXCEEDED)
        return then

    return step


def input_chars(request: dict) -> int:
    """Characters of every text of the request's `input` (what a context window holds)."""
    return sum(len(t) for t in input_texts(request))


# --------------------------------------------------------------------------
# Token estimates.  Approximate on purpose: tests compare numbers between a
# direct and a proxied session, so they must be deterministic, not exact.


def estimate_tokens(value: Any) -> int:
    if value is None:
        return 0
    if not isinstance(value, str):
        value = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return max(1, (len(value) + 3) // 4) if value else 0


# --------------------------------------------------------------------------
# The server.


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 128  # Codex may open several streams at once

    fake: "FakeModel"


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    # HTTP/1.0 replies end at connection close: no chunking needed for SSE.
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        log.debug("fake model: " + format, *args)

    def do_GET(self) -> None:  # noqa: N802
        fake = self.server.fake
        fake._note_http("GET", self.path)
        if (self.headers.get("Upgrade") or "").lower() == "websocket":
            # Codex tries a Responses WebSocket first when its provider allows
            # it (OpenClaw's openai provider does) and retries a 404 five times;
            # 426 says "use plain HTTP" at once.  The status line must say
            # HTTP/1.1: a WebSocket client rejects any other version as a
            # broken handshake and retries.
            self.protocol_version = "HTTP/1.1"
            self.close_connection = True
            data = json.dumps({"error": {"message": "websocket not supported; use HTTP"}}).encode()
            self.send_response(426)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
            return
        if self.path.rstrip("/").endswith("/models"):
            self._send_json(200, {"object": "list", "data": [], "models": []})
            return
        self._send_json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:  # noqa: N802
        fake = self.server.fake
        fake._note_http("POST", self.path)
        try:
            body = self._read_body()
        except Exception as exc:  # malformed or unsupported encoding
            log.warning("fake model: cannot decode body on %s: %s", self.path, exc)
            self._send_json(400, {"error": {"message": f"bad body: {exc}"}})
            return
        if not self.path.rstrip("/").endswith("/responses"):
            log.warning("fake model: unexpected POST %s", self.path)
            self._send_json(404, {"error": {"message": f"no route {self.path}"}})
            return
        fake._note_model(body)
        index, step = fake._take(body)
        log.info("fake model: request #%d -> %s", index, type(step).__name__)
        fake._slow_down(body)
        try:
            self._play(fake, index, body, step)
        except (BrokenPipeError, ConnectionResetError):
            log.info("fake model: client dropped request #%d", index)
        finally:
            fake._done(index)

    # ---- helpers

    def _read_body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        enc = (self.headers.get("Content-Encoding") or "").lower()
        if enc == "gzip":
            raw = gzip.decompress(raw)
        elif enc == "deflate":
            raw = zlib.decompress(raw)
        elif enc not in ("", "identity"):
            raise ValueError(f"unsupported Content-Encoding {enc!r}")
        return json.loads(raw or b"{}")

    def _send_json(self, status: int, obj: Any) -> None:
        data = obj.encode() if isinstance(obj, str) else json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()

    def _event(self, payload: dict) -> None:
        data = json.dumps(payload, separators=(",", ":"))
        self.wfile.write(f"event: {payload['type']}\ndata: {data}\n\n".encode())
        self.wfile.flush()

    def _play(self, fake: "FakeModel", index: int, body: dict, step: Any) -> None:
        while isinstance(step, (Delay, Gate)):
            if isinstance(step, Delay) and fake._closing.wait(step.seconds):
                return
            while isinstance(step, Gate) and not step.opened.wait(0.05):
                if fake._closing.is_set():
                    return
            step = step.then if step.then is not None else fake._default_step(index)
        resp_id = f"resp_fake_{index}"
        if isinstance(step, HttpError):
            self._send_json(step.status, step.body)
            return
        if isinstance(step, Hang):
            self._start_stream()
            self._event(_created(resp_id, body))
            self._wait_for_disconnect(fake)
            return
        if isinstance(step, Failed):
            self._start_stream()
            self._event(_created(resp_id, body))
            resp = _response(resp_id, body, "failed")
            resp["error"] = {"code": step.code, "message": step.message}
            self._event({"type": "response.failed", "response": resp})
            return
        if isinstance(step, Text):
            item = {
                "type": "message",
                "id": f"msg_fake_{index}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": step.text, "annotations": []}],
            }
            out_tokens = estimate_tokens(step.text)
            self._start_stream()
            self._event(_created(resp_id, body))
            added = dict(item, status="in_progress", content=[])
            self._event({"type": "response.output_item.added", "output_index": 0, "item": added})
            self._event(
                {
                    "type": "response.output_text.delta",
                    "item_id": item["id"],
                    "output_index": 0,
                    "content_index": 0,
                    "delta": step.text,
                }
            )
            self._event({"type": "response.output_item.done", "output_index": 0, "item": item})
            self._completed(resp_id, body, [item], out_tokens)
            return
        if isinstance(step, FunctionCall):
            item: dict[str, Any] = {
                "type": "function_call",
                "id": f"fc_fake_{index}",
                "status": "completed",
                "name": step.name,
                "arguments": step.encoded_arguments(),
                "call_id": step.call_id or f"call_fake_{index}",
            }
            if step.namespace is not None:
                item["namespace"] = step.namespace
            self._start_stream()
            self._event(_created(resp_id, body))
            self._event(
                {
                    "type": "response.output_item.added",
                    "output_index": 0,
                    "item": dict(item, status="in_progress", arguments=""),
                }
            )
            self._event({"type": "response.output_item.done", "output_index": 0, "item": item})
            self._completed(resp_id, body, [item], estimate_tokens(item["arguments"]))
            return
        raise TypeError(f"unknown fake model step: {step!r}")

    def _completed(self, resp_id: str, body: dict, output: list, out_tokens: int) -> None:
        resp = _response(resp_id, body, "completed")
        resp["output"] = output
        in_tokens = estimate_tokens(body.get("input"))
        resp["usage"] = {
            "input_tokens": in_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": out_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": in_tokens + out_tokens,
        }
        self._event({"type": "response.completed", "response": resp})

    def _wait_for_disconnect(self, fake: "FakeModel") -> None:
        sock: socket.socket = self.connection
        while not fake._closing.is_set():
            try:
                readable, _, _ = select.select([sock], [], [], 0.05)
                if readable and not sock.recv(1, socket.MSG_PEEK):
                    return  # peer closed
            except (OSError, ValueError):
                return


def _created(resp_id: str, body: dict) -> dict:
    return {"type": "response.created", "response": _response(resp_id, body, "in_progress")}


def _response(resp_id: str, body: dict, status: str) -> dict:
    return {
        "id": resp_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": body.get("model", "mock-model"),
        "output": [],
    }


class FakeModel:
    """The fake model server.  Use as a context manager; see module doc."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._lock = threading.Condition()
        self._script: collections.deque[Any] = collections.deque()
        self._requests: list[dict] = []
        self._http_log: list[tuple[str, str]] = []
        self._in_flight = 0
        self._counter = itertools.count(1)
        self._closing = threading.Event()
        self._server = _Server((host, port), _Handler)
        self._server.fake = self
        self._thread: threading.Thread | None = None
        self._models: list[tuple[str | None, str | None]] = []
        self._slow: list[tuple[float, Callable[[dict], bool] | None]] = []

    # ---- the model asked for, and answers slow on demand

    def _note_model(self, body: dict) -> None:
        reasoning = body.get("reasoning")
        effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
        model = body.get("model") if isinstance(body.get("model"), str) else None
        log.info("fake model: request for model %s (effort %s)", model, effort)
        with self._lock:
            self._models.append((model, effort))

    @property
    def models(self) -> list[tuple[str | None, str | None]]:
        """``(model, reasoning effort)`` of every request so far, in order of arrival."""
        with self._lock:
            return list(self._models)

    def slow(self, seconds: float, when: Callable[[dict], bool] | None = None) -> "FakeModel":
        """Answer every later request for which ``when(body)`` holds (every
        request when None) ``seconds`` late, whatever its step (a reasoning
        model's think time); repeatable, the delays add up."""
        with self._lock:
            self._slow.append((seconds, when))
        return self

    def _slow_down(self, body: dict) -> None:
        with self._lock:
            rules = list(self._slow)
        wait = sum(seconds for seconds, when in rules if when is None or when(body))
        if wait > 0:
            self._closing.wait(wait)

    # ---- lifecycle

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "FakeModel":
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=f"fake-model-{self.port}",
                daemon=True,
            )
            self._thread.start()
            log.info("fake model listening on %s", self.base_url)
        return self

    def close(self) -> None:
        """Stop serving; releases hanging and delayed replies first."""
        self._closing.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> "FakeModel":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- scripting

    def script(self, *steps: Step) -> "FakeModel":
        """Queue replies; each request consumes one, then defaults apply."""
        with self._lock:
            self._script.extend(steps)
        return self

    def clear_script(self) -> None:
        with self._lock:
            self._script.clear()

    @property
    def pending_steps(self) -> int:
        with self._lock:
            return len(self._script)

    def _default_step(self, index: int) -> Text:
        return Text(f"ack {index}")

    def _take(self, body: dict) -> tuple[int, Any]:
        with self._lock:
            index = next(self._counter)
            self._requests.append(body)
            self._in_flight += 1
            step = self._script.popleft() if self._script else self._default_step(index)
            self._lock.notify_all()
        if callable(step) and not dataclasses.is_dataclass(step):
            step = step(body)
            if step is None:
                step = self._default_step(index)
        return index, step

    def _done(self, index: int) -> None:
        with self._lock:
            self._in_flight -= 1
            self._lock.notify_all()

    def _note_http(self, method: str, path: str) -> None:
        with self._lock:
            self._http_log.append((method, path))

    # ---- observation

    @property
    def requests(self) -> list[dict]:
        """A snapshot of every decoded /responses request body so far."""
        with self._lock:
            return list(self._requests)

    @property
    def http_log(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._http_log)

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    def wait_for_requests(self, n: int, timeout: float = 10.0) -> list[dict]:
        """Block until `n` requests arrived; raise TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self._requests) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"fake model saw {len(self._requests)} requests, wanted {n}"
                    )
                self._lock.wait(left)
            return list(self._requests)

    async def wait_for_requests_async(self, n: int, timeout: float = 10.0) -> list[dict]:
        """Same as `wait_for_requests` without blocking a trio event loop."""
        import trio

        with trio.fail_after(timeout):
            while True:
                reqs = self.requests
                if len(reqs) >= n:
                    return reqs
                await trio.sleep(0.02)


# --------------------------------------------------------------------------
# Helpers for reading request bodies in assertions.


def input_texts(request: dict, role: str | None = None) -> list[str]:
    """Every text fragment of the request's `input` messages (optionally one role)."""
    out: list[str] = []
    for item in request.get("input") or []:
        if item.get("type", "message") != "message":
            continue
        if role is not None and item.get("role") != role:
            continue
        content = item.get("content")
        if isinstance(content, str):
            out.append(content)
            continue
        for part in content or []:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                out.append(part["text"])
    return out


def tool_outputs(request: dict) -> dict[str, str]:
    """call id -> the text of each ``function_call_output`` the request carries."""
    out = {}
    for item in request.get("input") or []:
        if item.get("type") == "function_call_output":
            value = item.get("output")
            if isinstance(value, list):
                value = "".join(p.get("text", "") for p in value if isinstance(p, dict))
            out[item["call_id"]] = value
    return out


def tool_names(request: dict) -> list[str]:
    """Names of the tools a request advertised, including namespaced ones."""
    names: list[str] = []
    for tool in request.get("tools") or []:
        if "name" in tool:
            names.append(tool["name"])
        for sub in tool.get("tools") or []:
            if "name" in sub:
                names.append(sub["name"])
    return names


# --------------------------------------------------------------------------
# Rule-driven replies: what the newest user prompt asks for decides the step.


_WORDS = (
    "the service keeps its state in one place so a restart resumes where it stopped and nothing is counted twice "
    "we measured the queue under load and the slow path was the retry loop which waited longer than it needed "
    "a small change to the parser made the error messages name the field and the line that failed "
    "the release notes should say what changed for operators and what they have to do before upgrading "
    "tests pin the behaviour at the boundary where the cache hands over to the database and back "
    "the log line carries the request id the account and the outcome but never the payload itself"
).split()


def request_prompt(request: dict) -> tuple[str, list[dict]]:
    """The newest user prompt of a request (its text, Codex's tagged context
    blocks such as ``<environment_context>`` skipped) and the input items
    after it (the turn's tool calls and their outputs so far)."""
    items = request.get("input") or []
    for index in range(len(items) - 1, -1, -1):
        item = items[index]
        if item.get("type", "message") != "message" or item.get("role") != "user":
            continue
        text = "\n".join(input_texts({"input": [item]}))
        if text.lstrip().startswith("<") and text.rstrip().endswith(">"):
            continue
        return text, items[index + 1 :]
    return "", list(items)


class Rules:
    """A reply step for every request, from rules on the newest user prompt.

    * ``Use <tool> to find <query>.``: a function call of that tool with
      ``{"query": <query>}`` if the request offers the tool (a top-level
      function of that name); once its output is back, a text quoting it.
      Without the tool, a text saying so.
    * ``Run `<command>```: Codex's shell tool runs the command; once its
      output is back, a text quoting its head.
    * ``Summarise ...`` (the prompt of a summary call) and Codex's own
      compaction prompt: a summary made of the first words of each block of
      the prompt, within the ``at most N tokens`` it asks for.
    * anything else: ``reply_words`` words of text, drawn with a generator
      seeded with ``seed`` and the prompt, so the same prompt always gets the
      same reply, whichever session or request order asks.

    Deterministic; keeps no state between requests (everything is read from
    the request), so it may answer several sessions at once.
    """

    USE_TOOL = re.compile(r"\bUse (?P<tool>[A-Za-z_][\w.-]*) to find (?P<query>[^\n]+?)[.?!]?\s*$", re.M)
    RUN = re.compile(r"\bRun `(?P<cmd>[^`]+)`")
    SUMMARISE = re.compile(r"^\s*Summari[sz]e\b")
    EXCERPT = re.compile(r"^### EXCERPT (\d+):", re.M)
    COMPACTION_MARK = "CONTEXT CHECKPOINT COMPACTION"
    AT_MOST = re.compile(r"at most (\d+) tokens")

    def __init__(self, seed: int = 0, reply_words: tuple[int, int] = (180, 320), quote_chars: int = 1200) -> None:
        self.seed = seed
        self.reply_words = reply_words
        self.quote_chars = quote_chars

    def kind(self, request: dict) -> str:
        """Which rule answers ``request``: ``tool-call``, ``tool-answer``,
        ``no-tool``, ``shell-call``, ``shell-answer``, ``summary``,
        ``compaction`` or ``reply``."""
        return self.decide(request)[0]

    def __call__(self, request: dict) -> Step:
        return self.decide(request)[1]

    def _call_id(self, prompt: str, n: int) -> str:
        digest = hashlib.sha256(f"{self.seed}\x00{prompt}".encode("utf-8", "surrogatepass")).hexdigest()[:12]
        return f"call_rule_{digest}_{n}"

    def decide(self, request: dict) -> tuple[str, Step]:
        prompt, after = request_prompt(request)
        if self.COMPACTION_MARK in prompt:
            return "compaction", Text(self.summary(prompt))
        if self.SUMMARISE.match(prompt):
            if self.EXCERPT.search(prompt):  # the lossless engine's batched summary call
                parts = self.EXCERPT.split(prompt)[1:]
                return "summary", Text("\n\n".join(f"### SUMMARY {k}\n{self.summary(body)}" for k, body in zip(parts[::2], parts[1::2], strict=True)))
            return "summary", Text(self.summary(prompt))
        outputs = [i for i in after if i.get("type") in ("function_call_output", "custom_tool_call_output")]
        calls = [i for i in after if i.get("type") in ("function_call", "custom_tool_call")]
        use = self.USE_TOOL.search(prompt)
        if use is not None:
            tool, query = use.group("tool"), use.group("query").strip()
            if outputs:
                return "tool-answer", Text(f"{tool} answered:\n{self._quote(outputs[-1])}")
            if tool not in tool_names(request):
                return "no-tool", Text(f"I have no {tool} tool here, so from memory about {query}: " + self.filler(prompt))
            return "tool-call", FunctionCall(tool, {"query": query}, self._call_id(prompt, len(calls)))
        run = self.RUN.search(prompt)
        if run is not None:
            if outputs:
                return "shell-answer", Text("The command printed this:\n" + self._quote(outputs[-1]) + "\n\n" + self.filler(prompt, 0.4))
            return "shell-call", ShellCall(run.group("cmd"), call_id=self._call_id(prompt, len(calls)), login=False)
        return "reply", Text(self.filler(prompt))

    def _quote(self, output_item: dict) -> str:
        value = output_item.get("output")
        if isinstance(value, list):  # content items
            value = "\n".join(str(p.get("text", "")) for p in value if isinstance(p, dict))
        text = str(value if value is not None else "")
        return text[: self.quote_chars] + (" …" if len(text) > self.quote_chars else "")

    def filler(self, prompt: str, share: float = 1.0) -> str:
        """Seeded prose of ``reply_words`` words (times ``share``)."""
        rng = random.Random(f"{self.seed}\x00{prompt}")
        lo, hi = self.reply_words
        n = max(8, int(rng.randint(lo, hi) * share))
        words = [rng.choice(_WORDS) for _ in range(n)]
        sentences, i = [], 0
        while i < len(words):
            k = rng.randint(8, 18)
            sentence = " ".join(words[i : i + k])
            sentences.append(sentence[:1].upper() + sentence[1:] + ".")
            i += k
        return " ".join(sentences)

    def summary(self, prompt: str) -> str:
        """The first words of each block of ``prompt`` (blocks are separated by
        blank lines; a block's ``[label]`` line is skipped), within the
        prompt's ``at most N tokens`` (about 3/4 of a word a token)."""
        limit = self.AT_MOST.search(prompt)
        budget_words = int(int(limit.group(1)) * 0.7) if limit else 200
        blocks = [b for b in prompt.split("\n\n")[1:] if b.strip()] or [prompt]
        per = max(6, budget_words // max(1, len(blocks)))
        heads = []
        for block in blocks:
            lines = [ln for ln in block.splitlines() if ln.strip()]
            if lines and lines[0].startswith("[") and lines[0].rstrip().endswith("]") and len(lines) > 1:
                lines = lines[1:]
            heads.append(" ".join(" ".join(lines).split()[:per]))
        return "Summary: " + "; ".join(h for h in heads if h)


def main(argv: list[str] | None = None) -> None:
    """Serve until interrupted, for poking Codex by hand."""
    parser = argparse.ArgumentParser(prog="python -m tools.fake_model", description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--slow", type=float, default=0.0, metavar="SECONDS", help="answer every request SECONDS late")
    parser.add_argument("--slow-model", metavar="NAME", help="with --slow: only the requests for this model")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s %(message)s",
    )  # basicConfig logs to stderr
    # Turn SIGTERM into a normal exit so the server socket closes cleanly.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with FakeModel(args.host, args.port) as model:
        if args.slow:
            model.slow(args.slow, None if args.slow_model is None else (lambda body: body.get("model") == args.slow_model))
        log.info("base_url %s (Ctrl-C to stop)", model.base_url)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
