"""Every route /openapi.json lists, fuzzed from its schema with Schemathesis, against a
real ``sift serve`` and a real gateway (nats-server, the gateway, one worker).

Generic over the document: new routes are fuzzed as soon as the document lists them. The
checks are Schemathesis's (the status is documented, the content type is, the body matches
its schema, the documented headers are there, a body the schema refuses is refused with a
4xx) plus one of ours in place of ``not_a_server_error``: no 5xx but the contract's 502
MODEL_LOAD_FAILED and 503s (an envelope with X-SIE-Error-Code). Half the cases name a model
the server serves, so the answers (not only the 404s) are checked too.

Bounded and repeatable: ``SIFT_FUZZ_EXAMPLES`` examples per operation (default 25) from a
derandomized Hypothesis; ``SIFT_FUZZ_EXAMPLES=500 pytest tests/fuzz`` is the long run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    ensure_resource_availability,
    ignored_auth,
    positive_data_acceptance,
    use_after_free,
)

from sift_server.cluster.local import LocalCluster
from tests.cluster.conftest import add_worker, start_cluster, wait_workers
from tests.e2e.tiny_tasks import NER, RERANK, SPARSE, catalog_entry
from tests.fixtures.server_process import ServerProcess, start_server
from tests.fixtures.tiny_embedder import TINY_EMBEDDER, build_tiny_embedder, write_catalog_entry
from tests.fixtures.tiny_models import build_tiny_cross_encoder, build_tiny_gliner, build_tiny_sparse_encoder

CLI_CONFIG = Path(__file__).with_name("schemathesis.toml")
EXAMPLES = int(os.environ.get("SIFT_FUZZ_EXAMPLES", "25"))
CONTRACT_5XX = {502, 503}


def contract_errors_only(ctx: Any, response: schemathesis.Response, case: schemathesis.Case) -> bool | None:
    """No server error but the contract's: 502 MODEL_LOAD_FAILED and the 503s, each an envelope."""
    status = response.status_code
    if status >= 500 and not (status in CONTRACT_5XX and "x-sie-error-code" in response.headers):
        raise AssertionError(f"{case.method} {case.formatted_path}: {status} {response.text[:300]!r}")
    # /readyz's 503 is its documented "not ready", checked by status_code_conformance.
    return None


EXCLUDED = [
    not_a_server_error,  # replaced by contract_errors_only
    positive_data_acceptance,  # a body the schema allows may still be refused (an unknown model, empty items)
    ensure_resource_availability,  # stateful checks: these routes create nothing
    use_after_free,
    ignored_auth,
]


def served_model(body: Any, model: str) -> Any:
    if isinstance(body, dict) and "model" in body:
        return {**body, "model": model}
    return body


def cases(operation: Any) -> st.SearchStrategy[schemathesis.Case]:
    """Requests the schema allows and requests it refuses (which must get a 4xx)."""
    modes = (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE)
    return st.one_of(*(operation.as_strategy(generation_mode=mode) for mode in modes))


def fuzz(url: str, headers: dict[str, str] | None = None) -> list[str]:
    """Fuzz every operation of ``url``'s /openapi.json; the failures, one line each."""
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    listed = httpx.get(f"{url}/v1/models", headers=headers, timeout=30).json()["models"]
    # The loaded ones only: a catalog entry with no weights here would start a load that fails.
    models = [m["name"] for m in listed if m["loaded"]]
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10, [op.label for op in operations]
    for operation in operations:

        @given(case=cases(operation), use_served=st.booleans(), model=st.sampled_from(models))
        @settings(
            max_examples=EXAMPLES,
            derandomize=True,
            database=None,
            deadline=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        def run(case: schemathesis.Case, use_served: bool, model: str) -> None:
            if use_served:
                if "model" in (case.path_parameters or {}):
                    case.path_parameters = {**(case.path_parameters or {}), "model": model}
                case.body = served_model(case.body, model)
            # JSON answers, so that their schema is checked (MessagePack's arrays are nd-maps).
            sent = {"Accept": "application/json", **(headers or {}), **(case.headers or {})}
            case.call_and_validate(
                base_url=url,
                headers=sent,
                excluded_checks=EXCLUDED,
                additional_checks=[contract_errors_only],
                timeout=60,
            )

        try:
            statuses = {sent_example(operation, url, model, headers) for model in models}
            # Some served model does the example's task, so its answer was checked too.
            assert statuses in ({None}, statuses | {200}), f"no 200 for the example: {statuses}"
            run()
        except Exception as error:  # every operation's failure is reported, not only the first
            failures.append(f"{operation.label}: {error}")
    return failures


def sent_example(operation: Any, url: str, model: str, headers: dict[str, str] | None) -> int | None:
    """The operation's documented request example, for a served model: its status (None: no example)."""
    content = (operation.definition.raw.get("requestBody") or {}).get("content", {}).get("application/json", {})
    if "example" not in content:
        return None
    path = {"model": model} if "{model}" in operation.path else None
    case = operation.Case(
        body=served_model(content["example"], model), path_parameters=path, media_type="application/json"
    )
    response = case.call_and_validate(
        base_url=url,
        headers={"Accept": "application/json", **(headers or {})},
        excluded_checks=EXCLUDED,
        additional_checks=[contract_errors_only],
        timeout=60,
    )
    assert response.status_code < 500, response.text
    return response.status_code


def coverage_phase(url: str) -> None:
    """Schemathesis's own runner, its coverage phase only (boundary values, missing and
    wrong content types, other methods: what case-by-case generation does not make),
    with the checks and seed of tests/fuzz/schemathesis.toml."""
    cli = Path(sys.executable).with_name("schemathesis")
    command = [str(cli), "--config-file", str(CLI_CONFIG), "run", f"{url}/openapi.json", "--phases", "coverage"]
    done = subprocess.run(
        [*command, "-H", "Accept: application/json"], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fuzz")
    catalog = root / "catalog"
    write_catalog_entry(catalog, build_tiny_embedder(root / "tiny"))
    # A model for each task, so that the documented examples get answers to check.
    entries = {
        "splade": catalog_entry(SPARSE, "sparse-encoder", build_tiny_sparse_encoder(root / "splade"), "encode"),
        "reranker": catalog_entry(RERANK, "cross-encoder", build_tiny_cross_encoder(root / "reranker"), "score"),
        "gliner": catalog_entry(NER, "gliner", build_tiny_gliner(root / "gliner"), "extract", {"threshold": 0.3}),
    }
    for name, text in entries.items():
        (catalog / f"{name}.yaml").write_text(text)
    return catalog


PRELOAD = [arg for name in (SPARSE, RERANK, NER) for arg in ("--preload", name)]


@pytest.fixture(scope="module")
def served(catalog: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("fuzz-serve")
    proc = start_server(["--catalog", str(catalog), "--model", TINY_EMBEDDER, *PRELOAD], root / "server.log")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def gateway(catalog: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = tmp_path_factory.mktemp("fuzz-gw")
    # A catalog model no worker serves is held until the request timeout (scale from zero):
    # a short one answers it with the contract's 503 well within the fuzzer's own timeout.
    gateway_args = ["--catalog", str(catalog), "--model", TINY_EMBEDDER, "--request-timeout-s", "2"]
    cluster = start_cluster(root / "cluster", 0, [], gateway_args)
    try:
        add_worker(
            cluster,
            "w-fuzz",
            ["--catalog", str(catalog), "--no-calibrate", "--torch-threads", "1", "--model", TINY_EMBEDDER, *PRELOAD],
        )
        for model in (TINY_EMBEDDER, SPARSE, RERANK, NER):
            wait_workers(cluster, model, {"w-fuzz"})
        yield cluster
    finally:
        cluster.stop()


def test_sift_serve_answers_every_fuzzed_request_by_its_schema(served: ServerProcess) -> None:
    failures = fuzz(served.url)
    assert not failures, "\n\n".join(failures)


def test_sift_serve_passes_the_coverage_phase(served: ServerProcess) -> None:
    coverage_phase(served.url)


def test_the_gateway_answers_every_fuzzed_request_by_its_schema(gateway: LocalCluster) -> None:
    failures = fuzz(gateway.url)
    assert not failures, "\n\n".join(failures)


def test_the_gateway_passes_the_coverage_phase(gateway: LocalCluster) -> None:
    coverage_phase(gateway.url)
