"""Suite-wide: nothing may reach a model hub; how the suite runs on two workers (tests/fixtures/parallel.py)."""

import os

import pytest

from tests.fixtures import parallel  # plain Python: nothing that reads the environment

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Servers and adapters under test run PyTorch fp32 (no probing) unless a test names a backend
# (tests/adapters/test_backends.py covers auto, ONNX Runtime and OpenVINO), and
# exported artifacts never land in the user's cache.
os.environ.setdefault("SIFT_BACKEND", "torch:fp32")
if "SIFT_CACHE_DIR" not in os.environ:
    import tempfile

    os.environ["SIFT_CACHE_DIR"] = tempfile.mkdtemp(prefix="sift-test-artifacts-")


class _UnitTimesPlugin:
    def __init__(self) -> None:
        self.times = parallel.UnitTimes()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.times.add(report)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.times.store(session.config)


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or a plain run) sees every report
        config.pluginmanager.register(_UnitTimesPlugin(), "sift-unit-times")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Only xdist workers reorder (all of them alike, from the same figures); a plain run keeps file order.
    if hasattr(config, "workerinput"):
        parallel.reorder(items, parallel.known_seconds(config))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    return parallel.make_scheduler(config, log) if config.getoption("dist") == "loadscope" else None
