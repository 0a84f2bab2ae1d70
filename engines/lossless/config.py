"""The ``[engines.lossless]`` table: keys, defaults and checks."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

import msgspec

__all__ = ["DEFAULT_IGNORE_SESSION_PATTERNS", "DEFAULT_SYSTEM_PROMPT_ADDITION", "Knobs", "LosslessConfig", "knobs", "parse_config"]

DEFAULT_SYSTEM_PROMPT_ADDITION = (
    "Older parts of this conversation are condensed into summaries marked [summary sum_... ]; "
    "every original message is kept. When a detail matters, look it up: lcm_grep searches "
    "everything said so far, lcm_describe shows what a summary covers, lcm_expand returns the "
    "original messages under a summary (or a large output kept out of line), lcm_expand_query "
    "answers a question from the original messages without filling this context."
)


DEFAULT_IGNORE_SESSION_PATTERNS = ("cron:*", "agent:*:cron:*")


class LosslessConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Every key is optional; see ``docs/engines/lossless.md`` for what each does."""

    #: The assembly's ceiling in tokens (the smaller of this and the sidecar's budget applies).
    token_budget: int = 32_000
    #: The newest messages kept verbatim by a compaction step, in tokens
    #: (unset: 8% of the budget) ...
    fresh_tail_tokens: int | None = None
    #: ... and at least this many messages, whatever their size (unset: one
    #: per 4,000 tokens of budget, 2 to 4: at 8,000 four messages, the last
    #: two turns, held a quarter of the room and cost a turn a frame).
    fresh_tail_messages: int | None = None
    #: A leaf summary covers raw messages of about this many tokens (unset:
    #: a quarter of the budget, 256 to 8,000).
    leaf_chunk_tokens: int | None = None
    #: Target length of a leaf summary (unset: budget / 80, 48 to 400).
    leaf_summary_tokens: int | None = None
    #: A condensed summary is made over this many same-depth summaries, once a
    #: depth holds more than this many that are not yet condensed.
    condense_fanout: int = 4
    #: Target length of a condensed summary (unset: budget x 3 / 160, 64 to 600).
    condensed_summary_tokens: int | None = None
    #: Summaries are written when the assembly exceeds this share of the budget ...
    compact_threshold: float = 0.8
    #: ... and a new frame brings it back to about this share (fresh tail plus
    #: the summaries shown). Low on purpose: every request re-reads the
    #: assembly (cached, at about a tenth of the price), and a new frame's first
    #: request reads it uncached, so a small frame is cheap both ways.
    compact_target: float = 0.12
    #: While the provider's prompt cache is warm (a request within
    #: ``cache_ttl`` seconds), a new frame (which costs one uncached request)
    #: waits until it pays for itself: the cached re-reads of what the
    #: assembly holds above ``compact_target`` since the last frame cost as
    #: much as that uncached request (framing included, see
    #: ``framing_tokens``). At the latest it comes when the assembly passes
    #: this share of the budget, or one turn as large as the largest recent
    #: one would pass the budget ...
    warm_compact_threshold: float = 0.9
    #: ... the cache's lifetime in seconds (0: no waiting, frames are
    #: installed as soon as their summaries exist) ...
    cache_ttl: float = 300.0
    #: ... and the tokens the client adds around the assembly in every request
    #: (instructions, tool specs: about 7,800 for Codex 0.169.0), which a new
    #: frame's first request also reads uncached.
    framing_tokens: int = 8_000
    #: Tokens the engine's tools' specs add to every request, taken out of
    #: the assembly's budget so that the whole request stays within
    #: ``token_budget`` plus the client's framing; unset: counted from the
    #: specs (about 780 tokens); 0: not taken out.
    own_framing_tokens: int | None = None
    #: false: no frame for cost alone; a warm frame waits until the budget
    #: forces it (the assembly then fills toward ``warm_compact_threshold``
    #: of the budget, so the model reads more raw history at a higher price).
    frames_when_paid: bool = True
    #: The model of the engine's own calls (summaries, ``lcm_expand_query``),
    #: as Codex names it (``model`` of the call's hidden thread); unset: the
    #: client's model. A small model of the same provider costs a fraction.
    summary_model: str | None = None
    #: The reasoning effort of those calls (``effort`` of the call's turn,
    #: e.g. ``minimal``, ``low``, ``medium``, ``high``); "" leaves the model's
    #: default. Low by default: a summary needs little reasoning, and a
    #: reasoning model at its default effort may not answer within ``summary_timeout``.
    summary_effort: str = "low"
    #: The most model calls the engine makes in any hour, all sessions
    #: together (summaries, retries, ``lcm_expand_query``; a batched call
    #: counts once); past it summaries are extractive (retried by the model
    #: later) and ``lcm_expand_query`` says to use the other tools. 0: no cap.
    summary_max_calls_per_hour: int = 120
    #: Seconds one summary call to the host may take before the extractive
    #: stand-in is used (a batched call: this times its summaries, within
    #: ``step_deadline``). Measured with a slow fake model: the hidden
    #: Codex thread adds about 0.2 s to the model's own time
    #: (``tests/live/test_lossless_summary_model.py``).
    summary_timeout: float = 15.0
    #: Seconds one maintenance or compaction call may spend on summary calls in
    #: all; past it the remaining summaries are extractive. Keep it below the
    #: sidecar's engine deadline (20 s by default), which bounds every engine
    #: call and every host model call.
    step_deadline: float = 18.0
    #: Summaries asked for in one host call (one prompt, numbered sections;
    #: a section the answer does not give is asked for on its own). 1: one
    #: call per summary.
    summary_batch_size: int = 8
    #: Extractive (fallback) summaries retried through the host per maintenance call.
    retries_per_maintain: int = 2
    #: ``lcm_expand``'s cap when the call gives none, and the largest cap it accepts.
    expand_default_tokens: int = 4_000
    expand_max_tokens: int = 16_000
    #: ``lcm_grep``'s hit count when the call gives none, and the most it returns.
    grep_default_limit: int = 10
    grep_max_limit: int = 50
    #: ``lcm_expand_query``: the answer's cap when the call gives none, and the
    #: largest cap it accepts (the tool's whole result stays within it) ...
    expand_query_default_tokens: int = 1_000
    expand_query_max_tokens: int = 4_000
    #: ... the most source text it hands the model in one call, in tokens ...
    expand_query_input_tokens: int = 16_000
    #: ... and the seconds that call may take (keep it below the sidecar's
    #: engine deadline, which bounds the whole tool call).
    expand_query_timeout: float = 15.0
    #: A tool result or user message over this many tokens is kept out of line:
    #: stored whole, shown in the assembly as a reference and a short summary.
    large_output_tokens: int = 25_000
    #: Length of that short (extractive) summary, in tokens.
    large_output_summary_tokens: int = 400
    #: Where the store lives when the host gives no state folder (unbound engine).
    state_dir: str | None = None
    #: The store in a PostgreSQL database (``postgresql://user:password@host/db``)
    #: instead of the SQLite file in the state folder; needs the ``[postgres]`` extra.
    database_url: str | None = None
    #: A size bound for the store in MiB (0: none). Past it, maintenance drops the
    #: raw text of the oldest messages already condensed (depth >= 1); see the docs.
    max_store_mb: float = 0
    #: Retention (``codex-sidecar engines lossless prune``, and maintenance
    #: once an hour when set): a session with no activity for this many days
    #: is deleted from the store (0: kept for ever) ...
    retention_days: float = 0
    #: ... and a session keeps the raw text of at most its newest this many
    #: messages (0: all); older ones' text goes once condensed summaries
    #: hold what they said (the ``max_store_mb`` rule). See the docs.
    session_max_messages: int = 0
    #: Credentials (the recordings' rules: API keys, tokens, private keys,
    #: ``password: ...``) are replaced by ``[redacted credential]`` before a
    #: message is stored, so no summary, search or summary-model request holds
    #: them; false stores messages as they are. The client's transcript stays whole.
    redact_secrets: bool = True
    #: Sent to the model as the system prompt addition once the assembly holds
    #: a summary; "" sends none.
    system_prompt_addition: str = DEFAULT_SYSTEM_PROMPT_ADDITION
    #: OpenClaw's heartbeat turns (``turn/start`` with ``turnTrigger:
    #: "heartbeat"``, ``is_heartbeat`` for the engine) are neither stored nor
    #: summarised: their messages are left out of the store and so of later
    #: assemblies (the client's transcript keeps them). false: stored like any turn.
    skip_heartbeats: bool = True
    #: OpenClaw's cron turns (``turnTrigger: "cron"``, ``turn_trigger`` for
    #: the engine) likewise: neither stored nor summarised, counted as skipped
    #: (reason ``cron``). false: stored like any turn.
    skip_cron_turns: bool = True
    #: Sessions whose key matches one of these shell-style patterns
    #: (``fnmatch``, case-sensitive) are neither stored nor summarised: the
    #: assembly is the client's own history. The defaults are OpenClaw's cron
    #: session keys (they reach the engine when the sidecar's
    #: ``session_key`` setting gives OpenClaw's keys).
    ignore_session_patterns: tuple[str, ...] = DEFAULT_IGNORE_SESSION_PATTERNS
    #: OpenClaw's ``/new`` and ``/reset`` begin a new session; this many of the
    #: previous session's newest summaries (those its frame shows) begin the new
    #: session's frame, until its own first compaction (0: none, a clean start).
    reset_keep_summaries: int = 0

    def __post_init__(self) -> None:
        for name in ("fresh_tail_tokens", "leaf_chunk_tokens", "leaf_summary_tokens", "condensed_summary_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        positive = (
            "token_budget",
            "expand_default_tokens",
            "expand_max_tokens",
            "grep_default_limit",
            "grep_max_limit",
            "expand_query_default_tokens",
            "expand_query_max_tokens",
            "expand_query_input_tokens",
            "large_output_tokens",
            "large_output_summary_tokens",
            "summary_batch_size",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.own_framing_tokens is not None and self.own_framing_tokens < 0:
            raise ValueError(f"own_framing_tokens must not be negative, got {self.own_framing_tokens}")
        if self.fresh_tail_messages is not None and self.fresh_tail_messages < 0:
            raise ValueError(f"fresh_tail_messages must not be negative, got {self.fresh_tail_messages}")
        for name in ("retries_per_maintain", "framing_tokens", "summary_max_calls_per_hour", "reset_keep_summaries"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")
        if self.condense_fanout < 2:
            raise ValueError(f"condense_fanout must be at least 2, got {self.condense_fanout}")
        if not 0 < self.compact_target < self.compact_threshold <= 1:
            raise ValueError(
                "expected 0 < compact_target < compact_threshold <= 1, got "
                f"compact_target={self.compact_target}, compact_threshold={self.compact_threshold}"
            )
        if not self.compact_threshold <= self.warm_compact_threshold <= 1:
            raise ValueError(
                "expected compact_threshold <= warm_compact_threshold <= 1, got "
                f"warm_compact_threshold={self.warm_compact_threshold}"
            )
        if not self.cache_ttl >= 0:
            raise ValueError(f"cache_ttl must be a number of seconds >= 0, got {self.cache_ttl}")
        for name in ("summary_timeout", "step_deadline", "expand_query_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {getattr(self, name)}")
        if self.summary_model is not None and not self.summary_model.strip():
            raise ValueError("summary_model must name a model (leave it out for the client's model)")
        if self.summary_effort != self.summary_effort.strip() or any(c.isspace() for c in self.summary_effort):
            raise ValueError(f"summary_effort must be one word (low, medium, ...) or \"\", got {self.summary_effort!r}")
        if any(not p for p in self.ignore_session_patterns):
            raise ValueError("ignore_session_patterns must not hold an empty pattern")
        if self.database_url is not None and not self.database_url.startswith(("postgresql://", "postgres://")):
            raise ValueError("database_url must be a PostgreSQL URL (postgresql://...)")
        if not self.retention_days >= 0:
            raise ValueError(f"retention_days must be a number of days >= 0, got {self.retention_days}")
        if self.session_max_messages < 0:
            raise ValueError(f"session_max_messages must not be negative, got {self.session_max_messages}")
        if self.max_store_mb < 0:
            raise ValueError(f"max_store_mb must not be negative, got {self.max_store_mb}")
        if self.expand_default_tokens > self.expand_max_tokens:
            raise ValueError("expand_default_tokens must not exceed expand_max_tokens")
        if self.grep_default_limit > self.grep_max_limit:
            raise ValueError("grep_default_limit must not exceed grep_max_limit")
        if self.expand_query_default_tokens > self.expand_query_max_tokens:
            raise ValueError("expand_query_default_tokens must not exceed expand_query_max_tokens")
        if self.large_output_summary_tokens >= self.large_output_tokens:
            raise ValueError("large_output_summary_tokens must be below large_output_tokens")


class Knobs(msgspec.Struct, frozen=True, kw_only=True):
    """The sizes a compaction step works with, for one budget: the settings
    where set, else derived from the budget (see :func:`knobs`)."""

    fresh_tail_tokens: int
    fresh_tail_messages: int
    leaf_chunk_tokens: int
    leaf_summary_tokens: int
    condensed_summary_tokens: int


def _clamp(value: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, value))


def knobs(cfg: LosslessConfig, budget: int) -> Knobs:
    """The compaction sizes for ``budget``: what the config sets, else a
    share of the budget (at the default 32,000-token budget the derived
    values are 2,560 tokens and 4 messages / 8,000 / 400 / 600; at 6,000 they
    are 480 and 2 / 1,500 / 75 / 112)."""
    budget = max(1, budget)
    return Knobs(
        fresh_tail_tokens=cfg.fresh_tail_tokens if cfg.fresh_tail_tokens is not None else max(1, budget * 2 // 25),
        fresh_tail_messages=cfg.fresh_tail_messages if cfg.fresh_tail_messages is not None else _clamp(budget // 4_000, 2, 4),
        leaf_chunk_tokens=cfg.leaf_chunk_tokens if cfg.leaf_chunk_tokens is not None else _clamp(budget // 4, 256, 8_000),
        leaf_summary_tokens=cfg.leaf_summary_tokens if cfg.leaf_summary_tokens is not None else _clamp(budget // 80, 48, 400),
        condensed_summary_tokens=(
            cfg.condensed_summary_tokens if cfg.condensed_summary_tokens is not None else _clamp(budget * 3 // 160, 64, 600)
        ),
    )


def parse_config(config: Mapping[str, Any] | None) -> LosslessConfig:
    """Build the config from the engine's table; a clear ``ValueError`` on an
    unknown key, a wrong type or an out-of-range value."""
    table = dict(config or {})
    keys = LosslessConfig.__struct_fields__
    unknown = sorted(k for k in table if k not in keys)
    if unknown:
        raise ValueError(f"invalid [engines.lossless] config: {_unknown_key(unknown[0], keys)}")
    try:
        return msgspec.convert(table, LosslessConfig)
    except msgspec.ValidationError as exc:
        raise ValueError(f"invalid [engines.lossless] config: {_readable(str(exc))}") from None


def _unknown_key(key: str, keys: Collection[str]) -> str:
    """``unknown key 'retention_day' (did you mean 'retention_days'?); valid
    keys: ...``: a typo in the table names the key it meant, as a typo in
    the sidecar's own settings does."""
    import difflib

    close = difflib.get_close_matches(key.replace("-", "_").lower(), sorted(keys), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown key {key!r}{hint}; valid keys: {', '.join(sorted(keys))}"


def _readable(message: str) -> str:
    """msgspec's ``Expected `int`, got `str` - at `$.token_budget``` as
    ``token_budget: expected `int`, got `str```: the key first."""
    m = re.fullmatch(r"(.*) - at `\$\.([A-Za-z0-9_]+)`", message)
    return f"{m[2]}: {m[1][:1].lower()}{m[1][1:]}" if m else message
