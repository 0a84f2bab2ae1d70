"""The relay: byte-exact forwarding, hooks, internal requests, faults."""

from __future__ import annotations

import json
import os

import msgspec
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import CHILD_EXITED, OUTCOME_UNKNOWN, parse
from protocol.jsonrpc import PREFIX
from sidecar.record import Recorder, read_recording
from sidecar.relay import HANDLED, Hooks, ProxyOptions, RpcError
from tests.support.harness import child, proxied, wait_until


def frame(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


# ---------------------------------------------------------------- forwarding

methods = st.sampled_from(["turn/start", "thread/start", "item/tool/call", "x/unknownMethod", "warning"])
threads = st.sampled_from(["thr_a", "thr_b", "thr_c"])
text = st.text(max_size=30)


@st.composite
def client_frames(draw):
    """A random interleaving of requests, notifications, responses and errors."""
    out = []
    next_id = 0
    for kind in draw(st.lists(st.sampled_from(["req", "sreq", "note", "resp", "err", "junk"]), max_size=25)):
        th, m, t = draw(threads), draw(methods), draw(text)
        if kind == "req":
            next_id += 1
            rid = draw(st.sampled_from([next_id, f"s{next_id}", f"{PREFIX}{next_id}"]))
            out.append(("req", frame({"id": rid, "method": m, "params": {"threadId": th, "t": t}})))
        elif kind == "note":
            out.append(("note", frame({"method": m, "params": {"threadId": th, "t": t}})))
        elif kind == "resp":
            out.append(("resp", frame({"id": draw(st.integers(0, 99)), "result": {"decision": t}})))
        elif kind == "err":
            out.append(("resp", frame({"id": draw(st.integers(0, 99)), "error": {"code": -1, "message": t}})))
        elif kind == "sreq":
            # Shaped like a server request; from the client it is just a request.
            next_id += 1
            out.append(("req", frame({"id": next_id * 1000, "method": "item/commandExecution/requestApproval", "params": {"t": t}})))
        else:
            out.append(("junk", t.encode("utf-8", "surrogatepass").replace(b"\n", b" ") + b"\xff not json"))
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(client_frames(), st.lists(st.integers(1, 200), min_size=1, max_size=8))
async def test_forwarding_keeps_order_and_bytes_under_random_interleavings(tmp_path_factory, frames, cuts):
    """Every client frame reaches the child byte for byte and in order; every
    child frame reaches the client byte for byte and in order (the child echoes
    each line, then answers requests)."""
    log = tmp_path_factory.mktemp("echo") / "child.log"
    data = b"".join(f + b"\n" for _, f in frames)
    async with proxied(child("echo_rpc.py"), env={"ECHO_RPC_LOG": str(log)}) as c:
        # Send in arbitrary chunks so frames straddle reads.
        pos, i = 0, 0
        while pos < len(data):
            step = cuts[i % len(cuts)]
            await c.send(data[pos : pos + step])
            pos += step
            i += 1
            if i % 3 == 0:
                await trio.sleep(0)
        expected = []
        for kind, f in frames:
            expected.append(f)
            if kind == "req":
                rid = json.loads(f)["id"]
                expected.append(("response-to", rid))
        got = await c.wait_lines(len(expected))
        await c.close()
        assert await c.wait_exit() == 0
    child_lines = log.read_bytes().split(b"\n")[:-1]
    assert len(child_lines) == len(frames)
    for (kind, sent), seen in zip(frames, child_lines):
        if kind == "req" and json.loads(sent)["id"].__class__ is str and json.loads(sent)["id"].startswith(PREFIX):
            assert json.loads(seen)["id"] != json.loads(sent)["id"]  # aliased
            assert {k: v for k, v in json.loads(seen).items() if k != "id"} == {
                k: v for k, v in json.loads(sent).items() if k != "id"
            }
        else:
            assert seen == sent
    for exp, line in zip(expected, got):
        if isinstance(exp, tuple):
            msg = json.loads(line)
            assert msg["id"] == exp[1], "response carries the client's own id"
        elif PREFIX.encode() in exp and b'"id"' in exp and json.loads(exp).get("method"):
            # The echo of an aliased request shows the alias: the child's view.
            assert json.loads(line)["method"] == json.loads(exp)["method"]
        else:
            assert line == exp
    assert len(c.proxy.router.pending) == 0


async def test_unknown_methods_server_requests_and_errors_pass_both_ways(tmp_path):
    log = tmp_path / "child.log"
    sent = [
        b'{"id":1,"method":"future/method","params":{"deep":{"x":[1,2,{"y":null}]}},"unknownTop":1}',
        b'{"id":99,"result":{"decision":"accept"}}',
        b'{"id":98,"error":{"code":-32000,"message":"denied"}}',
        b'{"method":"initialized"}',
    ]
    async with proxied(child("echo_rpc.py"), env={"ECHO_RPC_LOG": str(log)}) as c:
        await c.send(b"".join(s + b"\n" for s in sent))
        got = await c.wait_lines(5)
    assert log.read_bytes() == b"".join(s + b"\n" for s in sent)
    assert got[0] == sent[0]
    assert json.loads(got[1]) == {"id": 1, "result": {"method": "future/method", "sawId": 1}}
    assert got[2:] == sent[1:]


# ------------------------------------------------------- faults in the stream


async def test_malformed_oversized_and_invalid_utf8_lines_are_forwarded_intact(tmp_path):
    log = tmp_path / "child.log"
    big = b'{"method":"big","params":{"pad":"' + b"x" * 5000 + b'"}}'
    lines = [b"this is not json", b"\xff\xfe\xfd invalid utf-8", big, b'{"method":"after","params":{}}']
    opts = ProxyOptions(max_line=1024, eof_grace=2, kill_grace=2, forward_signals=False)
    async with proxied(child("echo_rpc.py"), options=opts, env={"ECHO_RPC_LOG": str(log)}) as c:
        for line in lines:  # an oversized line arriving in pieces
            for i in range(0, len(line) + 1, 700):
                await c.send((line + b"\n")[i : i + 700])
        got = await c.wait_lines(4)
        status = c.proxy.status()
    assert log.read_bytes() == b"".join(l + b"\n" for l in lines)
    assert got == lines
    assert status["clientToCodex"]["oversizedFrames"] == 1
    assert status["codexToClient"]["oversizedFrames"] == 1
    assert status["clientToCodex"]["invalidFrames"] == 2
    assert status["clientToCodex"]["frames"] == 4


async def test_trailing_bytes_without_newline_reach_the_child(tmp_path):
    log = tmp_path / "child.log"
    async with proxied(child("echo_rpc.py"), env={"ECHO_RPC_LOG": str(log)}) as c:
        await c.send(b'{"method":"a"}\n{"method":"no-newline"}')
        await c.close()
        assert await c.wait_exit() == 0
    assert log.read_bytes() == b'{"method":"a"}\n{"method":"no-newline"}'


# ------------------------------------------------------------- child exits


@pytest.mark.parametrize("how, status", [("exit:3", 3), ("signal:SIGKILL", 137), ("exit:0", 0)])
async def test_child_death_answers_every_delivered_request_as_outcome_unknown_and_passes_its_status(how, status):
    """Codex read both requests before dying: a turn/start it may have run
    must not come back as -32001, which clients retry as "never enqueued"."""
    async with proxied(child("crash_after.py", "2", how)) as c:
        await c.send(b'{"id":1,"method":"turn/start","params":{}}\n{"id":"two","method":"thread/read","params":{}}\n')
        assert await c.wait_exit() == status
        lines = c.lines
    assert lines[0] == b'{"method":"child/lastWords","params":{}}'  # what it said before dying
    errors = {json.loads(l)["id"]: json.loads(l)["error"] for l in lines[1:]}
    assert set(errors) == {1, "two"}
    assert all(e["code"] == OUTCOME_UNKNOWN != CHILD_EXITED for e in errors.values())
    assert errors[1]["data"] == {"method": "turn/start", "outcome": "unknown", "reason": "appServerExited"}


async def test_a_held_request_the_child_never_saw_is_answered_not_delivered():
    """-32001 ("not enqueued, retry") is kept for what codex never had."""
    hooks = Hooks()
    hooks.on_client_request("turn/start", lambda msg: HANDLED)  # held, never forwarded
    async with proxied(child("crash_after.py", "1", "exit:0"), hooks=hooks) as c:
        await c.send(b'{"id":7,"method":"turn/start","params":{}}\n{"id":8,"method":"thread/read","params":{}}\n')
        await c.wait_exit()
        answers = {json.loads(l).get("id"): json.loads(l) for l in c.lines}
    assert answers[7]["error"]["code"] == CHILD_EXITED
    assert answers[7]["error"]["data"]["outcome"] == "notDelivered"
    assert answers[8]["error"]["code"] == OUTCOME_UNKNOWN


async def test_client_eof_closes_child_stdin_then_terminates_then_kills(tmp_path):
    mark = tmp_path / "mark"
    opts = ProxyOptions(eof_grace=0.3, kill_grace=0.3, forward_signals=False)
    async with proxied(child("stubborn.py", str(mark)), options=opts) as c:
        await c.wait_lines(1)
        await c.send(b'{"id":1,"method":"turn/start","params":{}}\n')
        await c.close()  # EOF mid-turn
        assert await c.wait_exit() == 128 + 15
    assert mark.read_text() == "signal 15\n"
    assert json.loads(c.lines[-1])["error"]["code"] == OUTCOME_UNKNOWN, "codex had the turn/start"

    mark2 = tmp_path / "mark2"
    async with proxied(child("stubborn.py", str(mark2), "ignore-term"), options=opts) as c:
        await c.wait_lines(1)
        await c.close()
        assert await c.wait_exit() == 128 + 9
    assert mark2.read_text() == "signal 15\n"


# ------------------------------------------------------ hooks and own requests


async def test_sidecar_requests_never_collide_with_client_ids():
    """The client uses the very id the sidecar's first internal request gets."""
    hooks = Hooks()
    results = {}

    def on_initialized(msg):
        async def ask():
            results["internal"] = await c.proxy.request("thread/list", {"limit": 1}, timeout=5)

        c.proxy.spawn(ask)
        return None

    hooks.on_client_request("go", on_initialized)
    async with proxied(child("echo_rpc.py", ), env={"ECHO_RPC_QUIET": "1"}, hooks=hooks) as c:
        await c.send(frame({"id": f"{PREFIX}1", "method": "go", "params": {}}) + b"\n")
        got = await c.wait_lines(1)
        with trio.fail_after(5):
            while "internal" not in results:
                await trio.sleep(0.01)
        await trio.sleep(0.1)
    client_view = json.loads(got[0])
    assert client_view["id"] == f"{PREFIX}1"
    assert client_view["result"]["sawId"] != f"{PREFIX}1", "the child saw an alias"
    assert results["internal"]["method"] == "thread/list"
    assert results["internal"]["sawId"] == f"{PREFIX}1", "the sidecar's own request got its own id"
    assert len(c.lines) == 1, "the internal response never reached the client"


async def test_internal_request_fails_cleanly_when_the_child_dies():
    hooks = Hooks()
    outcome = {}

    def start(msg):
        async def ask():
            try:
                await c.proxy.request("thread/list", {}, timeout=5)
            except RpcError as exc:
                outcome["code"] = exc.code

        c.proxy.spawn(ask)
        return HANDLED

    hooks.on_client_request("go", start)
    async with proxied(child("crash_after.py", "1", "exit:0"), hooks=hooks) as c:
        await c.send(b'{"id":1,"method":"go"}\n')
        await c.wait_exit()
    assert outcome == {"code": CHILD_EXITED}


async def test_a_held_request_does_not_block_other_traffic_and_keeps_its_fields():
    hooks = Hooks()
    release = trio.Event()

    def hold_turn(msg):
        async def later():
            await release.wait()
            params = msg.params()
            params["input"].append({"type": "text", "text": "added"})
            c.proxy.router.forward_client_request(type(msg)(parse(msg.line), msg.line.replace(b'"input":[]', b'"input":' + frame(params["input"]))))

        c.proxy.spawn(later)
        return HANDLED

    hooks.on_client_request("turn/start", hold_turn)
    async with proxied(child("echo_rpc.py"), env={"ECHO_RPC_QUIET": "1"}, hooks=hooks) as c:
        await c.send(b'{"id":1,"method":"turn/start","params":{"threadId":"a","input":[],"future":{"k":1}}}\n')
        await c.send(b'{"id":2,"method":"thread/read","params":{"threadId":"b"}}\n')
        first = await c.wait_lines(1)
        assert json.loads(first[0])["id"] == 2, "unrelated traffic overtook the held turn"
        release.set()
        got = await c.wait_lines(2)
    assert json.loads(got[1]) == {"id": 1, "result": {"method": "turn/start", "sawId": 1}}


async def test_a_failing_hook_fails_open(tmp_path):
    log = tmp_path / "child.log"
    hooks = Hooks()

    def broken(msg):
        raise ValueError("PROMPT-TEXT-MUST-NOT-LEAK")

    hooks.on_client_request("turn/start", broken)
    hooks.on_server_notification("turn/started", broken)
    line = b'{"id":1,"method":"turn/start","params":{"input":[]}}'
    async with proxied(child("echo_rpc.py"), env={"ECHO_RPC_LOG": str(log)}, hooks=hooks) as c:
        await c.send(line + b"\n" + b'{"method":"turn/started","params":{}}\n')
        got = await c.wait_lines(3)
    assert log.read_bytes().startswith(line + b"\n")
    assert got[2] == b'{"method":"turn/started","params":{}}'


async def test_response_hook_can_rewrite_and_status_tracks_threads_and_version():
    hooks = Hooks()
    def add_thread(msg, pending):
        msg.set_result({**msg.result(), "thread": {"id": "thr_x"}})

    hooks.on_response("thread/start", add_thread)
    async with proxied(child("echo_rpc.py"), env={"ECHO_RPC_QUIET": "1"}, hooks=hooks) as c:
        await c.send(b'{"id":1,"method":"initialize","params":{"clientInfo":{"name":"t"}}}\n')
        await c.send(b'{"id":7,"method":"thread/start","params":{}}\n')
        await c.wait_lines(2)
        await c.send(b'{"id":8,"method":"sidecar/status"}\n')
        got = await c.wait_lines(3)
    by_id = {json.loads(l)["id"]: json.loads(l) for l in got}
    assert by_id[7]["result"]["thread"] == {"id": "thr_x"}
    status = by_id[8]["result"]
    assert status["codexVersion"] == "0.169.0"
    assert status["threadsSeen"] == ["thr_x"]
    assert status["clientToCodex"]["frames"] == 2  # the control request is not relayed
    assert status["childPid"] > 0


async def test_control_methods_are_never_forwarded(tmp_path):
    log = tmp_path / "child.log"
    async with proxied(child("echo_rpc.py"), env={"ECHO_RPC_LOG": str(log)}) as c:
        await c.send(b'{"id":1,"method":"sidecar/status"}\n{"id":2,"method":"sidecar/nope"}\n{"method":"sidecar/ping"}\n')
        got = await c.wait_lines(2)
        await c.close()
        await c.wait_exit()
    assert log.read_bytes() == b""
    assert json.loads(got[0])["result"]["sidecarVersion"]
    assert json.loads(got[1])["error"]["code"] == -32601


# --------------------------------------------------------------- recording


async def test_recording_holds_every_frame_with_direction_and_order(tmp_path):
    path = tmp_path / "rec.jsonl"
    rec = Recorder(path)
    async with proxied(child("echo_rpc.py"), env={"ECHO_RPC_QUIET": "1"}, recorder=rec) as c:
        await c.send(b'{"id":1,"method":"turn/start","params":{"input":[{"type":"text","text":"hello"}]}}\nnot json\n')
        await c.send(b'{"id":2,"method":"sidecar/status"}\n')
        await c.wait_lines(3)
        await c.close()
        await c.wait_exit()
    rec.close()
    entries = list(read_recording(path))
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    dirs = [(e.dir, e.line()) for e in entries]
    assert ("client>codex", b'{"id":1,"method":"turn/start","params":{"input":[{"type":"text","text":"hello"}]}}') in dirs
    assert ("client>codex", b"not json") in dirs
    assert ("client>sidecar", b'{"id":2,"method":"sidecar/status"}') in dirs
    assert any(d == "sidecar>client" for d, _ in dirs)
    assert any(d == "codex>client" and json.loads(l).get("result", {}).get("sawId") == 1 for d, l in dirs)
    assert all(b >= a for a, b in zip([e.t for e in entries], [e.t for e in entries][1:]))
    assert os.stat(path).st_mode & 0o777 == 0o600


async def test_redacted_recording_keeps_shape_but_no_text(tmp_path):
    path = tmp_path / "rec.jsonl"
    rec = Recorder(path, redact=True)
    async with proxied(child("echo_rpc.py"), env={"ECHO_RPC_QUIET": "1"}, recorder=rec) as c:
        await c.send(b'{"id":1,"method":"turn/start","params":{"threadId":"t1","input":[{"type":"text","text":"TOPSECRET"}]}}\n')
        await c.wait_lines(1)
    rec.close()
    raw = path.read_bytes()
    assert b"TOPSECRET" not in raw
    first = msgspec.json.decode(next(iter(read_recording(path))).line())
    assert first["params"]["threadId"] == "t1"
    assert first["params"]["input"][0] == {"type": "text", "text": "[redacted 9 chars]"}


async def test_a_full_disk_disables_recording_but_not_the_relay(tmp_path):
    rec = Recorder("/dev/full")
    log = tmp_path / "child.log"
    async with proxied(child("echo_rpc.py"), env={"ECHO_RPC_LOG": str(log), "ECHO_RPC_QUIET": "1"}, recorder=rec) as c:
        await c.send(b'{"id":1,"method":"a"}\n{"id":2,"method":"b"}\n')
        got = await c.wait_lines(2)
    assert rec.enabled is False
    assert [json.loads(l)["id"] for l in got] == [1, 2]


def test_a_torn_last_record_is_skipped(tmp_path):
    path = tmp_path / "rec.jsonl"
    rec = Recorder(path)
    rec.record("client>codex", b'{"method":"a"}')
    rec.close()
    with open(path, "ab") as f:
        f.write(b'{"seq":2,"t":0.1,"dir":"client>codex","frame":{"meth')  # kill -9 mid-write
    entries = list(read_recording(path))
    assert [e.line() for e in entries] == [b'{"method":"a"}']


# ------------------------------------------------- held at start-up


async def test_while_the_sidecar_starts_only_initialize_goes_to_codex_and_the_rest_follows_in_order():
    """The relay runs before the lifecycle is in: codex's handshake passes,
    everything else waits for the hooks and then goes in the order it came."""
    async with proxied(child("echo_rpc.py"), env={"ECHO_RPC_QUIET": "1"}) as c:
        c.proxy.hold_client()
        await c.send(
            b'{"id":1,"method":"initialize","params":{}}\n{"method":"initialized"}\n'
            b'{"id":2,"method":"thread/start","params":{}}\n{"id":3,"method":"initialize","params":{}}\n'
        )
        (first,) = await c.wait_lines(1)
        await trio.sleep(0.2)
        assert json.loads(first)["id"] == 1 and len(c.lines) == 1, "nothing but initialize before the release"
        c.proxy.release_client()
        lines = await c.wait_lines(4)
    # The notification (echoed by the child) and the requests, in the order they came.
    assert [json.loads(line).get("id", json.loads(line).get("method")) for line in lines] == [1, "initialized", 2, 3]


async def test_holding_calls_back_at_the_first_held_line_not_at_initialize():
    """The CLI loads the lifecycle once someone waits for it: the first line
    held (not the handshake's ``initialize``), once."""
    async with proxied(child("echo_rpc.py"), env={"ECHO_RPC_QUIET": "1"}) as c:
        calls: list[int] = []
        c.proxy.hold_client(on_held=lambda: calls.append(len(c.lines)))
        await c.send(b'{"id":1,"method":"initialize","params":{}}\n')
        await c.wait_lines(1)
        await trio.sleep(0.1)
        assert calls == []
        await c.send(b'{"id":2,"method":"thread/start","params":{}}\n{"id":3,"method":"thread/list","params":{}}\n')
        await wait_until(lambda: calls, what="on_held")
        await trio.sleep(0.1)
        assert calls == [1]
        c.proxy.release_client()
        await c.wait_lines(3)


async def test_holding_calls_back_when_the_client_ends_while_held():
    """A client that only sends ``initialize`` and hangs up waits for the
    release too (what it sent goes to codex before its stdin closes)."""
    async with proxied(child("echo_rpc.py"), env={"ECHO_RPC_QUIET": "1"}) as c:
        held = trio.Event()
        c.proxy.hold_client(on_held=held.set)
        await c.send(b'{"id":1,"method":"initialize","params":{}}\n')
        await c.wait_lines(1)
        await c.close()
        with trio.fail_after(5):
            await held.wait()
        c.proxy.release_client()
        await c.wait_exit()


async def test_a_request_held_at_start_up_when_codex_dies_is_answered_not_delivered():
    async with proxied(child("crash_after.py", "1", "exit:0")) as c:
        c.proxy.hold_client()
        await c.send(b'{"id":1,"method":"initialize","params":{}}\n{"id":2,"method":"turn/start","params":{}}\n')
        await c.wait_exit()
        answers = {json.loads(line).get("id"): json.loads(line) for line in c.lines}
    assert answers[1]["error"]["code"] == OUTCOME_UNKNOWN  # codex had it
    assert answers[2]["error"]["code"] == CHILD_EXITED and answers[2]["error"]["data"]["outcome"] == "notDelivered"


async def test_a_client_that_writes_at_once_while_held_is_read_no_further_than_the_bound():
    """Held lines are memory: past ``HELD_BYTES`` the relay stops reading the
    client until the release (its writes wait on the pipe), then everything
    goes on, in order, nothing lost."""
    from sidecar.relay.hold import HELD_BYTES
    from sidecar.relay.pipes import READ_SIZE

    frame = b'{"method":"note","params":{"pad":"' + b"x" * 1000 + b'"}}\n'
    count = 4 * HELD_BYTES // len(frame)
    async with proxied(child("echo_rpc.py"), env={"ECHO_RPC_QUIET": "1"}) as c:
        c.proxy.hold_client()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(c.send, frame * count)
            await trio.sleep(0.5)
            held = c.proxy.held.parked_bytes
            assert 0 < held <= HELD_BYTES + READ_SIZE + len(frame), held
            c.proxy.release_client()
        lines = await c.wait_lines(count)
    assert len(lines) == count and all(line == frame.rstrip(b"\n") for line in lines)
