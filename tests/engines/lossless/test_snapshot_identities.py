"""The identities of a growing snapshot are those of the whole snapshot,
whether the engine extends the last one or has to start over."""

from __future__ import annotations

from engines import UserMessage
from engines.lossless.messages import identities
from engines.lossless.snapshots import SnapshotIdentities

from .conftest import conversation


def test_a_grown_snapshot_gives_the_identities_of_the_whole():
    cache = SnapshotIdentities()
    history = conversation(4)
    assert cache.of("s", history[:5]) == identities(history[:5])
    assert cache.of("s", history) == identities(history)
    assert cache.of("s", history[:3]) == identities(history[:3])  # shorter: a prefix of the last


def test_equal_messages_count_their_occurrences_across_calls():
    cache = SnapshotIdentities()
    a, b = UserMessage(content="same", timestamp=1), UserMessage(content="same", timestamp=1)
    first = cache.of("s", [a])
    both = cache.of("s", [a, b])
    assert both == identities([a, b]) and both[0] == first[0] and both[1] != both[0]


def test_a_snapshot_that_differs_from_the_last_is_computed_whole():
    cache = SnapshotIdentities()
    history = conversation(3)
    cache.of("s", history)
    edited = [UserMessage(content="rewritten", timestamp=5), *history[1:]]
    assert cache.of("s", edited) == identities(edited)
    decoded_anew = [m.__copy__() if hasattr(m, "__copy__") else m for m in conversation(3)]
    assert cache.of("s", decoded_anew) == identities(history)


def test_sessions_keep_their_own_last_snapshot():
    cache = SnapshotIdentities()
    one, two = conversation(2), conversation(3)
    cache.of("one", one)
    assert cache.of("two", two) == identities(two)
    assert cache.of("one", [*one, *two[-1:]]) == identities([*one, *two[-1:]])


def test_identities_handed_out_stay_as_they_were_while_the_session_grows():
    cache = SnapshotIdentities()
    history = conversation(4)
    early = cache.of("s", history[:5])
    cache.of("s", history)  # extends the same cached list
    want = identities(history[:5])
    assert len(early) == 5 and list(early) == want and early == want
    assert list(reversed(early)) == want[::-1]
    assert early[1:3] == want[1:3] and early[-1] == want[-1] and early[3:] == want[3:]


def test_a_snapshot_decoded_anew_keeps_its_epoch_and_an_edited_one_does_not():
    cache = SnapshotIdentities()
    history = conversation(3)
    cache.of("s", history)
    epoch = cache.epoch("s")
    decoded_anew = [m.__copy__() if hasattr(m, "__copy__") else m for m in conversation(3)]
    grown = [*decoded_anew, *conversation(4)[len(history) :]]
    assert cache.of("s", grown) == identities(conversation(4))
    assert cache.epoch("s") == epoch  # equal messages: what was settled stays settled
    edited = list(grown)
    edited[2] = UserMessage(content="rewritten in the middle", timestamp=5)
    assert cache.of("s", edited) == identities(edited)  # the same length, the same objects around it
    assert cache.epoch("s") != epoch
