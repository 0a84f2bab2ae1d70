"""Framing survives any chunking and never loses or truncates a byte."""

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.jsonrpc import Fragment, LineSplitter, Oversized


def run(chunks: list[bytes], max_line: int):
    s = LineSplitter(max_line)
    events = []
    for c in chunks:
        events.extend(s.feed(c))
    events.extend(s.close())
    return events


def reassemble(events) -> bytes:
    out = bytearray()
    for ev in events:
        if isinstance(ev, bytes):
            out += ev + b"\n"
        else:
            out += ev.data
    return bytes(out)


def logical_lines(events):
    """Lines as the relay sees them: parsed lines, and oversized lines glued back."""
    lines, partial = [], bytearray()
    for ev in events:
        if isinstance(ev, Oversized):
            partial += ev.data
            if ev.end:
                lines.append(("oversized", bytes(partial[:-1])))
                partial.clear()
        elif isinstance(ev, Fragment):
            lines.append(("fragment", bytes(partial) + ev.data))
            partial.clear()
        else:
            lines.append(("line", ev))
    if partial:
        lines.append(("fragment", bytes(partial)))
    return lines


line_bytes = st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"x"))


@st.composite
def stream_and_cuts(draw):
    lines = draw(st.lists(line_bytes, max_size=20))
    tail = draw(st.one_of(st.just(b""), line_bytes))
    data = b"".join(l + b"\n" for l in lines) + tail
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=12)))
    chunks, prev = [], 0
    for c in cuts + [len(data)]:
        chunks.append(data[prev:c])
        prev = c
    return lines, tail, data, chunks


@settings(max_examples=400)
@given(stream_and_cuts(), st.integers(1, 64))
def test_any_chunking_gives_back_every_byte(sdc, max_line):
    lines, tail, data, chunks = sdc
    events = run(chunks, max_line)
    assert reassemble(events) == data


@settings(max_examples=400)
@given(stream_and_cuts(), st.integers(1, 64))
def test_lines_are_independent_of_chunking(sdc, max_line):
    lines, tail, data, chunks = sdc
    got = logical_lines(run(chunks, max_line))
    once = logical_lines(run([data], max_line))
    assert got == once
    expected = [("oversized" if len(l) > max_line else "line", l) for l in lines]
    if tail:
        expected.append(("fragment", tail))
    assert got == expected


def test_oversized_line_is_streamed_not_buffered():
    s = LineSplitter(max_line=10)
    ev = s.feed(b"a" * 25)
    assert ev == [Oversized(b"a" * 25, end=False)]
    assert s.buffered == 0  # nothing of the long line is held
    ev = s.feed(b"bbb\nok\n")
    assert ev == [Oversized(b"bbb\n", end=True), b"ok"]


def test_line_exactly_at_the_limit_is_parsed():
    s = LineSplitter(max_line=4)
    assert s.feed(b"abcd\nabcde\n") == [b"abcd", Oversized(b"abcde\n", end=True)]


def test_crlf_is_kept_for_byte_exact_forwarding():
    s = LineSplitter()
    assert s.feed(b'{"a":1}\r\n') == [b'{"a":1}\r']


def test_fragment_at_eof_is_handed_out():
    s = LineSplitter()
    assert s.feed(b'{"a":1}\n{"b"') == [b'{"a":1}']
    assert s.close() == [Fragment(b'{"b"')]
    assert s.close() == []
