"""How the suite is split over xdist workers (tests/fixtures/parallel.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.fixtures import parallel
from tests.fixtures.parallel import (
    COMPAT_SERVERS,
    GENERATION_SERVERS,
    SHARED_SERVERS,
    UnitTimes,
    longest_units_first,
    unit_of,
)

TESTS = Path(__file__).parent

GROUPS = {"tests/b.py": "group:servers", "tests/d.py": "group:servers"}


def test_a_test_belongs_to_its_modules_group_else_its_module() -> None:
    assert unit_of("tests/e2e/test_encode.py::test_health_probes") == "group:e2e-servers"
    assert unit_of("tests/e2e/test_hybrid.py::test_listing_shows_sparse") == "group:e2e-servers"
    assert unit_of("tests/compat/test_sie_sdk_images.py::test_x") == "group:compat-servers"
    assert unit_of("tests/cluster/test_gateway.py::test_x") == "tests/cluster/test_gateway.py"
    assert unit_of("tests/a.py::Case::test_x[p::q]", GROUPS) == "tests/a.py"
    assert unit_of("tests/d.py::test_x", GROUPS) == "group:servers"


def test_every_module_of_a_package_with_shared_servers_is_in_its_group() -> None:
    # Their servers are package-scoped: a module outside the group would start them a second time.
    for package, group in (("e2e", SHARED_SERVERS), ("compat", COMPAT_SERVERS), ("generation", GENERATION_SERVERS)):
        modules = sorted((TESTS / package).glob("test_*.py"))
        assert modules
        for module in modules:
            assert parallel.GROUPS.get(f"tests/{package}/{module.name}") == group, module


def test_units_go_longest_first_and_stay_together_in_their_order() -> None:
    nodeids = ["tests/a.py::one", "tests/b.py::one", "tests/c.py::one", "tests/a.py::two"]
    nodeids += ["tests/d.py::one", "tests/c.py::two", "tests/e.py::one"]
    seconds = {"tests/a.py": 5.0, "tests/b.py": 4.0, "tests/c.py": 30.0, "tests/d.py": 3.0}
    order = longest_units_first(nodeids, seconds, GROUPS)
    # c (30 s), the group (b + d = 7 s, never measured as a group), a (5 s), e (never measured).
    assert [nodeids[i] for i in order] == [
        "tests/c.py::one",
        "tests/c.py::two",
        "tests/b.py::one",
        "tests/d.py::one",
        "tests/a.py::one",
        "tests/a.py::two",
        "tests/e.py::one",
    ]


def test_a_measured_group_uses_its_own_figure() -> None:
    nodeids = ["tests/a.py::one", "tests/b.py::one"]
    order = longest_units_first(nodeids, {"tests/a.py": 5.0, "tests/b.py": 1.0, "group:servers": 9.0}, GROUPS)
    assert order == [1, 0]


@dataclass
class FakeReport:
    nodeid: str
    duration: float


class FakeCache:
    def __init__(self, stored: dict[str, object]) -> None:
        self.stored = stored

    def get(self, key: str, default: object) -> object:
        return self.stored.get(key, default)

    def set(self, key: str, value: object) -> None:
        self.stored[key] = value


@dataclass
class FakeConfig:
    cache: FakeCache


def test_unit_times_add_up_and_merge_into_the_cache() -> None:
    times = UnitTimes()
    reports = [("tests/a.py::one", 1.0), ("tests/a.py::two", 2.5)]
    reports += [("tests/e2e/test_encode.py::test_x", 4.0), ("tests/e2e/test_bad_input.py::test_y", 0.5)]
    for nodeid, duration in reports:
        times.add(FakeReport(nodeid, duration))  # type: ignore[arg-type]
    cache = FakeCache({"sift/unit-seconds": {"tests/a.py": 9.0, "tests/old.py": 2.0}})
    times.store(FakeConfig(cache))  # type: ignore[arg-type]
    assert cache.stored["sift/unit-seconds"] == {"tests/a.py": 3.5, "tests/old.py": 2.0, "group:e2e-servers": 4.5}
