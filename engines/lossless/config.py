"""The ``[engines.lossless]`` table: keys, defaults and checks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

__all__ = ["DEFAULT_SYSTEM_PROMPT_ADDITION", "LosslessConfig", "parse_config"]

DEFAULT_SYSTEM_PROMPT_ADDITION = (
    "Older parts of this conversation are condensed into summaries marked [summary sum_... ]; "
    "every original message is kept. When a detail matters, look it up: lcm_grep searches "
    "everything said so far, lcm_describe shows what a summary covers, lcm_expand returns the "
    "original messages under a summary."
)


class LosslessConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Every key is optional; see ``docs/engines/lossless.md`` for what each does."""

    #: The assembly's ceiling in tokens (the smaller of this and the sidecar's budget applies).
    token_budget: int = 32_000
    #: The newest messages kept verbatim by a compaction step, in tokens ...
    fresh_tail_tokens: int = 8_000
    #: ... and at least this many messages, whatever their size.
    fresh_tail_messages: int = 4
    #: A leaf summary covers raw messages of about this many tokens.
    leaf_chunk_tokens: int = 4_000
    #: Target length of a leaf summary.
    leaf_summary_tokens: int = 400
    #: A condensed summary is made over this many same-depth summaries, once a
    #: depth holds more than this many that are not yet condensed.
    condense_fanout: int = 4
    #: Target length of a condensed summary.
    condensed_summary_tokens: int = 600
    #: A compaction step runs when the assembly exceeds this share of the budget ...
    compact_threshold: float = 0.8
    #: ... and leaves it at about this share (fresh tail plus the summaries shown).
    compact_target: float = 0.5
    #: Seconds one summary call to the host may take before the extractive stand-in is used.
    summary_timeout: float = 10.0
    #: Seconds one maintenance or compaction call may spend on summary calls in
    #: all; past it the remaining summaries are extractive. Keep it below the
    #: sidecar's engine deadline.
    step_deadline: float = 15.0
    #: Extractive (fallback) summaries retried through the host per maintenance call.
    retries_per_maintain: int = 2
    #: ``lcm_expand``'s cap when the call gives none, and the largest cap it accepts.
    expand_default_tokens: int = 4_000
    expand_max_tokens: int = 16_000
    #: ``lcm_grep``'s hit count when the call gives none, and the most it returns.
    grep_default_limit: int = 10
    grep_max_limit: int = 50
    #: Where the store lives when the host gives no state folder (unbound engine).
    state_dir: str | None = None
    #: The store in a PostgreSQL database (``postgresql://user:password@host/db``)
    #: instead of the SQLite file in the state folder; needs the ``[postgres]`` extra.
    database_url: str | None = None
    #: A size bound for the store in MiB (0: none). Past it, maintenance drops the
    #: raw text of the oldest messages already condensed (depth >= 1); see the docs.
    max_store_mb: float = 0
    #: Sent to the model as the system prompt addition once the assembly holds
    #: a summary; "" sends none.
    system_prompt_addition: str = DEFAULT_SYSTEM_PROMPT_ADDITION

    def __post_init__(self) -> None:
        positive = (
            "token_budget",
            "fresh_tail_tokens",
            "leaf_chunk_tokens",
            "leaf_summary_tokens",
            "condensed_summary_tokens",
            "expand_default_tokens",
            "expand_max_tokens",
            "grep_default_limit",
            "grep_max_limit",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("fresh_tail_messages", "retries_per_maintain"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")
        if self.condense_fanout < 2:
            raise ValueError(f"condense_fanout must be at least 2, got {self.condense_fanout}")
        if not 0 < self.compact_target < self.compact_threshold <= 1:
            raise ValueError(
                "expected 0 < compact_target < compact_threshold <= 1, got "
                f"compact_target={self.compact_target}, compact_threshold={self.compact_threshold}"
            )
        for name in ("summary_timeout", "step_deadline"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {getattr(self, name)}")
        if self.database_url is not None and not self.database_url.startswith(("postgresql://", "postgres://")):
            raise ValueError("database_url must be a PostgreSQL URL (postgresql://...)")
        if self.max_store_mb < 0:
            raise ValueError(f"max_store_mb must not be negative, got {self.max_store_mb}")
        if self.expand_default_tokens > self.expand_max_tokens:
            raise ValueError("expand_default_tokens must not exceed expand_max_tokens")
        if self.grep_default_limit > self.grep_max_limit:
            raise ValueError("grep_default_limit must not exceed grep_max_limit")


def parse_config(config: Mapping[str, Any] | None) -> LosslessConfig:
    """Build the config from the engine's table; a clear ``ValueError`` on an
    unknown key, a wrong type or an out-of-range value."""
    try:
        return msgspec.convert(dict(config or {}), LosslessConfig)
    except msgspec.ValidationError as exc:
        raise ValueError(f"invalid [engines.lossless] config: {exc}") from None
