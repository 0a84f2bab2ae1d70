"""Compaction steps: leaf summaries, condensed summaries, a new frame.

A step, run by ``maintain`` (when the assembly has outgrown
``compact_threshold`` of the budget, or a step was left unfinished) or by
``compact``:

1. the *fresh tail* (the newest ``fresh_tail_tokens``, at least
   ``fresh_tail_messages``, never starting between a tool call and its
   result) stays raw; the raw messages before it that no summary covers yet
   are cut into chunks of about ``leaf_chunk_tokens`` (at cuts that split no
   tool pair) and each chunk gets a leaf summary. A last, short chunk waits
   for the next step unless it is the only one (so a step always makes
   progress) or the step is forced;
2. while a depth holds more than ``condense_fanout`` summaries not yet
   condensed, its oldest ``condense_fanout`` get a condensed summary one
   depth up. Those whose sources exist when the step starts are asked for
   in the same batched call as the leaves; one that needs the step's own
   new summaries waits for the next step (:func:`one_round`), unless the
   step is forced;
3. a new frame is installed: the newest summaries that fit
   ``compact_target`` of the budget beside the raw messages after them.
   While the prompt cache is warm the engine may ask for the summaries only
   (``install=False``, see :func:`frame_due`): then only full chunks are
   summarised and the frame waits.

Each summary is written in its own transaction as soon as it exists (with the
pointer to how far leaf summaries reach), and the frame in one more, so a kill
mid-step loses at most the summary being written and the next step goes on
from there. A summary's text comes from the host when it answers within
``summary_timeout`` (and the step's ``step_deadline`` is not spent); otherwise
it is the extractive stand-in, marked ``fallback`` and retried later by
:func:`retry_fallbacks`, so a summariser that fails or hangs never stops
compaction.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import trio

from engines.api import AgentMessage, EngineHost, encode_openclaw

from .assemble import select_frame
from .config import Knobs, LosslessConfig, knobs
from .messages import valid_cuts
from .outofline import out_of_line_view
from .store import MessageRow, NewSummary, Store, SummaryRow
from .summarize import (
    BATCH_SYSTEM_PROMPT,
    SYSTEM_PROMPT,
    Source,
    batch_prompt,
    cap_summary,
    extractive_summary,
    instructed,
    model_summary,
    parse_batch,
    summary_id,
    summary_prompt,
)

log = logging.getLogger("engines.lossless.compaction")

__all__ = [
    "condense_batch",
    "condense_groups",
    "frame_due",
    "fresh_tail_start",
    "frame_pays",
    "install_frame",
    "last_turn_tokens",
    "leaf_chunks",
    "frame_room",
    "recent_turn_tokens",
    "retry_fallbacks",
    "run_step",
    "step_needed",
    "summaries_wait",
    "turn_room",
]


# --------------------------------------------------------------- pure planning


def fresh_tail_start(tokens: Sequence[int], cuts: Sequence[bool], fresh_tokens: int, min_messages: int) -> int:
    """Index where the fresh tail starts: the newest messages within
    ``fresh_tokens`` (but at least ``min_messages``), moved earlier to the
    nearest cut that splits no tool pair."""
    n = len(tokens)
    start, total = n, 0
    while start > 0:
        t = tokens[start - 1]
        if n - start >= min_messages and total + t > fresh_tokens:
            break
        total += t
        start -= 1
    while start > 0 and not cuts[start]:
        start -= 1
    return start


def leaf_chunks(tokens: Sequence[int], cuts: Sequence[bool], end: int, chunk_tokens: int) -> list[tuple[int, int]]:
    """Consecutive ``(start, stop)`` ranges covering ``[0, end)``, each cut
    where no tool pair is split and holding at most ``chunk_tokens`` unless
    its first possible cut already holds more. ``cuts[end]`` must be True."""
    chunks: list[tuple[int, int]] = []
    a = 0
    while a < end:
        best: int | None = None
        total = 0
        i = a
        while i < end:
            total += tokens[i]
            i += 1
            if cuts[i] or i == end:
                if best is None or total <= chunk_tokens:
                    best = i
                if total >= chunk_tokens:
                    break
        assert best is not None
        chunks.append((a, best))
        a = best
    return chunks


def condense_groups(active: Sequence[SummaryRow], fanout: int) -> list[SummaryRow] | None:
    """The next group to condense: the oldest ``fanout`` active summaries of
    the shallowest depth that holds more than ``fanout``, if they are
    consecutive; else None."""
    by_depth: dict[int, list[SummaryRow]] = {}
    for s in sorted(active, key=lambda s: s.seq_lo):
        by_depth.setdefault(s.depth, []).append(s)
    for depth in sorted(by_depth):
        group = by_depth[depth]
        if len(group) > fanout:
            chosen = group[:fanout]
            if all(b.seq_lo == a.seq_hi + 1 for a, b in itertools.pairwise(chosen)):
                return chosen
            log.warning("summaries of one depth are not consecutive; not condensing them", extra={"fields": {"depth": depth}})
    return None


def condense_batch(active: Sequence[SummaryRow], fanout: int) -> list[list[SummaryRow]]:
    """Every group :func:`condense_groups` would pick, one after another, at
    the depth of its first pick (so they can be summarised in one call):
    the oldest ``fanout``, the next ``fanout``, ... while more than
    ``fanout`` of that depth would be left uncondensed."""
    left = list(active)
    groups: list[list[SummaryRow]] = []
    while True:
        group = condense_groups(left, fanout)
        if group is None or (groups and group[0].depth != groups[0][0].depth):
            return groups
        groups.append(group)
        chosen = {s.id for s in group}
        left = [s for s in left if s.id not in chosen]


def step_needed(
    frame_tokens: int, tail_tokens: int, budget: int, cfg: LosslessConfig, unfinished: bool, last_turn: int = 0, pays: bool = False
) -> bool:
    """Whether maintenance should run a compaction step now: the assembly
    past ``compact_threshold`` of the budget, a step left unfinished, one
    more turn as large as ``last_turn`` would not fit (see :func:`frame_due`),
    or a new frame would pay for itself (``pays``, :func:`frame_pays`)."""
    assembly = frame_tokens + tail_tokens
    return unfinished or pays or assembly > cfg.compact_threshold * budget or assembly + last_turn > budget


CACHED_SHARE = 0.1
"""What a prompt-cache hit costs against an uncached input token (OpenAI's
and Anthropic's cached reads are priced at about a tenth)."""


def excess_reads(rows: Sequence[MessageRow], frame_tokens: int, target: int) -> int:
    """Tokens the model requests since the frame read above ``target``: for
    each request (one per assistant message: the model answered one request
    with it), how far the assembly it was sent with (the frame and every
    message before it) exceeded ``target``, summed."""
    total = 0
    running = frame_tokens
    for r in rows:
        if r.role == "assistant":
            total += max(0, running - target)
        running += r.tokens
    return total


def frame_pays(rows: Sequence[MessageRow], frame_tokens: int, budget: int, cfg: LosslessConfig) -> bool:
    """Whether a new frame has paid for itself: the cached re-reads of what
    the assembly held above ``compact_target`` of the budget since the last
    frame (``rows``: the messages after it) cost as much as the uncached
    first request a new frame brings (framing plus a ``compact_target``
    assembly). For an assembly that grows by about the same each turn this
    is the cheapest time to install it: waiting longer costs more in cached
    re-reads a turn than the cold request saves, installing earlier costs
    more in cold requests (the classic order-quantity trade-off)."""
    target = int(cfg.compact_target * budget)
    cold = (1 - CACHED_SHARE) * (cfg.framing_tokens + target)
    return CACHED_SHARE * excess_reads(rows, frame_tokens, target) >= cold


def last_turn_tokens(rows: Sequence[MessageRow]) -> int:
    """Tokens of the newest turn among ``rows`` (the messages of its user turn)."""
    if not rows:
        return 0
    newest = rows[-1].turn
    return sum(r.tokens for r in rows if r.turn == newest)


RECENT_TURNS = 8
"""Turns the look-ahead takes the largest of: enough to see the periodic
large one (a tool output every few turns). With three, at 8k, two talk
turns after a shell turn hid it, and the next shell turn went over budget
+ framing (bench, 40 turns: 16,027 tokens against 15,796)."""
LOOKBACK_MESSAGES = 48
"""Stored messages (before the frame too) those turns are read from."""


def recent_turn_tokens(rows: Sequence[MessageRow], turns: int = RECENT_TURNS) -> int:
    """The largest of the newest ``turns`` turns among ``rows``, in tokens
    (turns differ: a turn with a tool output is larger than one without)."""
    sizes: dict[int, int] = {}
    for r in reversed(rows):
        if r.turn not in sizes and len(sizes) == turns:
            break
        sizes[r.turn] = sizes.get(r.turn, 0) + r.tokens
    return max(sizes.values(), default=0)


def frame_due(assembly_tokens: int, last_turn: int, budget: int, cfg: LosslessConfig, *, warm: bool, pays: bool = False) -> bool:
    """Whether a step should install its new frame now. A new frame breaks
    the provider's prompt cache once (the next request is not a prefix of the
    last), which costs nothing when the cache has gone cold; while it is warm
    the frame waits until it pays for itself (``pays``, :func:`frame_pays`)
    or the budget forces it: the assembly past
    ``warm_compact_threshold`` of the budget, or one more turn as large as
    ``last_turn`` (the largest recent one) would not fit. One is enough for
    the budget: maintenance runs in the background, so the next turn may be
    assembled (with the old frame) before a late step installs its frame,
    and then the assembly leaves that turn its room itself, dropping its
    oldest raw messages (:func:`turn_room`). Looking two turns ahead kept
    that room in every frame instead, and cost rebuilds (8k bench,
    ~920-token turns: a frame every ~3 turns; one turn ahead: every ~4.6)."""
    if not warm or pays:
        return True
    return assembly_tokens > cfg.warm_compact_threshold * budget or assembly_tokens + last_turn > budget


def turn_room(
    recent: int, budget: int, frame_tokens: int, tail_tokens: Sequence[int], cuts: Sequence[bool], fresh_tokens: int, fresh_messages: int
) -> int:
    """Room an assembly leaves beside itself for the turn about to run: as
    much as the largest recent turn (``recent``, what the frame decisions
    look one turn ahead by), so the turn's requests stay within the budget
    even when maintenance ran late and the frame it found due is not
    installed yet (then the oldest raw messages wait outside the assembly
    for their summaries). Never at the cost of the frame and the fresh tail
    (what a new frame would keep anyway: a pasted file in the newest turn
    stays whole)."""
    start = fresh_tail_start(tail_tokens, cuts, fresh_tokens, fresh_messages)
    return max(0, min(recent, budget - frame_tokens - sum(tail_tokens[start:])))


def summaries_wait(assembly_tokens: int, last_turn: int, budget: int, cfg: LosslessConfig, *, warm: bool, pays: bool = False) -> bool:
    """Whether a step whose frame is not due yet (:func:`frame_due`) should
    write no summaries now either, because two more turns as large as
    ``last_turn`` make the frame due: the step that installs it then asks
    for every summary in one call, where summarising now (while the frame
    waits) and again then made two (8k bench, ~340-token turns: the step
    past ``compact_threshold`` and the one the budget forces come a turn or
    two apart; each call carries ~1,400 tokens of Codex's framing, read
    uncached). A wider window (larger budgets) still writes its summaries
    early, so that a frame can be installed for free once the cache has
    gone cold."""
    return not frame_due(assembly_tokens, last_turn, budget, cfg, warm=warm, pays=pays) and frame_due(
        assembly_tokens + 2 * last_turn, last_turn, budget, cfg, warm=warm, pays=pays
    )


# --------------------------------------------------------------- the step


class StepContext:
    """What a step needs: the store, the host (may be None), config and counters."""

    def __init__(
        self,
        store: Store,
        host: EngineHost | None,
        cfg: LosslessConfig,
        count_text: Callable[[str], int],
        estimate: Callable[[AgentMessage], int],
        sizes: Knobs | None = None,
        *,
        instructions: str | None = None,
    ) -> None:
        self.store = store
        self.host = host
        self.cfg = cfg
        self.count_text = count_text
        self.estimate = estimate
        #: The compaction sizes for the step's budget (the settings, or derived from the budget).
        self.knobs = sizes if sizes is not None else knobs(cfg, cfg.token_budget)
        #: A compaction's ``custom_instructions``: in every summary prompt of the step.
        self.instructions = instructions

    async def db(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await trio.to_thread.run_sync(lambda: fn(*args, **kwargs))

    async def view(self, session_id: str, lo: int, hi: int | None = None) -> list[MessageRow]:
        """Stored messages ``lo..hi`` as the assembly sees them: an
        out-of-line message with its stand-in's tokens and text."""

        def run() -> list[MessageRow]:
            rows, recorded = self.store.messages_with_outputs(session_id, lo, hi)
            return out_of_line_view(self.store, self.cfg, session_id, rows, self.count_text, self.estimate, recorded)[0]

        return await trio.to_thread.run_sync(run)


async def _summary_text(
    ctx: StepContext, depth: int, turns: tuple[int, int], times: tuple[int, int], sources: Sequence[Source], deadline: float
) -> tuple[str, bool, str]:
    """``(text, fallback, outcome)`` for one summary."""
    target = ctx.knobs.leaf_summary_tokens if depth == 0 else ctx.knobs.condensed_summary_tokens
    timeout = min(ctx.cfg.summary_timeout, deadline - trio.current_time())
    text, outcome = await model_summary(
        ctx.host,
        summary_prompt(depth, turns, times, sources, target),
        target,
        timeout,
        ctx.count_text,
        system=instructed(SYSTEM_PROMPT, ctx.instructions, ctx.cfg.redact_secrets),
    )
    if text is None:
        return extractive_summary(depth, turns, sources, target, ctx.count_text), True, outcome
    return text, False, outcome


Job = tuple[int, tuple[int, int], tuple[int, int], Sequence[Source]]
"""One summary to write: ``(depth, turns, time range, sources)``."""


def _target(ctx: StepContext, depth: int) -> int:
    return ctx.knobs.leaf_summary_tokens if depth == 0 else ctx.knobs.condensed_summary_tokens


async def _summary_texts(ctx: StepContext, jobs: Sequence[Job], deadline: float) -> list[tuple[str, bool, str]]:
    """``(text, fallback, outcome)`` for each job, asking for up to
    ``summary_batch_size`` summaries in one host call (one prompt, numbered
    sections). A summary the answer does not give (a call that failed, an
    answer that does not parse, a section missing or empty) is asked for on
    its own, then falls back to the extractive stand-in like any other."""
    out: list[tuple[str, bool, str] | None] = [None] * len(jobs)
    size = max(1, ctx.cfg.summary_batch_size)
    for start in range(0, len(jobs), size):
        batch = jobs[start : start + size]
        if len(batch) > 1 and ctx.host is not None:
            targets = [_target(ctx, job[0]) for job in batch]
            prompt = batch_prompt([(*job, t) for job, t in zip(batch, targets, strict=True)])
            timeout = min(ctx.cfg.summary_timeout * len(batch), deadline - trio.current_time())
            system = instructed(BATCH_SYSTEM_PROMPT, ctx.instructions, ctx.cfg.redact_secrets)
            text, outcome = await model_summary(ctx.host, prompt, sum(targets), timeout, ctx.count_text, system=system, cap=False)
            found = parse_batch(text, len(batch)) if text is not None else {}
            if text is not None and len(found) < len(batch):
                log.warning(
                    "batched summary answer gave %d of %d sections; asking for the rest one by one",
                    len(found),
                    len(batch),
                    extra={"fields": {"given": len(found), "asked": len(batch)}},
                )
            elif text is None:
                log.info("batched summary call gave nothing (%s); asking one by one", outcome)
            for k, target in enumerate(targets, 1):
                if k in found:
                    out[start + k - 1] = (cap_summary(found[k], target, ctx.count_text), False, "model-batch")
        for i in range(start, start + len(batch)):
            if out[i] is None:
                depth, turns, times, sources = jobs[i]
                out[i] = await _summary_text(ctx, depth, turns, times, sources, deadline)
    return [r for r in out if r is not None]


def _message_sources(rows: Sequence[Any]) -> list[Source]:
    return [Source(r.id, f"{r.id} turn {r.turn} {r.role}", r.text) for r in rows]


def _summary_sources(rows: Sequence[SummaryRow]) -> list[Source]:
    return [Source(s.id, f"{s.id} depth {s.depth} turns {s.turn_lo}-{s.turn_hi}", s.text) for s in rows]


async def _add_condensed(
    ctx: StepContext,
    session_id: str,
    group: Sequence[SummaryRow],
    depth: int,
    turns: tuple[int, int],
    times: tuple[int, int],
    text: str,
    fallback: bool,
) -> bool:
    """Write one condensed summary over ``group``; False if it was made elsewhere first."""
    summary = NewSummary(
        id=summary_id(session_id, depth, [s.id for s in group]),
        depth=depth,
        source_ids=[s.id for s in group],
        seq_lo=group[0].seq_lo,
        seq_hi=group[-1].seq_hi,
        turn_lo=turns[0],
        turn_hi=turns[1],
        time_lo=times[0],
        time_hi=times[1],
        text=text,
        tokens=ctx.count_text(text),
        source_tokens=sum(s.source_tokens for s in group),
        fallback=fallback,
    )
    return bool(await ctx.db(ctx.store.add_condensed, session_id, summary))


def _condense_jobs(groups: Sequence[Sequence[SummaryRow]]) -> list[Job]:
    return [
        (g[0].depth + 1, (g[0].turn_lo, g[-1].turn_hi), (min(s.time_lo for s in g), max(s.time_hi for s in g)), _summary_sources(g))
        for g in groups
    ]


def one_round(force: bool, host: bool, calls: int) -> bool:
    """Whether a step stops after the summaries it asked for at its start:
    the leaves and the condensations whose sources existed then, in one
    batched call. A condensation over the step's own new summaries then
    waits for the next step (one summary call a step, not two: at 8k, each
    call carries ~1,400 tokens of Codex's framing, read uncached, and half
    the calls were such cascades). A forced step (``compact``), a step with
    no host (extractive summaries cost no call) and a step that made no
    call yet go on condensing until nothing is left."""
    return not force and host and calls > 0


async def run_step(
    ctx: StepContext, session_id: str, *, budget: int, force: bool, reason: str, install: bool = True
) -> dict[str, Any]:
    """One compaction step (see the module notes); returns its report, which
    is also stored as the session's last compaction. ``install=False`` writes
    the summaries only and leaves the frame (and so the assembly and the
    prompt cache) as it is: the frame is installed by a later step or, once
    the cache has gone cold, by :func:`install_frame` on the assembly path."""
    cfg, store = ctx.cfg, ctx.store
    deadline = trio.current_time() + cfg.step_deadline
    session = await ctx.db(store.session, session_id)
    rows = await ctx.view(session_id, session.summarized_seq + 1)
    before_tail = await ctx.view(session_id, session.frame_seq + 1)
    tokens_before = session.frame_tokens + sum(r.tokens for r in before_tail)
    messages = await ctx.db(store.decode, rows)
    tokens = [r.tokens for r in rows]
    cuts = valid_cuts(messages)
    sizes = ctx.knobs
    tail_start = fresh_tail_start(tokens, cuts, sizes.fresh_tail_tokens, sizes.fresh_tail_messages)
    chunks = leaf_chunks(tokens, cuts, tail_start, sizes.leaf_chunk_tokens)
    if chunks and not install and not force and sum(tokens[chunks[-1][0] : chunks[-1][1]]) < sizes.leaf_chunk_tokens:
        # While the frame waits, a short last chunk waits for more messages
        # (a summary a turn would be a model call a turn). A step that
        # installs its frame summarises it too (in the same batched call), so
        # the new frame reaches the fresh tail: a short chunk left raw would
        # stay in the assembly, up to a leaf chunk more than the fresh tail
        # (8k bench: ~40% of the budget right after a frame, and a rebuild
        # every ~3 turns).
        chunks.pop()
    outcomes: dict[str, int] = {}
    made_leaves = made_condensed = fallbacks = 0
    jobs: list[Job] = []
    batch = max(1, cfg.summary_batch_size)
    for a, b in chunks:
        part = rows[a:b]
        turns = (part[0].turn, part[-1].turn)
        times = (min(r.timestamp for r in part), max(r.timestamp for r in part))
        jobs.append((0, turns, times, _message_sources(part)))
    # The condensations whose sources exist already ride in the leaves'
    # batched call (one call a step, not two): see :func:`one_round`.
    groups = condense_batch(await ctx.db(store.summaries, session_id, active_only=True), cfg.condense_fanout)
    jobs += _condense_jobs(groups)
    work: list[tuple[int, int] | list[SummaryRow]] = [*chunks, *groups]
    calls = 0
    stopped = False
    for at in range(0, len(jobs), batch):
        # Each batch's summaries are written before the next is asked for
        # (persist as you go: a kill mid-step loses at most the batch in flight).
        texts = await _summary_texts(ctx, jobs[at : at + batch], deadline)
        calls += 1
        for item, (depth, turns, times, _), (text, fallback, outcome) in zip(work[at:], jobs[at:], texts, strict=False):
            if isinstance(item, tuple):
                part = rows[item[0] : item[1]]
                summary = NewSummary(
                    id=summary_id(session_id, 0, [r.id for r in part]),
                    depth=0,
                    source_ids=[r.id for r in part],
                    seq_lo=part[0].seq,
                    seq_hi=part[-1].seq,
                    turn_lo=turns[0],
                    turn_hi=turns[1],
                    time_lo=times[0],
                    time_hi=times[1],
                    text=text,
                    tokens=ctx.count_text(text),
                    source_tokens=sum(r.tokens for r in part),
                    fallback=fallback,
                )
                stopped = not await ctx.db(store.add_leaf, session_id, summary)
                made_leaves += not stopped
            else:
                stopped = not await _add_condensed(ctx, session_id, item, depth, turns, times, text, fallback)
                made_condensed += not stopped
            if stopped:
                log.info("summary already made elsewhere; step stops here", extra={"fields": {"sessionId": session_id}})
                break
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            fallbacks += fallback
        if stopped:
            break
    while not stopped and not one_round(force, ctx.host is not None, calls):
        # Condensations that need this step's own summaries (a cascade).
        groups = condense_batch(await ctx.db(store.summaries, session_id, active_only=True), cfg.condense_fanout)
        if not groups:
            break
        jobs = _condense_jobs(groups)
        for at in range(0, len(jobs), batch):
            texts = await _summary_texts(ctx, jobs[at : at + batch], deadline)
            for group, (depth, turns, times, _), (text, fallback, outcome) in zip(groups[at:], jobs[at:], texts, strict=False):
                stopped = not await _add_condensed(ctx, session_id, group, depth, turns, times, text, fallback)
                if stopped:
                    break
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
                made_condensed += 1
                fallbacks += fallback
            if stopped:
                break
    session = await ctx.db(store.session, session_id)
    report: dict[str, Any] = {
        "reason": reason,
        "leafSummaries": made_leaves,
        "condensedSummaries": made_condensed,
        "fallbackSummaries": fallbacks,
        "summaryOutcomes": outcomes,
        "tokensBefore": tokens_before,
    }
    if not made_leaves and not made_condensed and session.summarized_seq == session.frame_seq and not force:
        report.update(changed=False, tokensAfter=tokens_before)
        return report
    if not install:
        report.update(changed=False, deferred=True, tokensAfter=tokens_before)
        return report
    return await trio.to_thread.run_sync(
        lambda: install_frame(store, cfg, session_id, budget, ctx.count_text, ctx.estimate, report, tokens_before)
    )


def frame_room(cfg: LosslessConfig, budget: int, tail_tokens: int) -> int:
    """Tokens a new frame's summaries may take: ``compact_target`` of the
    budget beside the tail, but at least three leaf summaries' worth. At
    small budgets the fresh tail alone (at least ``fresh_tail_tokens`` and
    ``fresh_tail_messages``) passes ``compact_target`` (8k: 960 tokens
    against a ~1,400-token tail), and a frame of no summary showed
    the model nothing of what came before, not even the system prompt
    addition that names the recall tools."""
    floor = 3 * knobs(cfg, budget).leaf_summary_tokens
    return max(floor, int(cfg.compact_target * budget) - tail_tokens)


def install_frame(
    store: Store,
    cfg: LosslessConfig,
    session_id: str,
    budget: int,
    count_text: Callable[[str], int],
    estimate: Callable[[AgentMessage], int],
    report: dict[str, Any],
    tokens_before: int,
) -> dict[str, Any]:
    """Install the frame the stored summaries give: the newest that fit
    ``compact_target`` of the budget beside the raw messages no summary
    covers. No model call (synchronous: run it in a worker thread). Returns
    ``report`` with what changed; it is stored as the last compaction."""
    session = store.session(session_id)
    active = store.summaries(session_id, active_only=True)
    rows, recorded = store.messages_with_outputs(session_id, session.summarized_seq + 1)
    tail = out_of_line_view(store, cfg, session_id, rows, count_text, estimate, recorded)[0]
    tail_tokens = sum(r.tokens for r in tail)
    room = frame_room(cfg, budget, tail_tokens)
    chosen, rendered, frame_tokens = select_frame(active, room, estimate)
    frame_ids = [s.id for s in chosen]
    frame = encode_openclaw(rendered)
    if session.summarized_seq == session.frame_seq and frame == session.frame:
        report.update(changed=False, tokensAfter=tokens_before)
        return report
    report.update(
        changed=True,
        frameSeq=session.summarized_seq,
        frameSummaries=len(frame_ids),
        tokensAfter=frame_tokens + tail_tokens,
        at=int(time.time() * 1000),
        step=session.steps + 1,
    )
    store.set_frame(
        session_id,
        frame_seq=session.summarized_seq,
        frame=frame,
        frame_ids=frame_ids,
        frame_tokens=frame_tokens,
        compaction=report,
    )
    log.info(
        "lossless compaction step",
        extra={"fields": {"sessionId": session_id, **{k: v for k, v in report.items() if k != "summaryOutcomes"}}},
    )
    return report


async def retry_fallbacks(ctx: StepContext, session_id: str, limit: int, deadline: float) -> int:
    """Ask the host again for up to ``limit`` extractive summaries; returns
    how many got a model text. The frame keeps the text it was built with
    until the next step, so the assembly does not change here."""
    if ctx.host is None or limit <= 0:
        return 0
    done = 0
    for s in await ctx.db(ctx.store.fallback_summaries, session_id, limit):
        if trio.current_time() >= deadline:
            break
        source_ids = await ctx.db(ctx.store.summary_sources, s.id)
        if s.depth == 0:
            rows = await ctx.view(session_id, s.seq_lo, s.seq_hi)
            sources = _message_sources(rows)
        else:
            children = [await ctx.db(ctx.store.summary, session_id, i) for i in source_ids]
            sources = _summary_sources([c for c in children if c is not None])
        target = ctx.knobs.leaf_summary_tokens if s.depth == 0 else ctx.knobs.condensed_summary_tokens
        timeout = min(ctx.cfg.summary_timeout, deadline - trio.current_time())
        text, _ = await model_summary(
            ctx.host, summary_prompt(s.depth, (s.turn_lo, s.turn_hi), (s.time_lo, s.time_hi), sources, target), target, timeout, ctx.count_text
        )
        if text is None:
            await ctx.db(ctx.store.count_attempt, session_id, s.id)
            continue
        await ctx.db(ctx.store.replace_summary_text, session_id, s.id, text, ctx.count_text(text), False)
        done += 1
    return done
