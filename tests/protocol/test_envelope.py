import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import IdSpace, InvalidMessage, Kind, encode_error, encode_request, parse
from protocol.jsonrpc import PREFIX


@pytest.mark.parametrize(
    "line, kind",
    [
        (b'{"id":1,"method":"turn/start","params":{"threadId":"t"}}', Kind.REQUEST),
        (b'{"method":"turn/started","params":{}}', Kind.NOTIFICATION),
        (b'{"id":"abc","result":{}}', Kind.RESPONSE),
        (b'{"id":1,"result":null}', Kind.RESPONSE),
        (b'{"id":null,"error":{"code":-32700,"message":"x"}}', Kind.ERROR),
        (b'{"id":7,"method":"item/tool/call","params":{}}', Kind.REQUEST),
        (b'{"id":1.5,"result":{}}', Kind.RESPONSE),
    ],
)
def test_parse_tells_requests_notifications_responses_and_errors_apart(line, kind):
    assert parse(line).kind is kind


@pytest.mark.parametrize(
    "line",
    [
        b"not json SECRET",
        b'["SECRET",2]',
        b'{"params":{"t":"SECRET"}}',
        b'{"id":1,"note":"SECRET"}',
        b'"SECRET"',
        b'\xff\xfe{"SECRET":1}',
        b'{"id":{"SECRET":1},"result":1}',
        b'{"id":1,"result":"SECRET"',
    ],
)
def test_invalid_shapes_are_refused_without_quoting_content(line):
    with pytest.raises(InvalidMessage) as exc:
        parse(line)
    assert "SECRET" not in str(exc.value)


@given(st.one_of(st.integers(), st.text(), st.none()))
def test_encoders_roundtrip_any_id(rpc_id):
    req = parse(encode_request(rpc_id, "m", {"a": 1}))
    assert req.id == rpc_id and req.method == "m" and req.kind is Kind.REQUEST
    err = parse(encode_error(rpc_id, -1, "boom", {"d": 1}))
    assert err.id == rpc_id and err.kind is Kind.ERROR


def test_id_space_never_hands_out_a_client_visible_id_twice():
    ids = IdSpace()
    internal = {ids.new_internal() for _ in range(100)}
    aliases = {ids.alias_client_id(f"{PREFIX}{n}") for n in range(100)}
    assert len(internal) == 100 and len(aliases) == 100 and not internal & aliases
    assert all(IdSpace.is_reserved(i) for i in internal | aliases)
    a = next(iter(aliases))
    assert ids.is_alias(a)
    original = ids.resolve_alias(a)
    assert original.startswith(PREFIX) and not ids.is_alias(a)
    assert not IdSpace.is_reserved(1) and not IdSpace.is_reserved("1")


def test_envelope_keeps_params_raw():
    env = parse(b'{"id":1,"method":"m","params":{"b":2,"a":1}}')
    assert bytes(env.params) == b'{"b":2,"a":1}'
    assert isinstance(env.params, msgspec.Raw)
