"""The context engines ``make bench-context`` measures.

* ``bench-identity`` assembles the mirrored history unchanged: any growth of
  the model input beyond the native run is the projection's own cost.
* ``bench-budget`` keeps a summary plus a recent tail within a token budget
  (8,000 by default): a deterministic *extractive* summary of the messages
  before a boundary, as a ``CompactionSummaryMessage``, then the raw messages
  after it.  For prompt-cache friendliness the boundary moves in steps: it
  stays where it is until the tail no longer fits, and then jumps forward far
  enough that the new tail fills only half of its room, so the summary (and
  everything projected before the tail) stays byte-identical for many turns.
  The boundary index is the projection epoch
  (``AssembleResult.context_projection``: mode ``thread_bootstrap``, epoch =
  boundary index, fingerprint = a hash of the summary), which an ``epoch``
  projection mode can follow.
* ``bench-recall`` assembles the history unchanged plus one retrieved
  snippet, appended as one extra user message: a deterministic
  pseudo-retrieval from a fixed corpus, keyed by the prompt.  With the
  ``snippet_log`` config key it appends one JSON line per assemble (snippet
  id, characters, o200k tokens), so the benchmark adds exactly what the
  engine added.
* ``bench-store`` assembles the history as an engine with its own store
  does: new message objects with the mirror's content, its own timestamps
  and no provider metadata, every turn. Content identity must keep the
  sidecar from rebuilding for it.
* ``bench-window`` (``make bench-scale``) keeps the newest ``window``
  messages (40 by default) and drops everything older, every turn, never
  separating a tool call from its result: the simplest engine that drops
  old content all the time. It is registered only by
  ``write_dist_info(..., window=True)``.

Every engine is a pure function of what ``assemble`` receives (the budget
engine's boundary is recomputed from the messages alone, never from state
kept between calls), so re-running a session gives the same bytes, and a
sidecar restart changes nothing.

They reach the sidecar subprocess the way any third-party engine does: an
entry point in the group ``openclaw.context_engines`` of a distribution on
its ``PYTHONPATH``.  :func:`write_dist_info` writes such a ``*.dist-info``
(metadata only; the code is this module, imported from the repository), and
the sidecar is told to trust that distribution with
``CODEX_SIDECAR_ENGINE_ALLOWLIST`` = :data:`DIST_NAME`.

Engine ids carry a ``bench-`` prefix so they can never collide with an engine
a real distribution (or the sidecar's built-ins) registers; the benchmark
shows them as ``identity``, ``budget``, ``recall`` and ``store``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from engines import (
    AfterTurnParams,
    AssembleParams,
    AssembleResult,
    AssistantMessage,
    BaseContextEngine,
    CompactionSummaryMessage,
    CompactParams,
    CompactResult,
    ContextProjection,
    EngineInfo,
    IngestBatchParams,
    IngestBatchResult,
    IngestParams,
    IngestResult,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
    encode_openclaw,
)
from engines.tokens import count_tokens, estimate_message_tokens

__all__ = [
    "BUDGET_ID",
    "CORPUS",
    "DIST_NAME",
    "ENGINES",
    "IDENTITY_ID",
    "RECALL_ID",
    "BudgetEngine",
    "IdentityEngine",
    "WINDOW_ID",
    "WindowEngine",
    "window_start",
    "RecallEngine",
    "budget_boundary",
    "extractive_summary",
    "retrieve",
    "snippet_of",
    "snippet_text",
    "write_dist_info",
]

DIST_NAME = "openclaw-codex-bench-engines"
DIST_VERSION = "0.1.0"

IDENTITY_ID = "bench-identity"
BUDGET_ID = "bench-budget"
RECALL_ID = "bench-recall"
STORE_ID = "bench-store"
WINDOW_ID = "bench-window"

#: Short name (as the benchmark shows it) -> engine id.
ENGINES: dict[str, str] = {"identity": IDENTITY_ID, "budget": BUDGET_ID, "recall": RECALL_ID, "store": STORE_ID}

_VERSION = DIST_VERSION


class _BenchEngine(BaseContextEngine):
    """Stores nothing: the sidecar's transcript mirror is the history."""

    engine_id = ""
    engine_name = ""

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__(config)
        self.info = EngineInfo(id=self.engine_id, name=self.engine_name, version=_VERSION, owns_compaction=False)
        # Load the o200k tokenizer now (~0.05 s), while the sidecar starts,
        # not inside the first turn that counts.
        count_tokens("warm-up")

    async def ingest(self, params: IngestParams) -> IngestResult:
        return IngestResult(ingested=False)

    async def ingest_batch(self, params: IngestBatchParams) -> IngestBatchResult:
        return IngestBatchResult(ingested_count=0)

    async def after_turn(self, params: AfterTurnParams) -> None:
        return None

    async def compact(self, params: CompactParams) -> CompactResult:
        return CompactResult(ok=True, compacted=False, reason=f"{self.engine_id} does not own compaction")


# ---------------------------------------------------------------- identity


class IdentityEngine(_BenchEngine):
    """``assemble`` returns ``params.messages`` unchanged."""

    engine_id = IDENTITY_ID
    engine_name = "Bench: identity"

    async def assemble(self, params: AssembleParams) -> AssembleResult:
        messages = list(params.messages)
        return AssembleResult(messages=messages, estimated_tokens=_estimate(messages))


# ------------------------------------------------------------------- store


def restamped(message: Any, timestamp: int) -> Any:
    """The message as an engine with its own store gives it back: a new
    object with the same model-visible content, its own timestamp, and none
    of the provider's metadata (usage, model, response id, signatures)."""
    if isinstance(message, AssistantMessage):
        return AssistantMessage(content=[_bare(b) for b in message.content], timestamp=timestamp)
    if isinstance(message, UserMessage):
        content = message.content if isinstance(message.content, str) else [_bare(b) for b in message.content]
        return UserMessage(content=content, timestamp=timestamp)
    if isinstance(message, ToolResultMessage):
        return ToolResultMessage(
            tool_call_id=message.tool_call_id,
            tool_name=message.tool_name,
            content=[_bare(b) for b in message.content],
            is_error=message.is_error,
            timestamp=timestamp,
        )
    return msgspec.structs.replace(message, timestamp=timestamp)


def _bare(block: Any) -> Any:
    if isinstance(block, TextBlock):
        return TextBlock(text=block.text)
    if isinstance(block, ToolCallBlock):
        return ToolCallBlock(id=block.id, name=block.name, arguments=dict(block.arguments))
    if isinstance(block, ThinkingBlock):
        return ThinkingBlock(thinking=block.thinking)
    return block


class StoreEngine(_BenchEngine):
    """Keeps the conversation in its own store and assembles it from there:
    every turn, new message objects with the same content as the mirror's,
    stamped with the store's own clock (what a database-backed engine does).
    The sidecar must see the same messages and not rebuild."""

    engine_id = STORE_ID
    engine_name = "Bench: own store"

    async def assemble(self, params: AssembleParams) -> AssembleResult:
        now = int(time.time() * 1000)
        messages = [restamped(m, now) for m in params.messages]
        return AssembleResult(messages=messages, estimated_tokens=_estimate(messages))


# ------------------------------------------------------------------ window


def window_start(messages: Sequence[Any], window: int) -> int:
    """Index of the first message a sliding window of ``window`` messages
    keeps: the earliest cut at or after ``len(messages) - window`` that
    separates no tool call from its result, so the window never holds an
    orphaned call or result and usually at most ``window`` messages (when
    no such cut exists, a tool exchange longer than the window, the latest
    cut before it: more messages rather than none)."""
    n = len(messages)
    if n <= window:
        return 0
    cuts = _valid_cuts(messages)
    for c in range(n - window, n):
        if cuts[c]:
            return c
    return next((c for c in range(n - window - 1, 0, -1) if cuts[c]), 0)


class WindowEngine(_BenchEngine):
    """The newest ``window`` messages (config key, default 40), nothing older.

    Every turn the window slides, so the engine drops held content on every
    turn: what makes the sidecar rebuild (once the dropped part exceeds its
    stale slack). Pure and deterministic: the same messages give the same
    window.
    """

    engine_id = WINDOW_ID
    engine_name = "Bench: sliding window"

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__(config)
        self.window = int(self.config.get("window", 40))
        if self.window < 2:
            raise ValueError("window must keep at least 2 messages")

    async def assemble(self, params: AssembleParams) -> AssembleResult:
        messages = list(params.messages)
        kept = messages[window_start(messages, self.window):]
        return AssembleResult(messages=kept, estimated_tokens=_estimate(kept))


# ------------------------------------------------------------------ budget

_SENTENCE_END = re.compile(r"(?<=[.!?])\s")
_token_cache: dict[bytes, int] = {}
_object_tokens: dict[int, tuple[Any, int]] = {}


def _message_tokens(message: Any) -> int:
    """:func:`estimate_message_tokens`, memoised on the message object (the
    sidecar hands the same objects every turn), then on its JSON form."""
    hit = _object_tokens.get(id(message))
    if hit is not None and hit[0] is message:
        return hit[1]
    key = hashlib.blake2b(encode_openclaw(message), digest_size=16).digest()
    cached = _token_cache.get(key)
    if cached is None:
        if len(_token_cache) > 100_000:
            _token_cache.clear()
        cached = _token_cache[key] = estimate_message_tokens(message)
    if len(_object_tokens) > 100_000:
        _object_tokens.clear()
    _object_tokens[id(message)] = (message, cached)  # the reference keeps the id from being reused
    return cached


def _estimate(messages: Sequence[Any]) -> int:
    return sum(_message_tokens(m) for m in messages)


def _valid_cuts(messages: Sequence[Any]) -> list[bool]:
    """``cuts[c]``: keeping ``messages[c:]`` separates no tool call from its result."""
    n = len(messages)
    open_calls: dict[str, int] = {}
    blocked = [0] * (n + 2)
    for j, message in enumerate(messages):
        if isinstance(message, AssistantMessage):
            for block in message.content:
                if isinstance(block, ToolCallBlock):
                    open_calls[block.id] = j
        elif isinstance(message, ToolResultMessage):
            i = open_calls.get(message.tool_call_id)
            if i is not None and i < j:
                blocked[i + 1] += 1
                blocked[j + 1] -= 1
    cuts, running = [], 0
    for c in range(n + 1):
        running += blocked[c]
        cuts.append(running == 0)
    return cuts


def budget_boundary(messages: Sequence[Any], tail_budget: int, *, refill: float = 0.5) -> int:
    """Index of the first message kept raw; everything before it is summarised.

    Replays the conversation one message at a time, as if assemble had run
    after each: the boundary starts at 0 and stays put while the tail
    ``messages[boundary:n]`` fits ``tail_budget`` tokens; when it does not,
    it jumps to the earliest cut whose tail fits ``refill * tail_budget``
    (never splitting a tool call from its result, always keeping the newest
    message).  The result depends on the messages only, and is the same
    whether assemble ran after every message or after every turn.
    """
    n = len(messages)
    if n == 0:
        return 0
    sizes = [_message_tokens(m) for m in messages]
    prefix = [0]
    for size in sizes:
        prefix.append(prefix[-1] + size)
    cuts = _valid_cuts(messages)
    boundary = 0
    for end in range(1, n + 1):
        if prefix[end] - prefix[boundary] <= tail_budget:
            continue
        target = refill * tail_budget
        new = None
        for c in range(boundary + 1, end):
            if cuts[c] and prefix[end] - prefix[c] <= target:
                new = c
                break
        if new is None:  # nothing fits the refill target: keep as little as a cut allows
            candidates = [c for c in range(boundary + 1, end) if cuts[c]]
            new = candidates[-1] if candidates else boundary
        boundary = new
    return boundary


def _first_sentence(text: str, limit: int) -> str:
    text = " ".join(text.split())
    if not text:
        return ""
    match = _SENTENCE_END.search(text)
    sentence = text[: match.start()] if match else text
    if len(sentence) > limit:
        sentence = sentence[: limit - 1].rstrip() + "…"
    return sentence


def _texts(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(b.text for b in content if isinstance(b, TextBlock))


def _summary_lines(message: Any) -> list[str]:
    if isinstance(message, UserMessage):
        s = _first_sentence(_texts(message.content), 160)
        return [f"- User: {s}"] if s else []
    if isinstance(message, AssistantMessage):
        lines = []
        s = _first_sentence(_texts(message.content), 200)
        if s:
            lines.append(f"- Assistant: {s}")
        for block in message.content:
            if isinstance(block, ToolCallBlock):
                args = block.arguments.get("cmd") if isinstance(block.arguments, dict) else None
                what = f"`{_first_sentence(str(args), 120)}`" if args else block.name
                lines.append(f"- Assistant ran {what}")
        return lines
    if isinstance(message, ToolResultMessage):
        size = sum(len(b.text) for b in message.content if isinstance(b, TextBlock))
        return [f"- Tool {message.tool_name} {'failed' if message.is_error else 'returned'} {size} chars"]
    if isinstance(message, CompactionSummaryMessage):
        return [line for line in message.summary.splitlines() if line.startswith("- ")]
    return []


@functools.lru_cache(maxsize=65_536)
def _line_tokens(line: str) -> int:
    return count_tokens(line)


def cached_extractive_summary(messages: Sequence[Any], max_tokens: int) -> str:
    """:func:`extractive_summary`, memoised on the very message objects: the
    head the budget engine summarises stays the same for many turns."""
    key = (tuple(map(id, messages)), max_tokens)
    hit = _summary_cache.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], messages)):
        return hit[1]
    summary = extractive_summary(messages, max_tokens)
    if len(_summary_cache) > 256:
        _summary_cache.clear()
    _summary_cache[key] = (tuple(messages), summary)
    return summary


_summary_cache: dict[tuple[tuple[int, ...], int], tuple[tuple[Any, ...], str]] = {}


def extractive_summary(messages: Sequence[Any], max_tokens: int) -> str:
    """A deterministic extractive summary: one line per point, newest kept.

    Each user and assistant message contributes its first sentence, each tool
    call its command; when the lines exceed ``max_tokens`` the oldest are
    left out and counted.
    """
    lines = [line for m in messages for line in _summary_lines(m)]
    head = f"Summary of the {len(messages)} earlier messages of this conversation (extractive):"
    kept: list[str] = []
    used = _line_tokens(head) + 16  # room for the omission line
    for line in reversed(lines):
        cost = _line_tokens(line) + 1
        if used + cost > max_tokens:
            break
        kept.append(line)
        used += cost
    kept.reverse()
    omitted = len(lines) - len(kept)
    body = ([f"[{omitted} earlier points omitted]"] if omitted else []) + kept
    return "\n".join([head, *body])


class BudgetEngine(_BenchEngine):
    """A summary plus a recent tail within ``token_budget``; see the module doc.

    Config: ``token_budget`` (8000), ``summary_tokens`` (1500: the summary's
    cap), ``turn_reserve_tokens`` (1000: room for the prompt and the turn's
    own tool output, which the model sees beside the assembled context).
    """

    engine_id = BUDGET_ID
    engine_name = "Bench: summary + recent tail"

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__(config)
        self.token_budget = int(self.config.get("token_budget", 8000))
        self.summary_tokens = int(self.config.get("summary_tokens", 1500))
        self.turn_reserve = int(self.config.get("turn_reserve_tokens", 1000))
        self.tail_budget = self.token_budget - self.summary_tokens - self.turn_reserve
        if self.tail_budget < 500:
            raise ValueError("token_budget too small for summary_tokens + turn_reserve_tokens")

    async def assemble(self, params: AssembleParams) -> AssembleResult:
        messages = list(params.messages)
        boundary = budget_boundary(messages, self.tail_budget)
        if boundary == 0:
            projection = ContextProjection(mode="thread_bootstrap", epoch="0", fingerprint=_fingerprint(""))
            return AssembleResult(messages=messages, estimated_tokens=_estimate(messages), context_projection=projection)
        head, tail = messages[:boundary], messages[boundary:]
        summary = cached_extractive_summary(head, self.summary_tokens)
        summary_message = CompactionSummaryMessage(
            summary=summary,
            tokens_before=_estimate(head),
            tokens_after=_line_tokens(summary),
            timestamp=head[-1].timestamp,
        )
        assembled = [summary_message, *tail]
        return AssembleResult(
            messages=assembled,
            estimated_tokens=_estimate(assembled),
            context_projection=ContextProjection(mode="thread_bootstrap", epoch=str(boundary), fingerprint=_fingerprint(summary)),
        )


def _fingerprint(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ------------------------------------------------------------------ recall

#: The fixed corpus: (id, keywords, text).  Made-up notes about the project
#: the scripted session talks about.
CORPUS: tuple[tuple[str, frozenset[str], str], ...] = tuple(
    (sid, frozenset(words.split()), text)
    for sid, words, text in (
        ("cfg-01", "config settings toml env environment defaults parse parser",
         "Settings resolve in a fixed order: command-line flags, then environment variables with the APP_ prefix, "
         "then the TOML file. Unknown keys in the file are an error, so a typo fails at start-up instead of being "
         "ignored. Defaults live next to each setting's declaration in src/config.py."),
        ("cfg-02", "config reload signal hup watcher",
         "The service re-reads its configuration on SIGHUP. Only logging and rate-limit settings are hot-reloadable; "
         "database and listener settings require a restart, and a reload that changes them logs a warning and keeps "
         "the old values."),
        ("log-01", "log logging logs json structured level stderr",
         "Logs are structured: one JSON object per line on stderr with ts, level, logger, msg and a fields map. "
         "Never log request bodies or tokens; the redaction filter in src/logging_setup.py replaces values of keys "
         "named token, secret or password with their length."),
        ("retry-01", "retry retries backoff timeout transient jitter",
         "Outbound calls retry transient failures (connection reset, 502, 503, 504) with exponential backoff: "
         "base 200 ms, factor 2, full jitter, at most 5 attempts and a 10 s overall deadline. 4xx answers are never "
         "retried, and a retry never re-sends a non-idempotent POST without an idempotency key."),
        ("db-01", "database db migration migrations schema alembic sqlite postgres",
         "Schema changes go through numbered migrations in migrations/. Each migration must be reversible and must "
         "not hold a table lock for more than a second on the production data size; add columns nullable first, "
         "backfill in batches, then add the constraint."),
        ("db-02", "database pool connection connections transaction",
         "The connection pool holds 10 connections per worker. A transaction that waits on the network while holding "
         "a connection is the usual cause of pool exhaustion; fetch first, then open the transaction."),
        ("cache-01", "cache caching ttl invalidation redis stale",
         "Read-through cache with a 60 s TTL keyed by the normalised request. Writes invalidate by key prefix. Stale "
         "entries may be served for up to 5 s while a single request refreshes them (request coalescing)."),
        ("auth-01", "auth authentication token tokens jwt session login",
         "API clients authenticate with short-lived bearer tokens (15 minutes) obtained from /auth/token with a "
         "refresh token. Tokens carry the tenant id; every query filters by it, and a missing tenant is a 403, not "
         "a 404."),
        ("cli-01", "cli command flags argparse click subcommand",
         "The CLI is built with click. Every subcommand takes --json for machine-readable output and exits 2 on a "
         "usage error, 1 on a failed operation. Progress goes to stderr so stdout stays parseable."),
        ("test-01", "test tests testing pytest fixture fixtures flaky",
         "Tests use pytest with fixtures in tests/conftest.py. Tests that touch the network are marked `net` and are "
         "skipped by default. A flaky test is quarantined with an issue link, never silently retried."),
        ("perf-01", "performance slow latency profile profiling benchmark",
         "To profile, run the service with PROFILE=1: it writes a py-spy flame graph per minute under /tmp/profiles. "
         "The latency budget for the search endpoint is 150 ms at p95, measured at the load balancer."),
        ("api-01", "api endpoint endpoints http rest pagination",
         "List endpoints paginate with an opaque cursor and a limit of at most 200. Responses include next_cursor; "
         "clients must not build cursors themselves. Sorting is stable: by created_at, then id."),
        ("err-01", "error errors exception exceptions handling",
         "Handlers raise AppError subclasses; the middleware maps them to problem+json responses with a stable `type` "
         "URI. Unexpected exceptions become a 500 with an incident id that appears in the logs, never a stack trace."),
        ("deploy-01", "deploy deployment release docker container kubernetes rollout",
         "Releases are container images tagged with the git sha. Deploys roll out 25% at a time and stop on a rise "
         "in 5xx rate; rollback is redeploying the previous tag. Migrations run in a separate job before the rollout."),
        ("sec-01", "security secret secrets vulnerability dependency dependencies",
         "Secrets come from the environment at start-up and are never written to disk or logs. Dependency updates "
         "are batched weekly; a security advisory with a fix is applied within two working days."),
        ("queue-01", "queue worker workers job jobs background task tasks",
         "Background jobs run on a Redis-backed queue with at-least-once delivery, so every job must be idempotent. "
         "Failed jobs retry three times with backoff, then land in the dead-letter queue for inspection."),
        ("metrics-01", "metrics monitoring prometheus dashboard alert alerts",
         "Each endpoint exports request count, error count and a latency histogram. Alerts fire on the error ratio "
         "over 5 minutes, not on single errors, and every alert links to a runbook section."),
        ("style-01", "style lint linting format formatting ruff typing mypy",
         "Code is formatted with ruff format and linted with ruff; type hints are checked with mypy in strict mode "
         "for src/, relaxed for tests/. Public functions get a docstring that states what they return."),
        ("search-01", "search index indexing query ranking",
         "Search uses a trigram index on title and body. Queries shorter than three characters skip the index and "
         "match prefixes only. Ranking is by match count, then recency."),
        ("file-01", "file files upload uploads storage s3 path paths",
         "Uploads stream to object storage in 8 MB parts; the API never buffers a whole file in memory. Stored "
         "names are content hashes, and the original filename is kept only as metadata."),
    )
)

_WORD = re.compile(r"[a-z0-9]+")


def retrieve(prompt: str) -> tuple[str, str]:
    """The snippet for ``prompt``: ``(id, text)``, deterministic.

    Scores each corpus entry by how many of its keywords occur in the prompt;
    ties (including "no keyword matched") are broken by a hash of the prompt,
    so different prompts spread over the corpus.
    """
    words = set(_WORD.findall(prompt.lower()))
    seed = int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:4], "big")
    best: tuple[int, int] | None = None
    chosen = CORPUS[0]
    for index, entry in enumerate(CORPUS):
        score = len(words & entry[1])
        rank = (score, -((index - seed) % len(CORPUS)))
        if best is None or rank > best:
            best, chosen = rank, entry
    return chosen[0], chosen[2]


def snippet_text(prompt: str) -> str:
    """The text of the extra message the recall engine appends for ``prompt``."""
    return snippet_of(retrieve(prompt)[0])


@functools.lru_cache(maxsize=None)
def snippet_of(sid: str) -> str:
    """The text of the extra message for the corpus entry ``sid``."""
    text = next(entry[2] for entry in CORPUS if entry[0] == sid)
    return f"Retrieved reference [{sid}] (project notes; may be relevant to the next request):\n{text}"


@functools.lru_cache(maxsize=None)
def _snippet_message_tokens(sid: str) -> int:
    """:func:`estimate_message_tokens` of a snippet message (its text is all that counts)."""
    return estimate_message_tokens(UserMessage(content=[TextBlock(text=snippet_of(sid))], timestamp=0))


class RecallEngine(_BenchEngine):
    """History unchanged plus one retrieved snippet, as one extra user message.

    Config: ``snippet_log`` (optional path): one JSON line per assemble with
    ``sessionId``, ``snippetId`` and ``chars`` of the snippet message's text
    (the benchmark counts its tokens afterwards, from the id: the log is
    instrumentation, kept out of the measured turn's way).
    """

    engine_id = RECALL_ID
    engine_name = "Bench: history + one retrieved snippet"

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__(config)
        self._log: Any = None

    async def assemble(self, params: AssembleParams) -> AssembleResult:
        messages = list(params.messages)
        sid = retrieve(params.prompt or "")[0]
        text = snippet_of(sid)
        timestamp = messages[-1].timestamp if messages else 0
        snippet = UserMessage(content=[TextBlock(text=text)], timestamp=timestamp)
        log_path = self.config.get("snippet_log")
        if log_path:
            if self._log is None:
                self._log = open(log_path, "a", encoding="utf-8", buffering=1)  # one line, one write
            self._log.write(json.dumps({"sessionId": params.session_id, "snippetId": sid, "chars": len(text)}) + "\n")
        # The snippet is a new message object every turn: its estimate comes
        # from its id, not from tokenizing the same text again.
        return AssembleResult(messages=[*messages, snippet], estimated_tokens=_estimate(messages) + _snippet_message_tokens(sid))


# --------------------------------------------------------------- packaging


def write_dist_info(site_dir: str | os.PathLike[str], *, window: bool = False) -> Path:
    """Write the metadata-only ``*.dist-info`` that registers the bench engines.

    Put ``site_dir`` (and the repository, for the code) on the sidecar's
    ``PYTHONPATH`` and name :data:`DIST_NAME` in its engine allowlist.
    ``window`` also registers ``bench-window`` (``make bench-scale``).
    Returns the dist-info folder.
    """
    folder = Path(site_dir) / f"{DIST_NAME.replace('-', '_')}-{DIST_VERSION}.dist-info"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {DIST_NAME}\nVersion: {DIST_VERSION}\n"
        "Summary: Context engines measured by make bench-context (openclaw-codex-sidecar tools)\n"
    )
    (folder / "entry_points.txt").write_text(
        "[openclaw.context_engines]\n"
        f"{IDENTITY_ID} = tools.context_engines:IdentityEngine\n"
        f"{BUDGET_ID} = tools.context_engines:BudgetEngine\n"
        f"{RECALL_ID} = tools.context_engines:RecallEngine\n"
        f"{STORE_ID} = tools.context_engines:StoreEngine\n"
        + (f"{WINDOW_ID} = tools.context_engines:WindowEngine\n" if window else "")
    )
    (folder / "top_level.txt").write_text("tools\n")
    return folder
