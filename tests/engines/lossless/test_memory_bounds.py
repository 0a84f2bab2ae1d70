"""What the engine keeps in memory stays bounded however long a session runs."""

from __future__ import annotations

import gc
import types

from engines import AssembleParams, AssistantMessage, CompactionSummaryMessage, IngestBatchParams, TextBlock, UserMessage
from engines.lossless.engine import SESSIONS_HELD
from engines.lossless.rows import DecodedMessages

from .conftest import SESSION, T0, assemble, make_engine, run_turn, turn


def _message(n: int, size: int) -> UserMessage:
    return UserMessage(content=f"{n} " + "x" * size, timestamp=T0 + n)


def test_the_decoded_cache_holds_no_more_than_its_bytes_and_count_allow():
    cache = DecodedMessages(max_count=50, max_bytes=10_000)
    for n in range(0, 1_000, 4):
        ids = [f"m{i}" for i in range(n, n + 4)]
        for i, mid in enumerate(ids):
            cache.put(mid, _message(n + i, 600), 600)
        assert [m.content.split()[0] for m in cache.use(ids)] == [str(i) for i in range(n, n + 4)]
        assert cache.bytes <= 10_000 and len(cache) <= 50
    assert cache.bytes == sum(size for _, size in cache._items.values())
    # Many small messages: the count bounds it.
    small = DecodedMessages(max_count=50, max_bytes=10_000)
    for n in range(500):
        small.put(f"s{n}", _message(n, 1), 10)
        small.use([f"s{n}"])
    assert len(small) == 50 and small.bytes == 500


def test_one_read_larger_than_the_decoded_cache_stays_whole_and_then_gives_way():
    cache = DecodedMessages(max_count=10, max_bytes=1_000)
    tail = [f"t{i}" for i in range(30)]
    for i, mid in enumerate(tail):
        cache.put(mid, _message(i, 100), 100)
    assert len(cache.use(tail)) == 30
    assert all(mid in cache for mid in tail)  # read again next turn without a decode
    cache.put("new", _message(99, 100), 100)
    cache.use(["new"])
    assert len(cache) == 10 and "new" in cache and "t0" not in cache and "t29" in cache
    cache.drop("t29")
    assert "t29" not in cache and cache.bytes == 900


async def test_the_store_s_decoded_messages_stay_within_the_byte_bound_over_a_long_session(host):
    engine = await make_engine(host)
    history = [_message(n, 2_000) if n % 2 == 0 else AssistantMessage(content=[TextBlock(text="y" * 2_000)], timestamp=T0 + n) for n in range(400)]
    await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=history))
    store = engine.store
    rows = store.messages_between(SESSION, 1)
    assert len(rows) == 400
    bound = store._decoded.max_bytes = 64 << 10
    for i in range(0, len(rows), 8):
        got = store.decode(rows[i : i + 8])
        assert [getattr(m, "timestamp", None) for m in got] == [T0 + n for n in range(i, i + 8)]
        assert store._decoded.bytes <= bound
    assert 0 < len(store._decoded) < 40  # 400 messages of ~2 KB went through it


async def test_assemblies_under_one_frame_hand_back_the_same_summary_objects(host):
    engine = await make_engine(host)
    history: list = []
    for n in range(1, 12):
        await run_turn(engine, history, turn(n))
    first = (await assemble(engine, history)).messages
    again = (await assemble(engine, history)).messages
    summaries = [m for m in first if isinstance(m, CompactionSummaryMessage)]
    assert summaries, "no frame after 11 turns"
    assert [id(m) for m in again[: len(summaries)]] == [id(m) for m in summaries]
    # A new frame is decoded anew.
    for n in range(12, 20):
        await run_turn(engine, history, turn(n))
    later = [m for m in (await assemble(engine, history)).messages if isinstance(m, CompactionSummaryMessage)]
    assert later != summaries and not any(m is s for m in later for s in summaries)


def test_what_an_ingestion_seeds_never_evicts_a_message_another_thread_is_decoding(tmp_path, monkeypatch):
    """The decoded cache is shared by every thread of the store: an
    ingestion seeds it under the store's lock, so it cannot evict the
    messages a decode in another thread found cached and is about to hand
    back (that decode failed with a KeyError: the assembly fell open)."""
    import threading

    from engines.lossless import Store, ingest

    store = Store.open(tmp_path)
    count = lambda m: 1  # noqa: E731
    store.ingest("a", "a", [_message(n, 10) for n in range(4)], [f"a{n}" for n in range(4)], count)
    rows = store.messages_between("a", 1)
    store.decode(rows[:3])
    store._decoded.drop(rows[3].id)  # the one the reader below decodes
    store._decoded.max_count = 4
    real = ingest.decode_openclaw
    seeding, seed, decoding, decode = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    got: list = []
    writer = threading.Thread(target=store.ingest, args=("b", "b", [_message(n, 10) for n in range(10, 14)], [f"b{n}" for n in range(4)], count))
    reader = threading.Thread(target=lambda: got.append(_outcome(store.decode, rows)))

    def paused(*args, **kwargs):
        if threading.current_thread() is writer and not seeding.is_set():
            seeding.set()
            seed.wait(10)
        elif threading.current_thread() is reader:
            decoding.set()
            decode.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(ingest, "decode_openclaw", paused)
    writer.start()
    assert seeding.wait(10)
    reader.start()
    decoding.wait(2)  # reached at once without the store's lock; with it, only once the writer is done
    seed.set()
    writer.join(10)
    decode.set()
    reader.join(10)
    store.close()
    assert [getattr(m, "timestamp", m) for m in got[0]] == [T0 + n for n in range(4)]


def _outcome(fn, *args):
    try:
        return fn(*args)
    except Exception as exc:  # the reader's failure, shown by the assertion
        return [exc]


def _reaches(root: object, targets: list[object]) -> bool:
    """Whether any of ``targets`` is reachable from ``root`` (not through
    types, modules or functions)."""
    wanted = {id(t) for t in targets}
    seen: set[int] = set()
    todo = [root]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (type, types.ModuleType, types.FunctionType, types.MethodType)):
            continue
        if id(obj) in wanted:
            return True
        seen.add(id(obj))
        todo.extend(gc.get_referents(obj))
    return False


async def test_a_session_out_of_the_recently_used_ones_is_not_held_and_assembles_the_same_when_back(host):
    engine = await make_engine(host)
    history: list = []
    for n in range(1, 12):
        await run_turn(engine, history, turn(n))
    before = (await assemble(engine, history)).messages
    assert _reaches(engine, history)  # the session is in use: its snapshot is kept
    for k in range(SESSIONS_HELD - 1):
        other = f"other-{k}"
        await engine.assemble(AssembleParams(session_id=other, session_key=other, messages=[_message(k, 10)]))
    assert _reaches(engine, history)  # still among the most recently used
    await engine.assemble(AssembleParams(session_id="one-more", session_key="one-more", messages=[_message(0, 10)]))
    assert not _reaches(engine, history)  # the client's messages are not held for it any more
    assert SESSION not in engine._intake._settled and SESSION not in engine._frames._by_session
    again = (await assemble(engine, history)).messages  # read back from the store
    assert again == before
    assert (await engine.assemble(AssembleParams(session_id=SESSION, session_key=SESSION, messages=list(history)))).messages == before
    assert len(engine.store.messages_between(SESSION, 1)) == len(history)  # nothing stored twice
