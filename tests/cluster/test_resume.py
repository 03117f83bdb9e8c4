"""The gateway's decision, after its NATS connection came back, for each request
published before the break (cluster.resume): wait while the stream holds its
message, else publish it again under a new message id, a bounded number of times."""

from __future__ import annotations

from sift_server.cluster.resume import MAX_REPUBLISHES, Resume, after_reconnect, republished_id


def test_a_message_the_stream_still_holds_is_waited_for() -> None:
    assert after_reconnect(stored=True, republished=0) is Resume.WAIT


def test_a_message_gone_from_the_stream_is_published_again() -> None:
    # Acknowledged by its worker while the gateway was away: the reply went to nobody.
    assert after_reconnect(stored=False, republished=0) is Resume.REPUBLISH


def test_when_the_stream_cannot_be_asked_the_request_waits_for_the_next_reconnect() -> None:
    assert after_reconnect(stored=None, republished=0) is Resume.WAIT


def test_republishes_are_bounded() -> None:
    assert after_reconnect(stored=False, republished=MAX_REPUBLISHES - 1) is Resume.REPUBLISH
    assert after_reconnect(stored=False, republished=MAX_REPUBLISHES) is Resume.WAIT


def test_a_republish_has_a_new_message_id_derived_from_the_request() -> None:
    # The stream drops a publish whose id it saw within its duplicate window.
    ids = {republished_id("abc", n) for n in range(1, 4)}
    assert len(ids) == 3 and all(i.startswith("abc") and i != "abc" for i in ids)
