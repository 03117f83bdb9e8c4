"""The Grafana dashboard (docs/grafana/sift.json) queries only metrics that a
running server exports on /metrics, with the labels it groups by."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sift_server.api.app import create_app
from sift_server.composition import build_state
from sift_server.config import Settings
from sift_server.registry.catalog import Catalog
from tests.fixtures.tiny_embedder import TINY_EMBEDDER, build_tiny_embedder, write_catalog_entry

DASHBOARD = Path(__file__).resolve().parents[1] / "docs" / "grafana" / "sift.json"
# Sift's metric names all start so; PromQL functions and label names never do.
METRIC = re.compile(r"\b((?:sie|sift|process)_[a-z0-9_]+)\b")
GROUPING = re.compile(r"\bby \(([^)]*)\)\s*\(\s*(?:rate\()?\s*((?:sie|sift|process)_[a-z0-9_]+)")


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    queries += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return queries


@pytest.fixture
async def scraped(tmp_path: Path) -> AsyncIterator[dict[str, set[str]]]:
    """Sample name -> label names, from /metrics of a server that answered an
    encode, an unknown model and a bad request."""
    catalog = tmp_path / "catalog"
    write_catalog_entry(catalog, build_tiny_embedder(tmp_path / "model"))
    settings = Settings(default_model=TINY_EMBEDDER, catalog=[catalog], torch_threads=1, calibrate=False)
    app = create_app(build_state(settings, catalog=Catalog.from_dirs([catalog], include_shipped=False)))
    transport = httpx.ASGITransport(app=app)
    async with app.lifespan(), httpx.AsyncClient(transport=transport, base_url="http://s") as client:
        ok = await client.post(f"/v1/encode/{TINY_EMBEDDER}", json={"items": [{"text": "hello"}, {"text": "x"}]})
        assert ok.status_code == 200, ok.text
        missing = await client.post("/v1/encode/no/such-model", json={"items": [{"text": "hello"}]})
        assert missing.status_code == 404
        text = (await client.get("/metrics")).text
    samples: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, set()).update(sample.labels)
    yield samples


def test_every_metric_the_dashboard_queries_is_exported(scraped: dict[str, set[str]]) -> None:
    queried = {name for query in dashboard_queries() for name in METRIC.findall(query)}
    assert len(queried) >= 10  # requests, errors, latency, queue, forwards, models, memory
    assert sorted(queried - set(scraped)) == []


def test_the_labels_it_groups_by_exist(scraped: dict[str, set[str]]) -> None:
    checked: list[Any] = []
    for query in dashboard_queries():
        for labels, name in GROUPING.findall(query):
            wanted = {label.strip() for label in labels.split(",")} - {"le"}
            assert wanted <= scraped[name], (name, wanted, scraped[name])
            checked.append(name)
    assert len(checked) >= 8


def test_panels_are_well_formed() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    graphs = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert graphs and all(p["targets"] and all(t["expr"].strip() for t in p["targets"]) for p in graphs)
