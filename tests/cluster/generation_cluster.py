"""A cluster (nats-server, a gateway, one worker) serving the tiny generator
(tests/fixtures/tiny_generator.py), for the generation-through-the-queue tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sift_server.cluster.local import LocalCluster
from tests.cluster.conftest import add_worker, start_cluster, wait_workers
from tests.cluster.slow_generator import SLOW_GENERATOR_ADAPTER
from tests.fixtures.tiny_generator import TINY_GENERATOR, build_tiny_generator, catalog_entry, export_openvino

WORKER = "w-gen"
CAP = 200  # the most new tokens one answer may ask for (the context is 256)
# The same model through the paced test adapter (tests/cluster/slow_generator.py): 200 tokens take 4 s or more.
SLOW_GENERATOR = "tiny/slow-generator"
STEP_MS = 20


def generator_catalog(root: Path) -> tuple[Path, Path]:
    """The catalog folder serving the tiny generator (and its paced twin), and its
    Hugging Face folder; the twin's cancelled runs are written to ``root/cancelled``."""
    hf = build_tiny_generator(root / "hf")
    ov = export_openvino(hf, root / "ov")
    catalog = root / "catalog"
    catalog.mkdir()
    options = f"options:\n  max_new_tokens_cap: {CAP}\n"
    (catalog / "generator.yaml").write_text(catalog_entry(TINY_GENERATOR, ov, options))
    slow = catalog_entry(SLOW_GENERATOR, ov, f"{options}  step_ms: {STEP_MS}\n  marker: {root / 'cancelled'}\n")
    slow = slow.replace("adapter: openvino-genai", f"adapter: {SLOW_GENERATOR_ADAPTER}")
    (catalog / "slow-generator.yaml").write_text(slow)
    return catalog, hf


@contextmanager
def generation_cluster(root: Path, catalog: Path) -> Iterator[LocalCluster]:
    cluster = start_cluster(root / "cluster", 0, [], ["--catalog", str(catalog)])
    try:
        served = ["--model", TINY_GENERATOR, "--preload", SLOW_GENERATOR]
        add_worker(cluster, WORKER, ["--catalog", str(catalog), *served, "--torch-threads", "1"])
        wait_workers(cluster, TINY_GENERATOR, {WORKER})
        wait_workers(cluster, SLOW_GENERATOR, {WORKER})
        yield cluster
    finally:
        cluster.stop()
