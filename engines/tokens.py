"""Token counting for engines: the real ``o200k_base`` tokenizer, offline.

The counter
-----------
**o200k_base** (the tokenizer of the GPT-4o / GPT-5 / Codex model family),
from the PyPI package ``bpe-openai``, a runtime dependency, which ships the
vocabulary inside its wheel and so works with no network (``tiktoken``
downloads its vocabulary on first use and fails offline).  When it cannot be
loaded, counting raises :class:`TokenizerUnavailable` with the reason and the
fix: an engine that budgets a model's context with a silent chars/4 guess
(off by -41% to +22% against real o200k counts, worst on CJK text and JSON)
would overrun or waste the budget without anyone knowing.  :func:`approx_tokens`
keeps the chars/4 rule of thumb for callers that explicitly want an estimate.

:func:`tokenizer_name` reports the counter (``"o200k_base"``; it raises like
counting when there is none), so a caller can log it once.  The tokenizer is
loaded lazily on first use (about 0.05 s on a 2-core VM: the Rust tokenizer
alone, not the package's tiktoken-compatible tables, which took 0.6 s), once
per process, under a lock; :func:`preload` starts that load in a background
thread, so an engine can have it ready before its first ``assemble`` instead
of holding the first turn for it.

Apart from a missing tokenizer, counting never raises.  ``bpe-openai`` refuses
a single text of 1,000,000
characters or more and more than 200,000 tokens per call, so long texts are
counted in chunks cut just before a space or newline; because the tokenizer
splits text into words that start with their leading space, such cuts change
the count by nothing or by a token at most per chunk.  Special-token text such
as ``<|endoftext|>`` is counted as ordinary text (never as a special token),
which is what a model sees when such text is in a message.

Message estimates
-----------------
:func:`estimate_message_tokens` counts what a message puts in front of a model
in OpenClaw's own harness: text, thinking, tool-call names and arguments (as
compact key-sorted JSON), tool-result content, compaction summaries, a fixed
:data:`IMAGE_TOKENS` per image (OpenClaw's estimate for an image block), plus
:data:`MESSAGE_OVERHEAD_TOKENS` for the role framing.  Timestamps, usage and
other metadata are not model input and are not counted.  The estimate is
deliberately not tied to the sidecar's text projection (which, for example,
shows tool results as one-line placeholders): it is conservative for that
projection and correct for an engine that hands the messages to a harness
that replays them in full.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import math
import os
import sys
import threading
from typing import Any, Literal

from .api import (
    AssistantMessage,
    CompactionSummaryMessage,
    ImageBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
)

__all__ = [
    "CHARS_PER_TOKEN",
    "IMAGE_TOKENS",
    "MESSAGE_OVERHEAD_TOKENS",
    "TokenizerName",
    "TokenizerUnavailable",
    "approx_tokens",
    "count_tokens",
    "estimate_message_tokens",
    "estimate_messages_tokens",
    "load_tokenizer",
    "preload",
    "tokenizer_name",
]

TokenizerName = Literal["o200k_base"]


class TokenizerUnavailable(RuntimeError):
    """The o200k tokenizer (package ``bpe-openai``) cannot be loaded."""


#: Characters per token of the :func:`approx_tokens` estimate.
CHARS_PER_TOKEN = 4

#: Tokens charged per image block (OpenClaw estimates an image as 4,800 chars).
IMAGE_TOKENS = 1200

#: Tokens charged per message for its role framing (chat formats add 3-4).
MESSAGE_OVERHEAD_TOKENS = 4

# bpe-openai limits: < 1,000,000 chars and <= 200,000 tokens per call.  A
# character is at most 4 UTF-8 bytes and byte-level BPE yields at most one
# token per byte, so 40,000 chars can never exceed 160,000 tokens.
_CHUNK_CHARS = 40_000
# How far back from a chunk's end to look for a space to cut before.
_CUT_SEARCH_CHARS = 2_000

_lock = threading.Lock()
_loaded = False
_encoding: Any = None
_load_error: str | None = None


_BACKEND_MODULE = "bpe_openai._bindings"


class _RustO200k:
    """``encode_ordinary`` of bpe-openai's ``Encoding``, on its Rust tokenizer alone.

    Importing ``bpe_openai`` builds its tiktoken-compatible tables: it decodes
    three vocabularies (cl100k, o200k, voyage3) in Python, ~0.55 s of CPU and
    ~75 MB that counting never uses (measured on the 2-CPU benchmark
    machine). Its ``encode_ordinary`` is the Rust tokenizer's ``encode`` on
    the text with lone surrogates replaced; this class does the same without
    building those tables. ``tests/test_budget_engine.py`` checks that both
    give the same tokens.
    """

    def __init__(self, backend: Any) -> None:
        self._backend = backend

    def encode_ordinary(self, text: str) -> list[int]:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: as bpe-openai sanitises them
            text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        if len(text) >= 1_000_000:
            raise ValueError("Input too long to encode safely")
        return list(self._backend.encode(text))


def _rust_backend() -> Any:
    """bpe-openai's compiled module, loaded without its package's ``__init__``
    (registered under its own name, so a later ``import bpe_openai`` uses
    this copy); None when it is not where the installed package keeps it."""
    loaded = sys.modules.get(_BACKEND_MODULE)
    if loaded is not None:
        return loaded
    package = importlib.util.find_spec("bpe_openai")  # a top-level spec: the package does not run
    if package is None or not package.submodule_search_locations:
        return None
    for folder in package.submodule_search_locations:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(folder, "_bindings" + suffix)
            if os.path.isfile(path):
                spec = importlib.util.spec_from_file_location(_BACKEND_MODULE, path)
                if spec is None or spec.loader is None:
                    return None
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                sys.modules[_BACKEND_MODULE] = module
                return module
    return None


def _load_encoding() -> Any:
    """The fast path when bpe-openai's layout is the one known, else its public API."""
    try:
        backend = _rust_backend()
        if backend is not None:
            encoding = _RustO200k(backend.tokenizer_for_encoding("o200k_base"))
            encoding.encode_ordinary("probe")
            return encoding
    except Exception:  # another layout or build: the public API decides
        pass
    import bpe_openai

    return bpe_openai.get_encoding("o200k_base")


def _get_encoding() -> Any:
    """The o200k encoding; raises :class:`TokenizerUnavailable` when
    ``bpe_openai`` is unusable (the reason is kept, so every later call
    raises the same clear error without retrying the import)."""
    global _loaded, _encoding, _load_error
    if not _loaded:
        with _lock:
            if not _loaded:
                try:
                    encoding = _load_encoding()
                    encoding.encode_ordinary("probe")  # fail here, not mid-count
                except Exception as exc:  # ImportError, missing backend, bad wheel, ...
                    encoding = None
                    _load_error = f"{type(exc).__name__}: {exc}"
                _encoding = encoding
                _loaded = True
    if _encoding is None:
        raise TokenizerUnavailable(
            "the o200k_base tokenizer is unavailable, so tokens cannot be counted exactly "
            f"({_load_error}); install the runtime dependency with `pip install 'bpe-openai>=0.1.4'`"
        )
    return _encoding


_preloading: threading.Thread | None = None
_preload_lock = threading.Lock()  # not _lock: a load under way must not block the caller


def _preload_quietly() -> None:
    try:
        _get_encoding()
    except TokenizerUnavailable:  # the first count reports it
        pass


def load_tokenizer() -> None:
    """Load the tokenizer now, in this thread (or wait for a load under
    way). Never raises: counting raises :class:`TokenizerUnavailable` if it
    failed."""
    _preload_quietly()


def preload() -> None:
    """Start loading the tokenizer in a daemon thread (once; a no-op when it
    is loaded or loading). Never blocks and never raises: counting loads it
    anyway, waiting for a load under way as it would have done it itself,
    and raises :class:`TokenizerUnavailable` if it failed."""
    global _preloading
    with _preload_lock:
        if _loaded or _preloading is not None:
            return
        _preloading = threading.Thread(target=_preload_quietly, name="tokenizer-preload", daemon=True)
        try:
            _preloading.start()
        except RuntimeError:  # no thread to be had: the first count loads it
            pass


def tokenizer_name() -> TokenizerName:
    """The counter :func:`count_tokens` uses (``"o200k_base"``); raises
    :class:`TokenizerUnavailable` when there is none."""
    _get_encoding()
    return "o200k_base"


def approx_tokens(text: str) -> int:
    """The chars/4 rule of thumb: ``ceil(len(text) / 4)`` (0 for empty text).
    Never used by :func:`count_tokens`; for callers that want a rough guess."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _chunks(text: str) -> list[str]:
    """Split ``text`` into pieces of at most ``_CHUNK_CHARS``, cut before whitespace."""
    pieces: list[str] = []
    start = 0
    n = len(text)
    while n - start > _CHUNK_CHARS:
        end = start + _CHUNK_CHARS
        cut = end
        floor = max(start + 1, end - _CUT_SEARCH_CHARS)
        for i in range(end, floor - 1, -1):
            if text[i].isspace():
                cut = i
                break
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces


def _count_chunk(encoding: Any, text: str) -> int:
    try:
        return len(encoding.encode_ordinary(text))
    except Exception:
        if len(text) > 1:  # split in two and retry; ends in chars/4 per char
            mid = len(text) // 2
            return _count_chunk(encoding, text[:mid]) + _count_chunk(encoding, text[mid:])
        return approx_tokens(text)


def count_tokens(text: str) -> int:
    """Number of o200k tokens in ``text``; raises :class:`TokenizerUnavailable`
    when the tokenizer cannot be loaded."""
    if not text:
        return 0
    encoding = _get_encoding()
    return sum(_count_chunk(encoding, piece) for piece in _chunks(text))


def _canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys; never raises, never depends on dict order."""

    def fallback(obj: Any) -> Any:
        if isinstance(obj, (set, frozenset)):
            return sorted(_canonical_json(v) for v in obj)
        return f"<{type(obj).__name__}>"

    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=fallback)
    except (TypeError, ValueError):  # mixed-type keys, circular data
        return f"<{type(value).__name__}>"


def _content_tokens(block: Any) -> int:
    if isinstance(block, TextBlock):
        return count_tokens(block.text)
    if isinstance(block, ImageBlock):
        return IMAGE_TOKENS
    if isinstance(block, ThinkingBlock):
        return count_tokens(block.thinking)
    if isinstance(block, ToolCallBlock):
        return count_tokens(block.name) + count_tokens(_canonical_json(block.arguments))
    if isinstance(block, str):
        return count_tokens(block)
    return 0


def estimate_message_tokens(message: Any) -> int:
    """Estimated model-input tokens of one AgentMessage (see the module notes).

    Unknown objects count as the role overhead only, so an estimate never
    raises on a message type added to the contract later.
    """
    total = MESSAGE_OVERHEAD_TOKENS
    if isinstance(message, UserMessage):
        content = message.content
        if isinstance(content, str):
            return total + count_tokens(content)
        return total + sum(_content_tokens(block) for block in content)
    if isinstance(message, AssistantMessage):
        return total + sum(_content_tokens(block) for block in message.content)
    if isinstance(message, ToolResultMessage):
        return total + count_tokens(message.tool_name) + sum(_content_tokens(b) for b in message.content)
    if isinstance(message, CompactionSummaryMessage):
        return total + count_tokens(message.summary)
    return total


def estimate_messages_tokens(messages: Any) -> int:
    """Sum of :func:`estimate_message_tokens` over ``messages``."""
    return sum(estimate_message_tokens(m) for m in messages)
