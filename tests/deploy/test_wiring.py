"""deploy/ agrees with Sift: real flags (parsed by `sift`'s own parser), the stream and each
model's durable consumer (cluster/subjects.py), the ports and probes, the grace periods, the
catalog (loaded by Sift's catalog code), and a nats.conf that nats-server accepts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from sift_server.processes import nats_server_binary
from tests.deploy.manifests import containers, load_manifests, mutated, nats_conf_problems, wiring_problems

MANIFESTS = load_manifests()


def test_manifests_agree_with_sift() -> None:
    assert wiring_problems(MANIFESTS) == []


def test_nats_server_accepts_the_config() -> None:
    assert nats_conf_problems(MANIFESTS, nats_server_binary()) == []


def test_nats_server_refuses_a_broken_config() -> None:
    def misspell(doc: dict[str, Any]) -> None:
        doc["data"]["nats.conf"] = doc["data"]["nats.conf"].replace("http_port", "http_prot")

    broken = mutated(MANIFESTS, "ConfigMap", "nats-config", misspell)
    assert nats_conf_problems(broken, nats_server_binary()) != []


def _args(doc: dict[str, Any]) -> list[str]:
    return list(doc["spec"]["template"]["spec"]["containers"][0]["args"])


def _trigger(doc: dict[str, Any]) -> dict[str, Any]:
    return dict(doc["spec"]["triggers"][0]["metadata"])


def _replace_arg(old: str, new: str) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        args = _args(doc)
        doc["spec"]["template"]["spec"]["containers"][0]["args"] = [new if a == old else a for a in args]

    return change


# Each is a mistake the schemas cannot see; the wiring check must.
MISWIRED: dict[str, tuple[str, str, Callable[[dict[str, Any]], None]]] = {
    "consumer of another model": (
        "ScaledObject",
        "sift-worker-minilm",
        lambda d: d["spec"]["triggers"][0]["metadata"].update(consumer="sift-local_2Fms-marco-MiniLM-L-6-v2"),
    ),
    "consumer named by the subject token": (
        "ScaledObject",
        "sift-worker-minilm",
        lambda d: d["spec"]["triggers"][0]["metadata"].update(consumer="sift-sentence-transformers=2Fall-MiniLM-L6-v2"),
    ),
    "another stream": (
        "ScaledObject",
        "sift-worker-minilm",
        lambda d: d["spec"]["triggers"][0]["metadata"].update(stream="SIFT"),
    ),
    "trigger field misspelt": (
        "ScaledObject",
        "sift-worker-reranker",
        lambda d: d["spec"]["triggers"][0]["metadata"].update(lagTreshold="16"),
    ),
    "monitoring on the client port": (
        "ScaledObject",
        "sift-worker-reranker",
        lambda d: d["spec"]["triggers"][0]["metadata"].update(
            natsServerMonitoringEndpoint="nats.sift.svc.cluster.local:4222"
        ),
    ),
    "monitoring in another namespace": (
        "ScaledObject",
        "sift-worker-reranker",
        lambda d: d["spec"]["triggers"][0]["metadata"].update(
            natsServerMonitoringEndpoint="nats.nats.svc.cluster.local:8222"
        ),
    ),
    "pool never sleeps": ("ScaledObject", "sift-worker-minilm", lambda d: d["spec"].update(minReplicaCount=1)),
    "scales a missing deployment": (
        "ScaledObject",
        "sift-worker-minilm",
        lambda d: d["spec"]["scaleTargetRef"].update(name="sift-worker-mini"),
    ),
    "worker flag that sift lacks": (
        "Deployment",
        "sift-worker-minilm",
        _replace_arg("--shutdown-grace-s=30", "--grace=30"),
    ),
    "worker serves a model its triggers miss": (
        "Deployment",
        "sift-worker-reranker",
        lambda d: containers_of(d)[0].update(args=[*_args(d), "--preload=sentence-transformers/all-MiniLM-L6-v2"]),
    ),
    "model not in the catalog": (
        "Deployment",
        "sift-worker-reranker",
        _replace_arg("--model=local/ms-marco-MiniLM-L-6-v2", "--model=local/ms-marco"),
    ),
    "grace longer than the pod's": (
        "Deployment",
        "sift-worker-minilm",
        _replace_arg("--shutdown-grace-s=30", "--shutdown-grace-s=60"),
    ),
    "gateway grace without the preStop sleep": (
        "Deployment",
        "sift-gateway",
        lambda d: d["spec"]["template"]["spec"].update(terminationGracePeriodSeconds=31),
    ),
    "readiness on the wrong path": (
        "Deployment",
        "sift-gateway",
        lambda d: containers_of(d)[0]["readinessProbe"]["httpGet"].update(path="/healthz"),
    ),
    "liveness on another port": (
        "Deployment",
        "sift-gateway",
        lambda d: containers_of(d)[0]["livenessProbe"]["httpGet"].update(port=9090),
    ),
    "gateway bound to loopback": ("Deployment", "sift-gateway", _replace_arg("--host=0.0.0.0", "--host=127.0.0.1")),
    "nats url to a missing service": (
        "Deployment",
        "sift-gateway",
        lambda d: containers_of(d)[0]["env"][0].update(value="nats://nats-client:4222"),
    ),
    "hub downloads allowed": (
        "Deployment",
        "sift-worker-minilm",
        lambda d: containers_of(d)[0].update(
            env=[e for e in containers_of(d)[0]["env"] if e["name"] != "HF_HUB_OFFLINE"]
        ),
    ),
    "more threads than cores": (
        "Deployment",
        "sift-worker-minilm",
        _replace_arg("--torch-threads=2", "--torch-threads=8"),
    ),
    "budget above the memory limit": (
        "Deployment",
        "sift-worker-minilm",
        _replace_arg("--memory-budget-mb=1536", "--memory-budget-mb=4096"),
    ),
    "replicas fixed on a scaled pool": ("Deployment", "sift-worker-reranker", lambda d: d["spec"].update(replicas=1)),
    "models volume not mounted": (
        "Deployment",
        "sift-worker-minilm",
        lambda d: containers_of(d)[0].update(
            volumeMounts=[m for m in containers_of(d)[0]["volumeMounts"] if m["name"] != "models"]
        ),
    ),
    "catalog entry with a bad field": (
        "ConfigMap",
        "sift-catalog",
        lambda d: d["data"].update(
            {"bad.yaml": "name: x\nadapter: bert\nsource: {path: /models/x}\ntasks: [encode]\n"}
        ),
    ),
}


def containers_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return list(doc["spec"]["template"]["spec"]["containers"])


@pytest.mark.parametrize("mistake", sorted(MISWIRED))
def test_a_miswired_manifest_fails(mistake: str) -> None:
    kind, name, change = MISWIRED[mistake]
    assert any(m.kind == kind and m.name == name for m in MANIFESTS)
    assert wiring_problems(mutated(MANIFESTS, kind, name, change)) != []


def test_every_worker_pool_has_a_sift_worker() -> None:
    workers = [m for m in MANIFESTS if m.kind == "Deployment" and containers(m)[0]["args"][0] == "worker"]
    assert len(workers) >= 2
