"""Context projection benchmark: model-input tokens, native against the sidecar.

    python -m tools.bench_context [--turns N] [--engines identity,budget,recall]
                                  [--modes per_turn,epoch,delta] [--json FILE]
                                  (what `make bench-context` runs)

One scripted session (default 40 turns: varied prompts, replies from a few
hundred bytes to about 3 KB, a few ``exec_command`` tool calls; all seeded,
so every run sends the same conversation) is run through the real codex and
the fake model (``tools.fake_model``): once natively (the client talks to
codex itself) and once per (engine, projection mode) through the sidecar.
The engines are ``tools.context_engines`` (identity, budget, recall),
registered for the sidecar subprocess through a temporary ``*.dist-info`` on
its ``PYTHONPATH`` and trusted with ``CODEX_SIDECAR_ENGINE_ALLOWLIST``; the
mode is chosen with ``CODEX_SIDECAR_PROJECTION_MODE``.

Whether the sidecar really runs the requested mode is read back, never
assumed: ``sidecar/status`` -> ``lifecycle`` -> ``projectionMode`` (top level,
or the thread's entry). A sidecar that exits on an unknown mode, or reports a
different mode, or reports none for ``epoch``/``delta`` (it ignores the
variable), gets a "mode not available" row instead of numbers. A sidecar that
reports no ``projectionMode`` at all projects on every turn, so ``per_turn``
is accepted then (and the row says so).

Every figure comes from the request bodies the fake model recorded:

* model-input tokens of a request: the model-visible strings of its
  ``input`` items (message text, tool-call names and arguments, tool
  output), counted with ``engines.tokens.count_tokens`` (o200k_base from
  bpe-openai, offline; chars/4 only if that is unavailable: the table says
  which) - the same counter for every row;
* total over the session, and the largest single request;
* prefix reuse: the share of requests whose ``input`` starts with the
  previous request's ``input`` unchanged (item ``id`` fields left out), i.e.
  what a provider's prompt cache can reuse;
* rebuilds: ``sidecar/status`` ``lifecycle`` ``rebuilds`` (top level or the
  thread's), "n/a" when the sidecar does not report it;
* wall time per turn: ``turn/start`` sent to ``turn/completed`` received,
  mean over the turns. The same native session drifts by 10-40% between
  runs on a shared machine, more than the 10% target, so every sidecar run
  has its own native control ("native again"), and its wall ratio is its
  time over its control's. ``--wall paired`` (the default): the control
  session is open beside the sidecar session and the two take turns
  (``--pair-block`` 1: sidecar 0, native 0-1, sidecar 1-2, native 2-3,
  ...), so both meet the same moments of the machine and only one works at
  any time; a session that hands over is let settle first (the sidecar
  finishes finalising, then 0.1 s), so its background work never lands in
  the other's turns. Half the sidecar's turns follow one of its own at
  once and wait for its finalisation as a client's would; the other half
  start settled, which flatters the sidecar by half that wait (~1 ms of
  ~100);
  ``--wall sequential``: the control runs after the sidecar run, and the
  ratio is over the mean of the native runs right before and after it.
  ``--no-control`` skips the controls (ratios against the first native run
  only). ``--repeat N`` runs every sidecar row N times (tokens are
  deterministic; the wall ratio is the mean, its range is shown);
* Codex's fixed framing: the native run's first request minus the user's
  prompt (base instructions, developer instructions, environment context).

Codex runs with its own defaults and an empty HOME (``--user-home`` keeps
yours): it snapshots the login shell at every session start, and every
rebuild's revert starts a new session, so with heavy dotfiles each rebuild
also pays for your shell's startup. The fake model reports each request's real
o200k input count as usage (its own figure is JSON characters / 4), so
Codex's window bookkeeping and automatic compaction behave as with a real
model; a native compaction's model request counts as input and the row says
so.

stdout carries the table only (with its legend); progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

from engines.tokens import count_tokens, tokenizer_name
from tools.client import AppServerClient, RpcError, ServerGone
from tools.codex_home import codex_env, find_codex_bin, make_codex_home
from tools.context_engines import DIST_NAME, ENGINES, snippet_of, snippet_text, write_dist_info
from tools.fake_model import FakeModel, ShellCall, Text, _Handler

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODES = ("per_turn", "epoch", "delta", "delta+revert")
MODE_ENV = "CODEX_SIDECAR_PROJECTION_MODE"
REBUILD_ENV = "CODEX_SIDECAR_REBUILD"


def projection_of(mode: str | None) -> str | None:
    """``delta+fresh`` -> ``delta``: a mode may name the rebuild strategy after a ``+``."""
    return None if mode is None else mode.split("+", 1)[0]


def rebuild_of(mode: str | None) -> str | None:
    """``delta+fresh`` -> ``fresh`` (passed as CODEX_SIDECAR_REBUILD); None: the sidecar's default."""
    return mode.split("+", 1)[1] if mode and "+" in mode else None
CONTROL_LABEL = "native again"
SIDECAR_SETTINGS: dict[str, str] = {}  # --sidecar-setting NAME=VALUE, as CODEX_SIDECAR_<NAME>
DEFAULT_TURNS = 40
DEFAULT_SEED = 4
TURN_TIMEOUT = 180.0

BUDGET_TOKENS = 8000  # the budget engine's token_budget
TARGET_IDENTITY_TOTAL = 1.05
TARGET_IDENTITY_REUSE = 0.95
TARGET_BUDGET_SLACK = 0.05
TARGET_RECALL_SLACK = 0.10
TARGET_WALL = 1.10
TARGET_STORE_TOTAL = 1.01
TARGET_STORE_REUSE = 0.99

SIDECAR_LOG_LEVEL = ["warning"]  # --sidecar-log-level
DEVELOPER_INSTRUCTIONS = "You are helping with the ledger service in this workspace. Be concrete."


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu(pid: int) -> tuple[float, float] | None:
    """CPU seconds (user + system) of ``pid`` itself and of its descendants
    (live ones, plus what each has reaped), read from ``/proc``; None where
    there is no ``/proc`` or the process is gone. Resolution: one clock
    tick (10 ms here)."""

    def stat(p: int) -> tuple[float, float]:
        with open(f"/proc/{p}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        # utime, stime, cutime, cstime are fields 14-17 of proc(5); here 11-14.
        own = (int(fields[11]) + int(fields[12])) / _CLK_TCK
        reaped = (int(fields[13]) + int(fields[14])) / _CLK_TCK
        return own, reaped

    def children(p: int) -> list[int]:
        out: list[int] = []
        for task in os.listdir(f"/proc/{p}/task"):
            with contextlib.suppress(OSError):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    out += [int(x) for x in f.read().split()]
        return out

    try:
        own, reaped = stat(pid)
        below = reaped
        todo = children(pid)
    except (OSError, ValueError, IndexError):
        return None
    while todo:
        child = todo.pop()
        try:
            c_own, c_reaped = stat(child)
            todo += children(child)
        except (OSError, ValueError, IndexError):
            continue  # gone between the listing and the read
        below += c_own + c_reaped
    return own, below


def progress(msg: str) -> None:
    print(f"[bench-context] {msg}", file=sys.stderr, flush=True)


# ======================================================================
# The scripted session


@dataclasses.dataclass(frozen=True)
class Turn:
    prompt: str
    reply: str
    command: str | None = None  # a turn with a tool call: exec_command, then `reply`

    @property
    def requests(self) -> int:
        return 2 if self.command else 1


TOPICS: dict[str, dict[str, Any]] = {
    "config": {
        "file": "src/config.py",
        "thing": "the settings loader",
        "facts": [
            "Settings are resolved from flags first, then APP_ environment variables, then the TOML file.",
            "Unknown keys in the config file raise an error at start-up rather than being ignored.",
            "The loader returns a frozen dataclass, so nothing can change a setting after start-up by accident.",
            "Each setting declares its own default right next to its type.",
            "Environment variables are parsed with the same converters as the file, so `APP_PORT=80` and `port = 80` agree.",
            "A reload on SIGHUP only touches logging and rate limits; the listener keeps its address.",
        ],
    },
    "logging": {
        "file": "src/logging_setup.py",
        "thing": "structured logging",
        "facts": [
            "Every log line is one JSON object on stderr with ts, level, logger, msg and fields.",
            "The redaction filter replaces values of keys named token, secret or password with their length.",
            "Request ids are attached with a contextvar, so async handlers keep the right id across awaits.",
            "The default level is INFO; DEBUG is only enabled per logger, never globally in production.",
            "Exceptions are logged once, at the boundary that handles them, with the incident id.",
        ],
    },
    "retry": {
        "file": "src/http_client.py",
        "thing": "the retry policy of the HTTP client",
        "facts": [
            "Transient failures (connection reset, 502, 503, 504) are retried with exponential backoff and full jitter.",
            "The client gives up after five attempts or ten seconds overall, whichever comes first.",
            "A 4xx answer is never retried, because repeating the same request cannot succeed.",
            "Non-idempotent POSTs are only retried when they carry an idempotency key.",
            "The backoff base is 200 ms with a factor of two, capped at three seconds per wait.",
        ],
    },
    "database": {
        "file": "src/ledger.py",
        "thing": "the ledger's database access",
        "facts": [
            "Entries are append-only; a correction is a new entry that references the one it reverses.",
            "Balances are computed from entries with a window function and cached per account for a minute.",
            "Each migration is reversible and must not hold a lock for more than a second on production data.",
            "The pool has ten connections per worker; holding one across a network call exhausts it quickly.",
            "New columns are added nullable, backfilled in batches, and only then constrained.",
        ],
    },
    "cache": {
        "file": "src/cache.py",
        "thing": "the read-through cache",
        "facts": [
            "Keys are the normalised request, so query parameter order does not create duplicates.",
            "Entries live for sixty seconds; writes invalidate by key prefix.",
            "Concurrent misses for one key are coalesced into a single backend request.",
            "A stale entry may be served for up to five seconds while one request refreshes it.",
        ],
    },
    "auth": {
        "file": "src/auth.py",
        "thing": "token authentication",
        "facts": [
            "Bearer tokens live fifteen minutes and are refreshed with a refresh token at /auth/token.",
            "The tenant id inside the token filters every query; a missing tenant is a 403.",
            "Token signatures are checked against the key set fetched at start-up and every hour after.",
            "Clock skew of up to thirty seconds is tolerated when checking expiry.",
        ],
    },
    "tests": {
        "file": "tests/test_ledger.py",
        "thing": "the test suite",
        "facts": [
            "Tests run with pytest; shared fixtures live in tests/conftest.py.",
            "Network tests are marked `net` and skipped unless explicitly selected.",
            "The ledger tests build accounts with a factory fixture instead of hand-written rows.",
            "A flaky test is quarantined with an issue link, never retried silently.",
            "Property-based tests check that reversing an entry twice restores the balance.",
        ],
    },
    "api": {
        "file": "src/api.py",
        "thing": "the HTTP API",
        "facts": [
            "List endpoints paginate with an opaque cursor and a limit of at most two hundred.",
            "Errors are problem+json documents with a stable type URI.",
            "Sorting is stable: by created_at, then by id, so pages never overlap.",
            "Handlers validate input with msgspec structs before touching the database.",
            "Every response carries the request id in a header for support tickets.",
        ],
    },
    "queue": {
        "file": "src/jobs.py",
        "thing": "the background job queue",
        "facts": [
            "Jobs are delivered at least once, so every job handler must be idempotent.",
            "A failed job is retried three times with backoff, then moved to the dead-letter queue.",
            "The nightly reconciliation job compares ledger totals with the bank statement.",
            "Workers acknowledge a job only after its database transaction committed.",
        ],
    },
    "deploy": {
        "file": "deploy/release.md",
        "thing": "the release process",
        "facts": [
            "Images are tagged with the git sha and rolled out a quarter of the fleet at a time.",
            "A rise in the 5xx rate stops the rollout automatically.",
            "Migrations run in a separate job before the new version starts.",
            "Rolling back means redeploying the previous tag; migrations must stay compatible for one release.",
        ],
    },
}

GENERIC = [
    "That keeps the behaviour predictable for operators, which matters more here than saving a few lines.",
    "It is worth writing this down in the module docstring so the next person does not rediscover it.",
    "The trade-off is a little more code at the call site in exchange for failures that are easy to read.",
    "I would keep the change small and land the refactor separately, so the review stays focused.",
    "A test that pins this behaviour is cheap, and it documents the intent better than a comment.",
    "If we ever need more flexibility, the same interface can grow an optional parameter without breaking callers.",
    "Nothing in the current code depends on the old order, so the change is safe to make now.",
    "The log line should name the account and the operation, not the payload.",
    "This mirrors what the HTTP client already does, so the two stay consistent.",
    "Measured locally the difference is well under a millisecond per request.",
]

ASKS = [
    "Can you explain how {thing} works in {file}?",
    "I'm not sure I understand {thing}. What are the important rules?",
    "We keep getting questions about {thing}. Could you write a short explanation I can paste into the docs?",
    "Review {file} with {thing} in mind and tell me what you would change.",
    "What could go wrong with {thing} under load, and how would we notice?",
    "Write a small helper for {thing} in {file}, with a docstring and a test.",
    "Compare our approach to {thing} with the usual alternatives. Is ours reasonable?",
    "A teammate suggests rewriting {thing}. What would you check before agreeing?",
    "Summarise what we have decided about {thing} so far, as a bullet list.",
    "How would you test {thing} without touching the network?",
]

SHORT_ASKS = ["Thanks, that helps. Anything else I should know?", "Go on.", "Can you make that shorter?", "Why?", "OK, and the edge cases?"]

PASTES = [
    "Here is the current code:\n\n```python\ndef balance(account_id, conn):\n    rows = conn.execute(\n        \"SELECT amount FROM entries WHERE account_id = ?\", (account_id,)\n    ).fetchall()\n    return sum(r[0] for r in rows)\n```",
    "This is the traceback we saw yesterday:\n\n```\nTraceback (most recent call last):\n  File \"src/jobs.py\", line 88, in run\n    handler(job)\n  File \"src/ledger.py\", line 142, in reconcile\n    raise LedgerMismatch(account_id, expected, actual)\nledger.LedgerMismatch: account 4411: expected 1200.00, got 1185.50\n```",
    "Config we run in staging:\n\n```toml\nport = 8080\nlog_level = \"info\"\n[database]\nurl = \"postgres://ledger@db/ledger\"\npool_size = 10\n[cache]\nttl_seconds = 60\n```",
]

CODE_BLOCKS = [
    "```python\ndef with_retries(call, *, attempts=5, base=0.2, cap=3.0, deadline=10.0):\n    start = time.monotonic()\n    for attempt in range(attempts):\n        try:\n            return call()\n        except TransientError:\n            wait = min(cap, base * 2 ** attempt) * random.random()\n            if time.monotonic() - start + wait > deadline:\n                raise\n            time.sleep(wait)\n    return call()\n```",
    "```python\n@dataclass(frozen=True)\nclass Settings:\n    port: int = 8080\n    log_level: str = \"info\"\n    pool_size: int = 10\n\n\ndef load(path: Path, env: Mapping[str, str]) -> Settings:\n    data = tomllib.loads(path.read_text()) if path.exists() else {}\n    unknown = set(data) - {f.name for f in fields(Settings)}\n    if unknown:\n        raise ConfigError(f\"unknown keys: {sorted(unknown)}\")\n    return Settings(**{**data, **from_env(env)})\n```",
    "```python\ndef test_reversal_restores_balance(ledger, account):\n    entry = ledger.post(account, Decimal(\"25.00\"))\n    ledger.reverse(entry)\n    assert ledger.balance(account) == Decimal(\"0.00\")\n```",
    "```python\nasync def get_cached(key: str, fetch: Callable[[], Awaitable[bytes]]) -> bytes:\n    entry = cache.get(key)\n    if entry and not entry.expired():\n        return entry.value\n    async with locks[key]:  # coalesce concurrent misses\n        entry = cache.get(key)\n        if entry and not entry.expired():\n            return entry.value\n        value = await fetch()\n        cache.set(key, value, ttl=60)\n        return value\n```",
    "```sql\nSELECT account_id,\n       SUM(amount) OVER (PARTITION BY account_id ORDER BY created_at, id) AS running\nFROM entries\nWHERE tenant_id = :tenant\nORDER BY created_at, id\nLIMIT :limit;\n```",
]

COMMANDS = [
    "ls -R",
    "wc -l src/*.py tests/*.py",
    "grep -n 'def ' src/ledger.py",
    "head -n 12 src/config.py",
    "cat notes/decisions.md",
    "grep -rn TODO src",
    "sed -n 1,10p tests/test_ledger.py",
]

WORKSPACE: dict[str, str] = {
    "README.md": "# ledger service\n\nAppend-only ledger with an HTTP API, a job queue and a read-through cache.\n",
    "src/__init__.py": "",
    "src/config.py": textwrap.dedent(
        """\
        from dataclasses import dataclass


        @dataclass(frozen=True)
        class Settings:
            port: int = 8080
            log_level: str = "info"
            pool_size: int = 10
            cache_ttl_seconds: int = 60


        def load(path, env):
            # TODO: reject unknown keys
            ...
        """
    ),
    "src/ledger.py": textwrap.dedent(
        """\
        from decimal import Decimal


        class LedgerMismatch(Exception):
            pass


        def post(conn, account_id, amount: Decimal):
            ...


        def reverse(conn, entry_id):
            ...


        def balance(conn, account_id) -> Decimal:
            ...


        def reconcile(conn, statement):
            # TODO: batch the comparison per day
            ...
        """
    ),
    "src/cache.py": "def get_cached(key, fetch):\n    ...\n",
    "src/api.py": "def list_entries(request):\n    # TODO: cursor pagination\n    ...\n",
    "src/jobs.py": "def run(job):\n    ...\n",
    "tests/test_ledger.py": textwrap.dedent(
        """\
        from decimal import Decimal


        def test_post_then_balance(ledger, account):
            ledger.post(account, Decimal("10.00"))
            assert ledger.balance(account) == Decimal("10.00")


        def test_reversal_restores_balance(ledger, account):
            entry = ledger.post(account, Decimal("25.00"))
            ledger.reverse(entry)
            assert ledger.balance(account) == Decimal("0.00")
        """
    ),
    "notes/decisions.md": textwrap.dedent(
        """\
        # Decisions

        - Entries are append-only; corrections are reversals.
        - Cursor pagination, limit <= 200.
        - Retries: 5 attempts, 10 s deadline, never on 4xx.
        """
    ),
}


class _Deck:
    """Draws without repeats until the pool is used up, then reshuffles."""

    def __init__(self, rng: random.Random, pool: Sequence[str]) -> None:
        self.rng, self.pool, self.cards = rng, list(pool), []

    def draw(self, n: int) -> list[str]:
        out = []
        for _ in range(n):
            if not self.cards:
                self.cards = self.pool[:]
                self.rng.shuffle(self.cards)
            out.append(self.cards.pop())
        return out


def _reply(rng: random.Random, topic: dict[str, Any], size: str) -> str:
    facts, generic = _Deck(rng, topic["facts"]), _Deck(rng, GENERIC)
    if size == "short":
        return " ".join(facts.draw(2) + generic.draw(1))
    parts = [f"Here is how {topic['thing']} fits together in {topic['file']}. " + " ".join(facts.draw(3))]
    paragraphs = 3 if size == "medium" else rng.randint(4, 7)
    for _ in range(paragraphs - 1):
        sentences = facts.draw(2) + generic.draw(2)
        rng.shuffle(sentences)
        parts.append(" ".join(sentences))
    if size == "long":
        parts.insert(2, "For example:\n\n" + rng.choice(CODE_BLOCKS))
        parts.append("In short:\n" + "\n".join(f"- {b}" for b in facts.draw(2) + generic.draw(2)))
    return "\n\n".join(parts)


def build_script(turns: int = DEFAULT_TURNS, seed: int = DEFAULT_SEED) -> list[Turn]:
    """The scripted session: ``turns`` deterministic (prompt, reply, tool call) turns.

    Nearly half the replies are long (1.5-3.5 KB, with a code block), the
    rest medium (about 1 KB) or short; every sixth turn runs a command first.
    """
    rng = random.Random(seed)
    names = sorted(TOPICS)
    script: list[Turn] = []
    topic_name = rng.choice(names)
    commands = iter(COMMANDS * (turns // len(COMMANDS) + 1))
    for i in range(turns):
        if i % 4 == 0:
            topic_name = rng.choice(names)
        topic = TOPICS[topic_name]
        size = rng.choices(["short", "medium", "long"], weights=[2, 3, 6])[0]
        if i % 6 == 2:
            command = next(commands)
            prompt = f"Run `{command}` and tell me what stands out for {topic['thing']}."
            reply = f"The output of `{command}` shows the layout I expected. " + _reply(rng, topic, size)
            script.append(Turn(prompt, reply, command))
            continue
        roll = rng.random()
        if roll < 0.15 and script:
            prompt = rng.choice(SHORT_ASKS)
        else:
            prompt = rng.choice(ASKS).format(**topic)
            if roll > 0.85:
                prompt += "\n\n" + rng.choice(PASTES)
        script.append(Turn(prompt, _reply(rng, topic, size)))
    return script


def make_workspace(folder: Path) -> Path:
    for rel, text in WORKSPACE.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder


class Router:
    """Answers every model request from the script, by what the request is.

    The fake model takes this as its reply to every request. A request whose
    last input item is the output of this turn's tool call gets the turn's
    reply; a native compaction request (Codex's checkpoint prompt) gets a
    fixed summary; anything else is the turn's first request and gets the
    tool call (if the turn has one) or the reply. ``request_turns`` records
    which turn each request belonged to (-1: not a turn request).
    """

    COMPACTION_MARK = "CONTEXT CHECKPOINT COMPACTION"

    def __init__(self, script: Sequence[Turn]) -> None:
        self.script = script
        self.turn = -1
        self.request_turns: list[int] = []
        self.kinds: list[str] = []
        self._lock = threading.Lock()

    def begin(self, index: int) -> None:
        with self._lock:
            self.turn = index

    def call_id(self, index: int) -> str:
        return f"call_bench_{index + 1}"

    def __call__(self, body: dict) -> Any:
        with self._lock:
            index = self.turn
            items = body.get("input") or []
            last = items[-1] if items else {}
            turn = self.script[index] if 0 <= index < len(self.script) else None
            if self._is_compaction(last):
                self.request_turns.append(-1)
                self.kinds.append("compaction")
                return Text("Checkpoint summary: the user and the assistant discussed the ledger service.")
            self.request_turns.append(index)
            if turn is None:
                self.kinds.append("unexpected")
                return Text("(no turn in progress)")
            if last.get("type") == "function_call_output" and last.get("call_id") == self.call_id(index):
                self.kinds.append("tool-followup")
                return Text(turn.reply)
            if turn.command:
                self.kinds.append("tool-call")
                return ShellCall(turn.command, call_id=self.call_id(index), login=False)
            self.kinds.append("reply")
            return Text(turn.reply)

    def _is_compaction(self, item: dict) -> bool:
        if item.get("type", "message") != "message" or item.get("role") != "user":
            return False
        content = item.get("content")
        texts = [content] if isinstance(content, str) else [p.get("text", "") for p in content or [] if isinstance(p, dict)]
        return any(self.COMPACTION_MARK in t for t in texts if isinstance(t, str))


# ======================================================================
# Measuring request bodies

_SKIP_KEYS = frozenset({"id", "type", "status", "role", "call_id", "annotations"})
_item_cache: dict[bytes, int] = {}


def _strings(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for key in sorted(value):
            if key not in _SKIP_KEYS:
                _strings(value[key], out)
    elif isinstance(value, list):
        for child in value:
            _strings(child, out)


def item_tokens(item: Any) -> int:
    """Tokens of one ``input`` item: its model-visible strings (text, tool
    names and arguments, tool output), ids and type tags left out."""
    strings: list[str] = []
    _strings(item, strings)
    key = hashlib.blake2b("\x00".join(strings).encode("utf-8", "surrogatepass"), digest_size=16).digest()
    cached = _item_cache.get(key)
    if cached is None:
        cached = _item_cache[key] = sum(count_tokens(s) for s in strings)
    return cached


def normalise_item(item: Any) -> Any:
    """An input item for prefix comparison: its ``id`` (volatile) left out."""
    if isinstance(item, dict):
        return {k: v for k, v in item.items() if k != "id"}
    return item


def request_tokens(body: dict) -> int:
    return sum(item_tokens(item) for item in body.get("input") or [])


@dataclasses.dataclass
class RequestStats:
    tokens: int
    items: int
    extends_previous: bool | None  # None for the first request
    turn: int
    kind: str


def measure_requests(bodies: Sequence[dict], router: Router) -> list[RequestStats]:
    out: list[RequestStats] = []
    previous: list[Any] | None = None
    for i, body in enumerate(bodies):
        items = [normalise_item(item) for item in body.get("input") or []]
        extends = None if previous is None else items[: len(previous)] == previous
        turn = router.request_turns[i] if i < len(router.request_turns) else -1
        kind = router.kinds[i] if i < len(router.kinds) else "?"
        out.append(RequestStats(request_tokens(body), len(items), extends, turn, kind))
        previous = items
    return out


def framing_tokens(first_request: dict, prompt: str) -> int:
    """The first request of an empty thread without the user's prompt item."""
    items = first_request.get("input") or []
    if not items:
        return 0
    last = items[-1]
    texts: list[str] = []
    _strings(last, texts)
    if last.get("role") != "user" or prompt not in "".join(texts):
        raise RuntimeError("the first native request does not end with the first prompt; cannot measure the framing")
    return request_tokens(first_request) - item_tokens(last)


MODEL_LATENCY = [0.0]
"""Seconds the fake model waits before each response (``--model-latency-ms``)."""


class _CountingHandler(_Handler):
    """Reports the request's o200k input tokens as ``usage.input_tokens``
    (the fake model's own figure is characters of JSON / 4), so that Codex's
    context-window bookkeeping, and so its automatic compaction, sees what a
    real model would report."""

    _bench_input_tokens: int | None = None

    def _start_stream(self) -> None:
        if MODEL_LATENCY[0] > 0:
            time.sleep(MODEL_LATENCY[0])  # time to first byte, as a real model's
        super()._start_stream()

    def _completed(self, resp_id: str, body: dict, output: list, out_tokens: int) -> None:
        self._bench_input_tokens = request_tokens(body)
        super()._completed(resp_id, body, output, out_tokens)

    def _event(self, payload: dict) -> None:
        usage = (payload.get("response") or {}).get("usage") if payload.get("type") == "response.completed" else None
        if isinstance(usage, dict) and self._bench_input_tokens is not None:
            usage["input_tokens"] = self._bench_input_tokens
            usage["total_tokens"] = self._bench_input_tokens + int(usage.get("output_tokens") or 0)
        super()._event(payload)


class CountingFakeModel(FakeModel):
    """:class:`FakeModel` whose usage figures are real o200k input counts."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(host, port)
        self._server.RequestHandlerClass = _CountingHandler


# ======================================================================
# Running one session


@dataclasses.dataclass
class RunResult:
    label: str
    engine: str | None  # short name; None for the native run
    mode: str | None
    available: bool = True
    note: str = ""
    error: str | None = None
    requests: list[RequestStats] = dataclasses.field(default_factory=list)
    turn_walls: list[float] = dataclasses.field(default_factory=list)
    failed_turns: list[int] = dataclasses.field(default_factory=list)
    projection_mode: str | None = None
    rebuilds: int | None = None
    status: dict | None = None
    snippet_tokens: list[int] = dataclasses.field(default_factory=list)
    framing: int | None = None  # first request minus the prompt
    startup: float | None = None  # spawn to thread started, seconds
    cpu_top: float | None = None  # CPU seconds over the turns: the spawned process (the sidecar, or codex's launcher)
    cpu_below: float | None = None  # ... and everything it started (codex, its tools)
    context_window: int | None = None  # as Codex reports it (thread/tokenUsage/updated)
    bodies: list[dict] | None = None  # the raw request bodies, with run_one(keep_bodies=True)
    pair: int | None = None  # --wall paired: the sidecar run and the native run that took turns with it share this
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.available and self.error is None and bool(self.requests)

    @property
    def total(self) -> int:
        return sum(r.tokens for r in self.requests)

    @property
    def largest(self) -> int:
        return max((r.tokens for r in self.requests), default=0)

    @property
    def reuse(self) -> float | None:
        flags = [r.extends_previous for r in self.requests if r.extends_previous is not None]
        return sum(flags) / len(flags) if flags else None

    @property
    def wall_per_turn(self) -> float | None:
        return statistics.fmean(self.turn_walls) if self.turn_walls else None

    @property
    def sidecar_cpu_per_turn(self) -> float | None:
        """The sidecar process's own CPU seconds a turn (None for native)."""
        if self.engine is None or self.cpu_top is None or not self.turn_walls:
            return None
        return self.cpu_top / len(self.turn_walls)

    @property
    def codex_cpu_per_turn(self) -> float | None:
        """Codex's CPU seconds a turn: everything below the sidecar, or the
        whole native tree (codex's launcher included, as below the sidecar)."""
        if self.cpu_below is None or self.cpu_top is None or not self.turn_walls:
            return None
        codex = self.cpu_below + (self.cpu_top if self.engine is None else 0.0)
        return codex / len(self.turn_walls)

    def snippet_allowance(self) -> int:
        """Snippet tokens as the model must see them at least: each turn's
        snippet once in every request of that turn."""
        if not self.snippet_tokens:
            return 0
        return sum(self.snippet_tokens[r.turn] for r in self.requests if 0 <= r.turn < len(self.snippet_tokens))

    def as_dict(self) -> dict:
        return {
            "label": self.label,
            "engine": self.engine,
            "mode": self.mode,
            "available": self.available,
            "note": self.note,
            "error": self.error,
            "projectionModeReported": self.projection_mode,
            "rebuilds": self.rebuilds,
            "requests": [dataclasses.asdict(r) for r in self.requests],
            "totalTokens": self.total if self.requests else None,
            "largestRequestTokens": self.largest if self.requests else None,
            "prefixReuse": self.reuse,
            "turnWallSeconds": self.turn_walls,
            "wallPerTurnSeconds": self.wall_per_turn,
            "failedTurns": self.failed_turns,
            "snippetTokensPerTurn": self.snippet_tokens or None,
            "snippetAllowanceTokens": self.snippet_allowance() if self.snippet_tokens else None,
            "firstRequestFramingTokens": self.framing,
            "startupSeconds": self.startup,
            "cpuSecondsOverTurns": None if self.cpu_top is None else {"spawned": self.cpu_top, "descendants": self.cpu_below},
            "modelContextWindow": self.context_window,
            "sidecarStatusLifecycle": (self.status or {}).get("lifecycle") if self.status else None,
            "seconds": self.seconds,
            "pair": self.pair,
        }


@dataclasses.dataclass
class Paths:
    root: Path
    work: Path
    site: Path
    home: Path | None = None
    """HOME for codex (and the login shell it snapshots); None = the user's."""


def prepare(root: Path, *, user_home: bool = False) -> Paths:
    """The shared workspace, the engines' dist-info and (unless ``user_home``)
    an empty HOME under ``root``."""
    paths = Paths(root=root, work=make_workspace(root / "work"), site=root / "site")
    write_dist_info(paths.site)
    if not user_home:
        paths.home = root / "home"
        paths.home.mkdir()
    return paths


def _lifecycle(status: Any) -> dict:
    lc = status.get("lifecycle") if isinstance(status, dict) else None
    return lc if isinstance(lc, dict) else {}


def _thread_entry(lc: dict, thread_id: str | None) -> dict:
    threads = lc.get("threads")
    if isinstance(threads, dict) and thread_id is not None and isinstance(threads.get(thread_id), dict):
        return threads[thread_id]
    return {}


def reported_mode(lc: dict, thread_id: str | None = None) -> str | None:
    """``projectionMode`` of the lifecycle section (top level, else the thread's)."""
    for where in (lc, _thread_entry(lc, thread_id)):
        value = where.get("projectionMode")
        if isinstance(value, str):
            return value
        if isinstance(value, dict) and isinstance(value.get("mode"), str):
            return value["mode"]
    return None


def reported_rebuilds(lc: dict, thread_id: str | None = None) -> int | None:
    """The ``rebuilds`` counter (top level, else the thread's, else the sum
    over threads), or None when the sidecar does not report one."""
    for where in (lc, _thread_entry(lc, thread_id)):
        if isinstance(where.get("rebuilds"), int):
            return where["rebuilds"]
    threads = lc.get("threads")
    if isinstance(threads, dict):
        counts = [t["rebuilds"] for t in threads.values() if isinstance(t, dict) and isinstance(t.get("rebuilds"), int)]
        if counts:
            return sum(counts)
    return None


def _stderr_tail(client: AppServerClient | None, lines: int = 3) -> str:
    if client is None:
        return ""
    text = client.stderr_text.strip().splitlines()
    keep = [line.strip() for line in text if line.strip()][-lines:]
    return " | ".join(keep)[-400:]


def _stderr_reason(client: AppServerClient | None) -> str:
    """The last "Error: ..." line (how the sidecar's command line refuses a
    setting), else the last lines of stderr."""
    if client is None:
        return ""
    lines = [line.strip() for line in client.stderr_text.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("Error:") or " error " in line:
            return line[:300]
    return _stderr_tail(client)


class ModeNotAvailable(Exception):
    pass


def _session_env(home: Path, run_dir: Path, paths: Paths, codex_bin: str, engine: str | None, mode: str | None) -> tuple[list[str], dict[str, str]]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_")}
    base["XDG_CONFIG_HOME"] = str(run_dir / "xdg-config")  # no user config for codex-sidecar
    if paths.home is not None:
        # Codex snapshots the user's login shell at every session start, and a
        # rebuild's revert starts a new session: with the user's own dotfiles
        # (here pyenv and cargo setup, ~650 ms of CPU) that cost is the
        # machine's, not the sidecar's. --user-home measures it.
        base["HOME"] = str(paths.home)
    if engine is None:
        return [codex_bin, "app-server", "--listen", "stdio://"], codex_env(home, base)
    engine_id = ENGINES[engine]
    config = run_dir / "sidecar.toml"
    config.write_text(
        f'[engines.{json.dumps(ENGINES["budget"])}]\ntoken_budget = {BUDGET_TOKENS}\n\n'
        f'[engines.{json.dumps(ENGINES["recall"])}]\nsnippet_log = {json.dumps(str(run_dir / "snippets.jsonl"))}\n'
    )
    base.update(
        {
            "CODEX_SIDECAR_CODEX_BIN": codex_bin,
            "CODEX_SIDECAR_ENGINE": engine_id,
            "CODEX_SIDECAR_ENGINE_ALLOWLIST": DIST_NAME,
            "CODEX_SIDECAR_STATE_DIR": str(run_dir / "state"),
            "CODEX_SIDECAR_CONFIG": str(config),
            "CODEX_SIDECAR_LOG_LEVEL": SIDECAR_LOG_LEVEL[0],
            MODE_ENV: projection_of(mode) or "",
            **({REBUILD_ENV: rebuild_of(mode)} if rebuild_of(mode) else {}),
            **{f"CODEX_SIDECAR_{k.upper()}": v for k, v in SIDECAR_SETTINGS.items()},
            "PYTHONPATH": os.pathsep.join([str(paths.site), REPO] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])),
        }
    )
    return [sys.executable, "-m", "sidecar", "app-server", "--listen", "stdio://"], codex_env(home, base)


class _Session:
    """One benchmark session, driven a turn at a time, so that two sessions
    can take turns (``--wall paired``): open, then :meth:`turn` for every
    scripted turn, then :meth:`close`. Its own fake model, CODEX_HOME and
    app-server (the sidecar, or codex itself for a native run)."""

    def __init__(self, result: RunResult, script: Sequence[Turn], paths: Paths, run_dir: Path, codex_bin: str) -> None:
        self.result, self.script, self.paths, self.run_dir, self.codex_bin = result, script, paths, run_dir, codex_bin
        self.router = Router(script)
        self.model: CountingFakeModel | None = None
        self.client: AppServerClient | None = None
        self.thread_id: str | None = None
        self._cpu_before: tuple[float, float] | None = None

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        """Start the fake model and the app-server, initialize, check the
        sidecar's engine and mode, and start the thread."""
        result, paths = self.result, self.paths
        self.model = stack.enter_context(CountingFakeModel())
        self.model.script(*([self.router] * (4 * len(self.script) + 16)))
        home = make_codex_home(self.run_dir / "codex-home", self.model.base_url)
        argv, env = _session_env(home, self.run_dir, paths, self.codex_bin, result.engine, result.mode)
        spawned = time.perf_counter()
        self.client = client = await stack.enter_async_context(
            AppServerClient.spawn(argv, env=env, cwd=str(paths.work), request_timeout=TURN_TIMEOUT)
        )
        await client.initialize(experimental=True, name="codex_sidecar_bench", title="codex-sidecar context bench")
        if result.engine is not None:
            result.status = await client.request("sidecar/status")
            lc = _lifecycle(result.status)
            engine_seen = (lc.get("engine") or {}).get("id") if isinstance(lc.get("engine"), dict) else None
            if engine_seen != ENGINES[result.engine]:
                raise RpcError(0, f"the sidecar did not load engine {ENGINES[result.engine]!r} (lifecycle engine: {engine_seen!r}); {_stderr_tail(client)}")
            _check_mode(lc, None, result.mode, final=False)
        self.thread_id = await client.start_thread(cwd=str(paths.work), developerInstructions=DEVELOPER_INSTRUCTIONS)
        result.startup = time.perf_counter() - spawned

    def begin_turns(self) -> None:
        assert self.client is not None
        self._cpu_before = process_cpu(self.client.process.pid)

    async def turn(self, i: int) -> None:
        assert self.client is not None and self.thread_id is not None
        result, turn = self.result, self.script[i]
        self.router.begin(i)
        t0 = time.perf_counter()
        completed = await self.client.run_turn(self.thread_id, turn.prompt, timeout=TURN_TIMEOUT)
        result.turn_walls.append(time.perf_counter() - t0)
        if (completed.get("turn") or {}).get("status") != "completed":
            result.failed_turns.append(i + 1)
        if result.engine is not None and i == 0:
            result.status = await self.client.request("sidecar/status")
            _check_mode(_lifecycle(result.status), self.thread_id, result.mode, final=True)
        if (i + 1) % 10 == 0 or i + 1 == len(self.script):
            progress(f"  {result.label}: turn {i + 1}/{len(self.script)}")

    def end_turns(self) -> None:
        assert self.client is not None
        cpu_after = process_cpu(self.client.process.pid)
        if self._cpu_before is not None and cpu_after is not None:
            self.result.cpu_top = cpu_after[0] - self._cpu_before[0]
            self.result.cpu_below = cpu_after[1] - self._cpu_before[1]

    async def settle(self) -> None:
        """Wait (up to 5 s) until the sidecar has finalised the last turn;
        nothing to wait for natively."""
        if self.result.engine is None:
            return
        assert self.client is not None
        for _ in range(50):
            self.result.status = await self.client.request("sidecar/status")
            if not _thread_entry(_lifecycle(self.result.status), self.thread_id).get("busy"):
                return
            await trio.sleep(0.1)

    async def close(self) -> None:
        """What the sidecar reports once the last turn is finalised."""
        client, result, thread_id = self.client, self.result, self.thread_id
        assert client is not None
        for params in client.notifications_for("thread/tokenUsage/updated"):
            window = params.get("tokenUsage", {}).get("modelContextWindow")
            if isinstance(window, int):
                result.context_window = window
        if result.engine is None:
            return
        await self.settle()  # the last turn's finalisation runs after turn/completed
        lc = _lifecycle(result.status)
        result.projection_mode = reported_mode(lc, thread_id)
        result.rebuilds = reported_rebuilds(lc, thread_id)
        if result.projection_mode is not None and result.projection_mode != projection_of(result.mode):
            result.note = f"sidecar reported projectionMode {result.projection_mode!r} at the end"

    def failed(self, exc: BaseException) -> None:
        """Record why the session stopped."""
        result, client = self.result, self.client
        if isinstance(exc, ModeNotAvailable):
            result.available = False
            result.note = str(exc)
            return
        tail = _stderr_reason(client)
        if result.engine is not None and result.status is None and isinstance(exc, ServerGone):
            # Gone before answering sidecar/status: it refused its settings.
            result.available = False
            result.note = f"mode not available: sidecar exited: {tail or exc}"
        else:
            result.error = f"{type(exc).__name__}: {exc}" + (f" [stderr: {tail}]" if tail else "")

    def save_stderr(self) -> None:
        if self.client is not None:
            (self.run_dir / "stderr.log").write_bytes(bytes(self.client.stderr_bytes))


_SESSION_ERRORS = (ModeNotAvailable, ServerGone, RpcError, TimeoutError, OSError)


PAIR_BLOCK = [1]
"""``--pair-block``: turns a session runs back to back before the other takes over."""
SETTLE_SECONDS = 0.1
"""Pause at every hand-over, outside any timed turn (see :func:`_run_sessions`)."""


def turn_schedule(sessions: int, turns: int, block: int) -> list[tuple[int, int]]:
    """``(session, turn)`` in the order they run: blocks of ``block`` turns,
    the sessions in order for even blocks and in reverse for odd ones (so
    neither always goes first: A B B A A B ...)."""
    out = []
    for k, first in enumerate(range(0, turns, block)):
        order = range(sessions) if k % 2 == 0 else reversed(range(sessions))
        for s in order:
            out += [(s, i) for i in range(first, min(first + block, turns))]
    return out


async def _run_sessions(sessions: Sequence[_Session], turns: int) -> None:
    """Run the sessions' turns; with more than one, they take turns in
    blocks (:func:`turn_schedule`). At every hand-over the session that
    stops is let settle (the sidecar finishes finalising its last turn,
    then :data:`SETTLE_SECONDS` pass) before the other's next turn starts,
    so neither session's background work lands in the other's timed
    turns: a sidecar's finalisation still counts, in every turn of a block
    but the first, where the next ``turn/start`` waits for it. The first
    session that fails stops all of them (a pair's wall ratio needs both);
    its error is recorded on it."""
    current: _Session | None = None
    try:
        async with contextlib.AsyncExitStack() as stack:
            for current in sessions:
                await current.open(stack)
            for s in sessions:
                s.begin_turns()
            last: _Session | None = None
            for index, i in turn_schedule(len(sessions), turns, PAIR_BLOCK[0]):
                current = sessions[index]
                if last is not None and last is not current:
                    await last.settle()
                    await trio.sleep(SETTLE_SECONDS)
                await current.turn(i)
                last = current
            for s in sessions:
                s.end_turns()
            for current in sessions:
                await current.close()
    except _SESSION_ERRORS as exc:
        if current is not None:
            current.failed(exc)
        for s in sessions:
            if s is not current and s.result.available and s.result.error is None:
                s.result.error = f"stopped: {current.result.label if current else 'the session'} it ran beside failed"
    finally:
        for s in sessions:
            s.save_stderr()


def _check_mode(lc: dict, thread_id: str | None, mode: str | None, *, final: bool) -> None:
    """Raise ModeNotAvailable unless the sidecar says it runs ``mode``.

    Before the first turn only a contradiction counts (a thread's entry may
    appear with its first turn); after it, a missing field is accepted for
    ``per_turn`` only (a sidecar without projection modes projects every turn).
    """
    wanted = rebuild_of(mode)
    if wanted is not None and lc.get("rebuild") != wanted:
        raise ModeNotAvailable(f"mode not available: sidecar/status reports rebuild {lc.get('rebuild')!r}, not {wanted!r}")
    seen = reported_mode(lc, thread_id)
    mode = projection_of(mode)
    if seen is not None and seen != mode:
        raise ModeNotAvailable(f"mode not available: sidecar runs projectionMode {seen!r}")
    if final and seen is None and mode != "per_turn":
        raise ModeNotAvailable(f"mode not available: sidecar/status reports no projectionMode ({MODE_ENV} ignored)")


def run_one(
    label: str,
    engine: str | None,
    mode: str | None,
    script: Sequence[Turn],
    paths: Paths,
    index: int,
    codex_bin: str,
    *,
    keep_bodies: bool = False,
) -> RunResult:
    """Run one session (native when ``engine`` is None) in ``paths.root/runs/<index>``."""
    (result,) = run_together([(label, engine, mode)], script, paths, index, codex_bin, keep_bodies=keep_bodies)
    return result


def run_together(
    specs: Sequence[tuple[str, str | None, str | None]],
    script: Sequence[Turn],
    paths: Paths,
    index: int,
    codex_bin: str,
    *,
    keep_bodies: bool = False,
) -> list[RunResult]:
    """Run one session per ``(label, engine, mode)``, all open at once and
    taking turns (see :func:`_run_sessions`), in ``paths.root/runs/<index +
    k>``. With two specs, a sidecar session and a native one, both live
    through the same moments of a shared machine: their wall times compare
    turn by turn instead of minutes apart."""
    sessions = []
    for k, (label, engine, mode) in enumerate(specs):
        run_dir = paths.root / "runs" / f"{index + k:02d}"  # same-length paths for every run
        run_dir.mkdir(parents=True)
        sessions.append(_Session(RunResult(label=label, engine=engine, mode=mode), script, paths, run_dir, codex_bin))
    progress(" + ".join(label for label, _, _ in specs) + ": starting")
    started = time.monotonic()
    trio.run(_run_sessions, sessions, len(script))
    seconds = time.monotonic() - started
    for session in sessions:
        _measure(session, script, seconds, keep_bodies)
    return [s.result for s in sessions]


def _measure(session: _Session, script: Sequence[Turn], seconds: float, keep_bodies: bool) -> None:
    """A finished session's figures, from its fake model's request bodies."""
    result, router = session.result, session.router
    bodies = session.model.requests if session.model is not None else []
    label, engine, mode = result.label, result.engine, result.mode
    result.seconds = seconds
    if keep_bodies:
        result.bodies = bodies
    if result.available and bodies:
        result.requests = measure_requests(bodies, router)
        with contextlib.suppress(RuntimeError):
            result.framing = framing_tokens(bodies[0], script[0].prompt)
        compactions = sum(1 for r in result.requests if r.kind == "compaction")
        unexpected = sum(1 for r in result.requests if r.kind == "unexpected")
        if compactions:
            result.note = _join(result.note, f"Codex compacted natively {compactions}x")
        if unexpected:
            result.note = _join(result.note, f"{unexpected} model request(s) outside any turn")
    if engine is not None and projection_of(mode) == "per_turn" and result.ok and result.projection_mode is None:
        result.note = _join(result.note, "no projectionMode reported: pre-mode sidecar, projects every turn")
    if engine == "recall" and result.ok:
        result.snippet_tokens = _snippet_tokens(session.run_dir / "snippets.jsonl", script)
    if result.failed_turns:
        result.error = _join(result.error, f"turns not completed: {result.failed_turns}")
    if result.ok:
        progress(f"{label}: {len(result.requests)} model requests in {result.seconds:.1f} s" + (f" ({result.error})" if result.error else ""))
    else:
        progress(f"{label}: {result.note or result.error}")


def _join(a: str | None, b: str) -> str:
    return f"{a}; {b}" if a else b


def _snippet_tokens(log: Path, script: Sequence[Turn]) -> list[int]:
    """Per turn, the tokens of the snippet the recall engine added (the ids
    it logged; recomputed from the prompt when the log is missing or short)."""
    logged: list[int] = []
    if log.exists():
        for line in log.read_text().splitlines():
            with contextlib.suppress(ValueError, KeyError, TypeError, StopIteration):
                logged.append(count_tokens(snippet_of(json.loads(line)["snippetId"])))
    if len(logged) >= len(script):
        return logged[: len(script)]
    return [count_tokens(snippet_text(t.prompt)) for t in script]


# ======================================================================
# The table


@dataclasses.dataclass
class Check:
    name: str
    target: str
    passed: bool
    detail: str


def checks_for(run: RunResult, native: RunResult, framing: int, walls: Sequence[float] | None = None) -> list[Check]:
    """The issue's targets that apply to this row. ``walls``: the row's
    bracketed wall ratios, one per repeat (see :func:`bracketed_walls`);
    without them the wall ratio is this run against ``native``."""
    if not run.ok or not native.ok or run.engine is None:
        return []
    out: list[Check] = []
    total_ratio = run.total / native.total
    if run.engine == "identity" and projection_of(run.mode) == "delta":
        out.append(Check("total", f"total <= {TARGET_IDENTITY_TOTAL:.2f}x", total_ratio <= TARGET_IDENTITY_TOTAL, f"{total_ratio:.2f}x"))
        reuse = run.reuse or 0.0
        out.append(Check("reuse", f"reuse >= {TARGET_IDENTITY_REUSE:.2f}", reuse >= TARGET_IDENTITY_REUSE, f"{reuse:.2f}"))
    if run.engine == "store" and projection_of(run.mode) == "delta":
        out.append(Check("total", f"total <= {TARGET_STORE_TOTAL:.2f}x", total_ratio <= TARGET_STORE_TOTAL, f"{total_ratio:.2f}x"))
        reuse = run.reuse or 0.0
        out.append(Check("reuse", f"reuse >= {TARGET_STORE_REUSE:.2f}", reuse >= TARGET_STORE_REUSE, f"{reuse:.2f}"))
        out.append(Check("rebuilds", "rebuilds = 0", run.rebuilds == 0, f"{run.rebuilds}"))
    if run.engine == "budget":
        bound = budget_bound(framing)
        grows = native.largest > bound
        passed = run.largest <= bound and grows
        detail = f"max {run.largest:,} vs {bound:,}" + ("" if grows else "; native never exceeds it")
        out.append(Check("max", f"max <= {bound:,}", passed, detail))
    if run.engine == "recall" and projection_of(run.mode) == "delta":
        allowance = run.snippet_allowance()
        limit = (native.total + allowance) * (1 + TARGET_RECALL_SLACK)
        out.append(Check("total", "total <= (native+snip)x1.10", run.total <= limit, f"{run.total / (native.total + allowance):.2f}x"))
    ratio = wall_ratio(run, native, walls)
    if ratio is not None:
        detail = f"{ratio:.2f}x"
        if walls and len(walls) > 1:
            detail += f", {len(walls)} runs {min(walls):.2f}-{max(walls):.2f}x"
            low, high = mean_interval(walls)
            detail += f", mean within {low:.2f}-{high:.2f}x"
        out.append(Check("wall", f"wall <= {TARGET_WALL:.2f}x", ratio <= TARGET_WALL, detail))
    return out


#: Two-sided 95% Student t quantiles by degrees of freedom (1-30); larger samples use 1.96.
_T95 = (12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.20, 2.18, 2.16, 2.14, 2.13,
        2.12, 2.11, 2.10, 2.09, 2.09, 2.08, 2.07, 2.07, 2.06, 2.06, 2.06, 2.05, 2.05, 2.05, 2.04)


def mean_interval(values: Sequence[float]) -> tuple[float, float]:
    """A 95% confidence interval of the mean of ``values`` (at least two):
    how far the row's wall ratio could be from its true value, given the
    run-to-run spread. The verdict stays the mean's; this says how firm it is."""
    mean = statistics.fmean(values)
    dof = len(values) - 1
    half = (_T95[dof - 1] if dof <= len(_T95) else 1.96) * statistics.stdev(values) / len(values) ** 0.5
    return mean - half, mean + half


def wall_ratio(run: RunResult, native: RunResult, walls: Sequence[float] | None = None) -> float | None:
    if walls:
        return statistics.fmean(walls)
    if run.wall_per_turn is not None and native.wall_per_turn:
        return run.wall_per_turn / native.wall_per_turn
    return None


def bracketed_walls(runs: Sequence[RunResult]) -> dict[str, list[float]]:
    """Per sidecar row label, its wall per turn over its native control's,
    once per repeat.

    The same native session drifts by 10-40% between runs on a shared
    machine, more than the 10% target, so a sidecar run is never judged
    against one native run minutes earlier: a paired run (``--wall
    paired``) against the native session that took turns with it, turn by
    turn through the same moments; a sequential one against the mean of the
    native runs right before and after it.
    """
    out: dict[str, list[float]] = {}
    for i, run in enumerate(runs):
        if run.engine is None or not run.ok or run.wall_per_turn is None:
            continue
        around = []
        if run.pair is not None:
            around = [r.wall_per_turn for r in runs if r.engine is None and r.pair == run.pair and r.ok and r.wall_per_turn]
        else:
            for rng in (range(i - 1, -1, -1), range(i + 1, len(runs))):
                for j in rng:
                    if runs[j].engine is None and runs[j].ok and runs[j].wall_per_turn:
                        around.append(runs[j].wall_per_turn)
                        break
        if around:
            out.setdefault(run.label, []).append(run.wall_per_turn / statistics.fmean(around))
    return out


def cpu_per_turn(runs: Sequence[RunResult]) -> dict[str, tuple[float | None, float | None]]:
    """Per row (all native runs are one row, keyed ``native``): the mean over
    its runs of (sidecar CPU, codex CPU) in seconds a turn: what the sidecar
    itself costs the machine, and how much codex's own CPU for the same
    session moves from run to run (as much as the wall does: the noise)."""
    groups: dict[str, list[RunResult]] = {}
    for run in runs:
        if run.ok:
            groups.setdefault("native" if run.engine is None else run.label, []).append(run)
    out: dict[str, tuple[float | None, float | None]] = {}
    for key, group in groups.items():
        side = [v for v in (r.sidecar_cpu_per_turn for r in group) if v is not None]
        codex = [v for v in (r.codex_cpu_per_turn for r in group) if v is not None]
        out[key] = (statistics.fmean(side) if side else None, statistics.fmean(codex) if codex else None)
    return out


def budget_bound(framing: int) -> int:
    return int((BUDGET_TOKENS + framing) * (1 + TARGET_BUDGET_SLACK))


def _num(v: float | int | None, fmt: str = "{:,}") -> str:
    return "-" if v is None else fmt.format(v)


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}x"


def table_rows(
    runs: Sequence[RunResult],
    native: RunResult,
    framing: int,
    walls: dict[str, list[float]] | None = None,
    cpu: dict[str, tuple[float | None, float | None]] | None = None,
) -> tuple[list[list[str]], list[str]]:
    """The table's rows, and footnotes for the reasons too long for a cell
    (rows with the same reason share one)."""
    rows: list[list[str]] = []
    reasons: dict[str, list[str]] = {}

    def footnote(reason: str, label: str) -> str:
        reasons.setdefault(reason, []).append(label)
        return f"[{list(reasons).index(reason) + 1}]"

    for run in runs:
        name = run.label if run.engine is None else run.engine
        mode = "-" if run.mode is None else run.mode
        if not run.available:
            reason = run.note or "mode not available"
            head, _, detail = reason.partition(": ")
            cell = f"{head} {footnote(detail, run.label)}" if detail else head
            rows.append([name, mode] + ["-"] * 12 + [cell])
            continue
        if not run.ok:
            rows.append([name, mode] + ["-"] * 12 + [f"ERROR {footnote(str(run.error), run.label)}"])
            continue
        row_walls = (walls or {}).get(run.label)
        checks = checks_for(run, native, framing, row_walls)
        target = ", ".join(c.target for c in checks) or "-"
        result = ", ".join(f"{c.name} {'PASS' if c.passed else 'FAIL'} ({c.detail})" for c in checks) or "-"
        if run.error:
            result = f"{result}; ERROR: {run.error}"
        if run.note:
            result = f"{result}; {run.note}" if result != "-" else run.note
        wall = run.wall_per_turn
        side_cpu, codex_cpu = (cpu or {}).get("native" if run.engine is None else run.label, (None, None))
        rows.append(
            [
                name,
                mode,
                str(len(run.requests)),
                _num(run.total),
                _ratio(run.total, native.total),
                _num(run.largest),
                _ratio(run.largest, native.largest),
                _num(run.reuse, "{:.2f}"),
                "n/a" if run.engine is not None and run.rebuilds is None else _num(run.rebuilds) if run.engine is not None else "-",
                _num(None if wall is None else wall * 1000, "{:,.0f}"),
                _num(wall_ratio(run, native, row_walls), "{:.2f}x") if run.engine is not None else _ratio(wall, native.wall_per_turn),
                "-" if run.engine is None else _num(None if side_cpu is None else side_cpu * 1000, "{:.1f}"),
                _num(None if codex_cpu is None else codex_cpu * 1000, "{:.1f}"),
                target,
                result,
            ]
        )
    notes = [f"[{i}] {', '.join(labels)}: {reason}" for i, (reason, labels) in enumerate(reasons.items(), 1)]
    return rows, notes


HEADER = ["engine", "mode", "reqs", "input tok", "total", "max req tok", "max", "reuse", "rebuilds", "ms/turn", "wall", "sidecar cpu", "codex cpu", "target", "result"]


def format_table(rows: Sequence[Sequence[str]], legend: Sequence[str]) -> str:
    right = {2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
    widths = [max(len(r[i]) for r in [HEADER, *rows]) for i in range(len(HEADER))]

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    lines = [fmt(HEADER), "  ".join("-" * w for w in widths), *[fmt(r) for r in rows]]
    return "\n".join([*lines, "", *legend])


def legend_lines(turns: int, native: RunResult, framing: int | None, recall_allowance: int | None, wall: str = "paired") -> list[str]:
    tok = tokenizer_name()
    tok_desc = "o200k_base via bpe-openai, offline" if tok == "o200k_base" else "chars/4 (bpe-openai unavailable)"
    out = [
        f"{turns} scripted turns; model input = model-visible text of each request's `input` items, counted with {tok_desc}, same counter for every row.",
        "total / max / wall: ratio to the native run (codex without the sidecar); reuse: share of requests whose input extends the previous request's input unchanged (item ids ignored).",
        "ms/turn: mean of turn/start -> turn/completed; wall: a sidecar row's ms/turn over its native control's, averaged over the repeats; "
        + (
            f"each sidecar run had a native session open beside it, the two taking turns in blocks of {PAIR_BLOCK[0]} (--wall paired)."
            if wall == "paired"
            else "a sidecar run's control is the mean of the native runs right before and after it (--wall sequential)."
            if wall == "sequential"
            else "no controls: the first native run (--no-control)."
        ),
        "sidecar cpu / codex cpu: CPU ms a turn (user + system, from /proc, 10 ms ticks summed over the turns), mean over the row's runs: "
        "the sidecar process itself, and everything it started (codex, its launcher and its tools; the whole tree for native).",
    ]
    if framing is not None:
        out.append(
            f"Codex framing (native first request minus the prompt): {framing:,} tokens; budget bound = "
            f"({BUDGET_TOKENS:,} + framing) x 1.05 = {budget_bound(framing):,} tokens; native max request {native.largest:,}."
        )
    if recall_allowance is not None:
        out.append(f"recall snippets: {recall_allowance:,} tokens (each turn's snippet once per model request of that turn).")
    out.append(
        "rebuilds: sidecar/status lifecycle `rebuilds` (n/a: not reported). Codex runs with its defaults (mock model: "
        f"{native.context_window or '?'}-token window, its own auto-compaction); the fake model reports o200k input "
        "tokens as usage, and a native compaction's request counts as model input (the row says so)."
    )
    return out


# ======================================================================
# main


def _names(value: str, allowed: Sequence[str], what: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    bad = [n for n in names if n not in allowed]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(bad)}; expected some of {', '.join(allowed)}")
    return names



def work_root(stack: contextlib.ExitStack, keep: str | None, prefix: str, error: Any) -> Path:
    """The run's folder: ``--keep DIR`` (made if missing, refused unless
    empty) or a temporary one removed with ``stack``."""
    if not keep:
        return Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix)))
    root = Path(keep).resolve()
    root.mkdir(parents=True, exist_ok=True)
    if any(root.iterdir()):
        error(f"--keep {root}: folder must be empty")
    return root

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench_context", description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=DEFAULT_TURNS, help="scripted turns per session (default %(default)s)")
    ap.add_argument("--engines", default=",".join(ENGINES), help="comma-separated, from: %(default)s")
    ap.add_argument(
        "--modes",
        default=",".join(MODES),
        help=f"comma-separated projection modes, passed as {MODE_ENV} (default %(default)s); "
        f"MODE+STRATEGY (e.g. delta+fresh) also passes STRATEGY as {REBUILD_ENV}; "
        "any name is tried, and one the sidecar does not run is reported as not available",
    )
    ap.add_argument("--json", metavar="FILE", help="also write every figure (per request) to FILE")
    ap.add_argument(
        "--no-control",
        action="store_true",
        help=f"skip the native runs ({CONTROL_LABEL!r}) after each sidecar run; wall ratios then compare with the first native run only",
    )
    ap.add_argument(
        "--sidecar-setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a sidecar setting for every sidecar run (as CODEX_SIDECAR_<NAME>), e.g. busy_poll_us=0 or stale_slack=0.1; repeatable",
    )
    ap.add_argument(
        "--user-home",
        action="store_true",
        help="run codex with your HOME (your login shell, which codex snapshots at every session start and "
        "so after every rebuild); default: an empty HOME, the same on every machine",
    )
    ap.add_argument(
        "--wall",
        choices=["paired", "sequential"],
        default="paired",
        help="paired (default): each sidecar run has a native session open beside it, and the two take turns, "
        "turn by turn, so both meet the same moments of a noisy machine; sequential: a native run after each "
        "sidecar run, and the sidecar run is judged against the native runs before and after it",
    )
    ap.add_argument(
        "--pair-block",
        type=int,
        default=PAIR_BLOCK[0],
        metavar="N",
        help="--wall paired: turns a session runs back to back before the other takes over (default %(default)s; "
        "1 = turn by turn, where a sidecar's finalisation never lies between two of its own turns)",
    )
    ap.add_argument("--repeat", type=int, default=1, help="runs per sidecar row, for the wall ratio (default %(default)s); tokens come from the first")
    ap.add_argument(
        "--model-latency-ms",
        type=float,
        default=0.0,
        help="the fake model waits this long before each response, as a real model does (default 0: "
        "answers at once, where the sidecar's and a rebuild's costs show most; the targets are read at 0)",
    )
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED, help="script seed (default %(default)s)")
    ap.add_argument("--codex-bin", help="the real codex (default: $CODEX_SIDECAR_TEST_CODEX_BIN or .tools/)")
    ap.add_argument("--keep", metavar="DIR", help="run in DIR and keep every CODEX_HOME, mirror and stderr log")
    ap.add_argument("--sidecar-log-level", default="warning", choices=["debug", "info", "warning", "error"], help="the sidecar's log level (stderr, kept with --keep; default %(default)s)")
    args = ap.parse_args(argv)
    try:
        engines = _names(args.engines, list(ENGINES), "engine")
        modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    except argparse.ArgumentTypeError as exc:
        ap.error(str(exc))
    if args.turns < 1:
        ap.error("--turns must be at least 1")
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    if args.pair_block < 1:
        ap.error("--pair-block must be at least 1")
    PAIR_BLOCK[0] = args.pair_block
    if args.model_latency_ms < 0:
        ap.error("--model-latency-ms must be >= 0")
    MODEL_LATENCY[0] = args.model_latency_ms / 1000
    SIDECAR_LOG_LEVEL[0] = args.sidecar_log_level
    for item in args.sidecar_setting:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            ap.error(f"--sidecar-setting {item!r}: expected NAME=VALUE")
        SIDECAR_SETTINGS[name.strip()] = value
    codex_bin = args.codex_bin or find_codex_bin()
    if not codex_bin:
        print("real codex not found: run `make setup` or pass --codex-bin", file=sys.stderr)
        return 2

    script = build_script(args.turns, args.seed)
    progress(
        f"{args.turns} turns, {sum(t.requests for t in script)} scripted model requests, "
        f"{sum(len(t.reply) for t in script) / 1024:.0f} KB of replies, {sum(1 for t in script if t.command)} tool calls; "
        f"tokenizer {tokenizer_name()}"
    )
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        root = work_root(stack, args.keep, "bench-context-", ap.error)
        paths = prepare(root, user_home=args.user_home)
        paired = args.wall == "paired" and not args.no_control
        plan: list[list[tuple[str, str | None, str | None]]] = [[("native", None, None)]]
        for _ in range(args.repeat):
            for e in engines:
                for m in modes:
                    if paired:
                        plan.append([(f"{e}+{m}", e, m), (CONTROL_LABEL, None, None)])
                    else:
                        plan.append([(f"{e}+{m}", e, m)])
                        if not args.no_control:
                            plan.append([(CONTROL_LABEL, None, None)])
        runs: list[RunResult] = []
        for number, specs in enumerate(plan):
            together = run_together(specs, script, paths, len(runs), codex_bin)
            if len(together) > 1:
                for r in together:
                    r.pair = number
            runs += together
    elapsed = time.monotonic() - started
    progress(f"done in {elapsed:.1f} s")

    native = runs[0]
    if not native.ok:
        print(f"native run failed: {native.error or native.note}", file=sys.stderr)
        return 1
    if native.framing is None:
        print("cannot measure Codex's framing: the first native request does not end with the first prompt", file=sys.stderr)
        return 1
    framing = native.framing
    recall_runs = [r for r in runs if r.engine == "recall" and r.ok]
    allowance = recall_runs[0].snippet_allowance() if recall_runs else None
    walls = bracketed_walls(runs)
    shown: list[RunResult] = [native]
    for r in runs[1:]:
        if r.engine is not None and r.label not in {x.label for x in shown}:
            shown.append(r)  # tokens are deterministic: the first run of each row shows them
    natives = [r.wall_per_turn * 1000 for r in runs if r.engine is None and r.ok and r.wall_per_turn]
    legend = legend_lines(args.turns, native, framing, allowance, "none" if args.no_control else args.wall)
    if MODEL_LATENCY[0]:
        legend.append(f"the fake model waited {args.model_latency_ms:g} ms before each response (--model-latency-ms).")
    legend.append(
        f"native runs: {len(natives)}, {min(natives):,.0f}-{max(natives):,.0f} ms/turn (the run-to-run noise the wall ratios are read against); "
        f"{args.repeat} run(s) per sidecar row."
    )
    cpu = cpu_per_turn(runs)
    native_cpu = [r.codex_cpu_per_turn * 1000 for r in runs if r.engine is None and r.ok and r.codex_cpu_per_turn is not None]
    if native_cpu:
        legend.append(f"codex cpu in the native runs: {min(native_cpu):.1f}-{max(native_cpu):.1f} ms/turn (the same session, run after run).")
    rows, notes = table_rows(shown, native, framing, walls, cpu)
    print(format_table(rows, [*legend, *notes]), flush=True)
    if args.json:
        report = {
            "turns": args.turns,
            "seed": args.seed,
            "tokenizer": tokenizer_name(),
            "framingTokens": framing,
            "budgetTokens": BUDGET_TOKENS,
            "budgetBoundTokens": budget_bound(framing),
            "runs": [r.as_dict() for r in runs],
            "checks": {r.label: [dataclasses.asdict(c) for c in checks_for(r, native, framing, walls.get(r.label))] for r in shown},
            "wallRatios": walls,
            "cpuMsPerTurn": {k: {"sidecar": None if a is None else a * 1000, "codex": None if b is None else b * 1000} for k, (a, b) in cpu.items()},
            "repeat": args.repeat,
            "wall": "none" if args.no_control else args.wall,
            "modelLatencyMs": args.model_latency_ms,
            "table": {"header": HEADER, "rows": rows, "notes": notes},
            "seconds": elapsed,
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        }
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
