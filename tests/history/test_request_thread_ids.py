"""The edge maps a decoded request's thread ids as it maps them in bytes.

A request a hook decoded is mapped on its params (``map_thread_ids``) and
encoded once with its other changes; one nobody decoded is mapped on its
bytes (``BackingThreads.to_codex``). Both must give Codex the same request.
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.history.backing import BackingThreads, map_thread_ids
from sidecar.methods import METHODS
from sidecar.rows import thread_id_keys

CLIENT = "11111111-1111-4111-8111-111111111111"
BACKING = "22222222-2222-4222-8222-222222222222"
OTHER = "33333333-3333-4333-8333-333333333333"

keys = st.sampled_from([*thread_id_keys(METHODS), "text", "name", "items", "input"])
leaves = st.one_of(st.sampled_from([CLIENT, OTHER, "t", CLIENT + " in text"]), st.integers(), st.none(), st.booleans())
values = st.recursive(leaves, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=5)), max_leaves=20)


def switched(tmp_path) -> BackingThreads:
    backing = BackingThreads(tmp_path, thread_id_keys(METHODS))
    backing.remember_start(CLIENT, {})
    backing.note_spare(CLIENT, BACKING)
    backing.switch(CLIENT)
    return backing


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(keys, values, max_size=6))
def test_decoded_params_are_mapped_as_their_bytes_are(tmp_path_factory, params):
    backing = switched(tmp_path_factory.mktemp("backing"))
    before = json.dumps(params)
    line = json.dumps({"id": 1, "method": "turn/start", "params": params}, separators=(",", ":")).encode()
    by_bytes = json.loads(backing.to_codex(line))["params"]
    mapped = backing.request_params(params)
    assert mapped == by_bytes
    assert json.dumps(params) == before, "the client's params are never modified"
    assert (mapped is params) == (by_bytes == params), "unchanged params come back as themselves"


def test_a_request_about_a_thread_never_switched_is_left_as_it_is(tmp_path):
    backing = BackingThreads(tmp_path, thread_id_keys(METHODS))
    params = {"threadId": CLIENT, "input": []}
    assert backing.request_params(params) is params
    assert map_thread_ids(params, {OTHER: BACKING}, frozenset(thread_id_keys(METHODS))) is params
