from sift_bench.simulate.old_rules import CostOrderQueue
from sift_server.engine.batch_queue import BatchQueue, Caps, Pending


def forwards_until_long_runs(queue: BatchQueue) -> int:
    for i in range(8):
        queue.add(Pending(f"old{i}", [20], 0.0))
    queue.add(Pending("long", [90], 0.0))
    for forward in range(1, 100):
        for i in range(4):  # new short requests keep arriving
            queue.add(Pending(f"new{forward}.{i}", [10], 0.0))
        if "long" in {s.pending.request_id for s in queue.take(Caps(max_requests=4))}:
            return forward
    raise AssertionError("never ran")


def test_cost_order_passes_a_long_request_over_again_and_again() -> None:
    # The earlier rule: cheaper, newer requests join each forward while a long
    # one waits to become the head; arrival order runs it in its turn.
    assert forwards_until_long_runs(BatchQueue("default")) == 3
    assert forwards_until_long_runs(CostOrderQueue("default")) == 9


def test_cost_order_skips_what_would_pass_the_cost_cap() -> None:
    queue = CostOrderQueue("default")
    for rid, cost in (("head", 50), ("big", 60), ("small", 40)):
        queue.add(Pending(rid, [cost], 0.0))
    assert {s.pending.request_id for s in queue.take(Caps(max_cost=100))} == {"head", "small"}
