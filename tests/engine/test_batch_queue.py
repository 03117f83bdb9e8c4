from sift_server.engine.batch_queue import BatchQueue, Caps, Pending


def pending(rid: str, *costs: int, arrival: float = 0.0, key: object = None) -> Pending:
    return Pending(rid, list(costs), arrival, key)


def test_take_whole_requests_in_cost_order_head_first() -> None:
    queue = BatchQueue("default")
    queue.add(pending("a", 30))
    queue.add(pending("b", 5))
    queue.add(pending("c", 10, 10))
    slices = queue.take(Caps())
    assert sorted(s.pending.request_id for s in slices) == ["a", "b", "c"]
    # Inside the forward, cheap requests first (similar lengths pad together).
    assert [s.cost for s in slices] == [5, 20, 30]
    assert all(s.is_last for s in slices)
    assert len(queue) == 0


def test_request_cap_counts_requests_not_items() -> None:
    queue = BatchQueue("default")
    for i in range(5):
        queue.add(pending(f"r{i}", 1, 1, 1, arrival=i))
    slices = queue.take(Caps(max_requests=3))
    assert len(slices) == 3
    assert sum(s.stop - s.start for s in slices) == 9
    # The head always goes; equal costs keep arrival order for the rest.
    assert sorted(s.pending.request_id for s in slices) == ["r0", "r1", "r2"]
    assert [p.request_id for p in queue.pending] == ["r3", "r4"]


def test_cost_cap_never_lets_a_newer_request_pass_an_older_one() -> None:
    queue = BatchQueue("default")
    queue.add(pending("head", 50))
    queue.add(pending("big", 60))
    queue.add(pending("small", 40))
    slices = queue.take(Caps(max_cost=100))
    assert {s.pending.request_id for s in slices} == {"head"}
    assert [p.request_id for p in queue.pending] == ["big", "small"]
    assert {s.pending.request_id for s in queue.take(Caps(max_cost=100))} == {"big", "small"}


def test_arrival_order_serves_every_request_within_its_position_in_forwards() -> None:
    # A request with k requests ahead of it runs in one of the next k + 1 forwards,
    # whatever the lengths around it (here: 1 long among many short ones).
    queue = BatchQueue("default")
    queue.add(pending("head", 10))
    queue.add(pending("long", 250))
    for i in range(20):
        queue.add(pending(f"s{i}", 10))
    forwards = 0
    while True:
        forwards += 1
        taken = {s.pending.request_id for s in queue.take(Caps(max_requests=4, max_cost=256))}
        if "long" in taken:
            break
    assert forwards <= 2


def test_oversized_single_item_runs_alone() -> None:
    queue = BatchQueue("default")
    queue.add(pending("huge", 500))
    queue.add(pending("tiny", 1))
    first = queue.take(Caps(max_cost=100))
    assert [(s.pending.request_id, s.start, s.stop) for s in first] == [("huge", 0, 1)]
    second = queue.take(Caps(max_cost=100))
    assert [s.pending.request_id for s in second] == ["tiny"]


def test_multi_item_request_split_only_when_it_alone_exceeds_the_cost_cap() -> None:
    queue = BatchQueue("default")
    queue.add(pending("long", 40, 40, 40, 40, 40))
    queue.add(pending("other", 10))
    parts = []
    while len(queue):
        parts.append([(s.pending.request_id, s.start, s.stop) for s in queue.take(Caps(max_cost=100))])
    # The split request finishes before anything else is served.
    assert parts == [[("long", 0, 2)], [("long", 2, 4)], [("long", 4, 5)], [("other", 0, 1)]]


def test_only_requests_compatible_with_the_head_fuse() -> None:
    queue = BatchQueue("default")
    queue.add(pending("a", 5, key=("person",)))
    queue.add(pending("b", 5, key=("city",)))
    queue.add(pending("c", 5, key=("person",)))
    assert {s.pending.request_id for s in queue.take(Caps())} == {"a", "c"}
    assert [s.pending.request_id for s in queue.take(Caps())] == ["b"]


def test_would_fill_counts_compatible_requests_and_cost() -> None:
    queue = BatchQueue("default")
    queue.add(pending("a", 60))
    assert not queue.would_fill(Caps(max_requests=2, max_cost=100))
    queue.add(pending("b", 60))
    assert queue.would_fill(Caps(max_requests=2, max_cost=1000))
    assert queue.would_fill(Caps(max_requests=10, max_cost=100))


def test_remove_drops_a_split_request_with_its_remaining_items() -> None:
    # A request split across forwards whose client left (or whose first slice
    # failed) must not run its remaining slices.
    queue = BatchQueue("default")
    queue.add(pending("a", 40, 40))
    queue.add(pending("b", 1))
    queue.take(Caps(max_cost=50))  # starts "a"
    assert queue.remove("a") is not None
    assert [p.request_id for p in queue.pending] == ["b"]
    assert [s.pending.request_id for s in queue.take(Caps(max_cost=50))] == ["b"]


def test_total_items_counts_only_the_items_not_yet_taken() -> None:
    # The queue cap reads it on every admission: a split request counts its rest.
    queue = BatchQueue("default")
    assert queue.total_items == 0
    queue.add(pending("long", 40, 40, 40, 40, 40))
    queue.add(pending("other", 10, 10))
    assert queue.total_items == 7
    queue.take(Caps(max_cost=100))  # the first two items of "long"
    assert queue.total_items == 5
    queue.take(Caps(max_cost=100))
    assert queue.total_items == 3
