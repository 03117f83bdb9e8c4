"""A closed loop that stops: once answers go out and nobody comes back, the return
model expects no returns until the loop is back (pure model, times passed in)."""

from __future__ import annotations

from sift_server.engine.returns import ReturnModel

MS = 0.001
FORWARD = 50 * MS


def wave(model: ReturnModel, end: float, size: int, returns: int) -> float:
    """A forward of ``size`` ends at ``end``; ``returns`` of its clients come back 2 ms
    later, 0.1 ms apart. Returns when the next forward would end."""
    model.forward_ended(end, size, FORWARD)
    for i in range(returns):
        model.observe(end + 2 * MS + i * 0.1 * MS)
    return end + FORWARD + 3 * MS


def test_answers_nobody_comes_back_to_stop_the_hold_until_the_loop_is_back() -> None:
    model = ReturnModel()
    t = 0.0
    for _ in range(6):
        t = wave(model, t, 8, 8)
    assert model.reliable and model.returning
    model.forward_ended(t, 8, FORWARD)
    assert model.expected(t + 1 * MS) == 8  # a closed loop: its clients are due back

    # The loop ends: that wave's clients never come back.
    t += 30 * MS
    # Independent users, one or two per forward: too few to judge a wave by...
    model.forward_ended(t, 1, FORWARD)
    assert model.stopped and model.reliable and not model.returning
    # ... so what the loop taught stays, but nobody is expected back.
    assert model.expected(t + 1 * MS) == 0 and model.missing(t + 1 * MS) == 0
    assert not model.back(t + 1 * MS)

    # A few users that happen to arrive soon after a forward do not restart it, even as a whole wave.
    t = wave(model, t + 30 * MS, 5, 5)
    model.forward_ended(t, 8, FORWARD)
    assert model.returned_run == 1 and model.stopped
    assert model.expected(t + 1 * MS) == 0
    # Two waves in a row came back (a straggler allowed: 7 of 8): the loop is back.
    for i in range(7):
        model.observe(t + 2 * MS + i * 0.1 * MS)
    t += FORWARD + 3 * MS
    model.forward_ended(t, 8, FORWARD)
    assert model.returned_run == 2 and not model.stopped
    assert model.expected(t + 1 * MS) == 8


def test_returns_too_few_to_be_the_loop_do_not_restart_it() -> None:
    model = ReturnModel()
    t = 0.0
    for _ in range(6):
        t = wave(model, t, 8, 8)
    model.forward_ended(t, 8, FORWARD)
    t += 30 * MS
    model.forward_ended(t, 1, FORWARD)
    assert model.stopped
    for _ in range(4):
        t = wave(model, t + 30 * MS, 8, 5)  # five of eight: not a loop coming back
    assert model.stopped and model.returned_run == 0


def test_a_loop_that_keeps_coming_back_never_stops() -> None:
    model = ReturnModel()
    t = 0.0
    for _ in range(40):
        t = wave(model, t, 8, 8)
        assert not model.stopped
    # Part of a wave missing is no stop: someone came back.
    t = wave(model, t, 8, 5)
    t = wave(model, t, 8, 8)
    assert not model.stopped and model.returning
