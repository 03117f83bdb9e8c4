"""The gateway's judgement of a streamed answer's pieces (cluster.streams; pure)."""

from __future__ import annotations

from sift_server.cluster.streams import ENDED_DONE, ENDED_FAILED, SILENT_S, StreamOrder, Verdict


def test_pieces_in_order_then_the_end() -> None:
    order = StreamOrder("run-a", heard=0.0)
    assert order.judge("run-a", 1, None, 0.1) is Verdict.CHUNK
    assert order.judge("run-a", 2, None, 0.2) is Verdict.CHUNK
    assert order.judge("run-a", 3, ENDED_DONE, 0.3) is Verdict.DONE


def test_a_missing_piece_is_a_gap() -> None:
    order = StreamOrder("run-a", heard=0.0)
    assert order.judge("run-a", 1, None, 0.1) is Verdict.CHUNK
    assert order.judge("run-a", 3, None, 0.2) is Verdict.GAP
    # A lost end is a gap as well, never a complete answer.
    order = StreamOrder("run-a", heard=0.0)
    assert order.judge("run-a", 2, ENDED_DONE, 0.1) is Verdict.GAP


def test_a_worker_that_broke_off_says_so() -> None:
    order = StreamOrder("run-a", heard=0.0)
    assert order.judge("run-a", 1, ENDED_FAILED, 0.1) is Verdict.FAILED


def test_another_run_of_the_request_is_not_relayed() -> None:
    order = StreamOrder("run-a", heard=0.0)
    assert order.judge("run-b", 1, None, 0.1) is Verdict.OTHER_RUN
    assert order.judge("run-b", None, None, 0.1) is Verdict.OTHER_RUN
    assert order.next_seq == 1 and order.heard == 0.0  # it changed nothing of this run


def test_silence_is_judged_from_the_last_piece_or_tick() -> None:
    order = StreamOrder("run-a", heard=0.0)
    assert not order.silent(SILENT_S)
    assert order.silent(SILENT_S + 0.1)
    assert order.judge("run-a", None, None, 10.0) is Verdict.TICK
    assert order.next_seq == 1  # a tick is no piece
    assert not order.silent(10.0 + SILENT_S)
    assert order.silent(10.0 + SILENT_S + 0.1)
    order.judge("run-a", 1, None, 20.0)
    assert not order.silent(20.0 + SILENT_S)
