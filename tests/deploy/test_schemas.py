"""deploy/ against the schemas of its kinds: Kubernetes' own (strict, at the pinned versions of
tests/deploy/manifests.py) and KEDA's ScaledObject CRD (pinned in tests/deploy/schemas/)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.deploy.manifests import DEPLOY, Manifest, kustomization, load_manifests, manifest_files, schema_problems

MANIFESTS = load_manifests()


@pytest.mark.parametrize("manifest", MANIFESTS, ids=str)
def test_manifest_matches_its_schema(manifest: Manifest) -> None:
    assert schema_problems(manifest.doc) == []


def test_every_kind_is_checked() -> None:
    kinds = {m.kind for m in MANIFESTS}
    assert {"StatefulSet", "Deployment", "Service", "ConfigMap", "ScaledObject"} <= kinds


def test_kustomization_lists_every_manifest_and_nothing_else() -> None:
    listed = {str(DEPLOY / path) for path in kustomization()["resources"]}
    assert listed == {str(path) for path in manifest_files()}


def _container(doc: dict[str, Any]) -> dict[str, Any]:
    return dict(doc["spec"]["template"]["spec"]["containers"][0])


# A broken copy of a manifest must fail: each mutation is a mistake a hand edit could make.
BROKEN: dict[str, tuple[str, str, Callable[[dict[str, Any]], None]]] = {
    "replicas not a number": ("Deployment", "sift-gateway", lambda d: d["spec"].update(replicas="two")),
    "probe field misspelt": (
        "Deployment",
        "sift-gateway",
        lambda d: _container(d)["readinessProbe"]["httpGet"].update(paht="/readyz"),
    ),
    "grace as a duration string": (
        "Deployment",
        "sift-worker-minilm",
        lambda d: d["spec"]["template"]["spec"].update(terminationGracePeriodSeconds="35s"),
    ),
    "container field misspelt": (
        "StatefulSet",
        "nats",
        lambda d: d["spec"]["template"]["spec"]["containers"][0].update(images="nats"),
    ),
    "service port as text": ("Service", "nats", lambda d: d["spec"]["ports"][0].update(port="4222")),
    "scaledobject trigger without type": (
        "ScaledObject",
        "sift-worker-minilm",
        lambda d: d["spec"]["triggers"][0].pop("type"),
    ),
    "scaledobject negative minimum": (
        "ScaledObject",
        "sift-worker-minilm",
        lambda d: d["spec"].update(minReplicaCount=-1),
    ),
    "scaledobject unknown spec field": (
        "ScaledObject",
        "sift-worker-reranker",
        lambda d: d["spec"].update(cooldown=300),
    ),
    "scaledobject threshold as a number": (
        "ScaledObject",
        "sift-worker-reranker",
        lambda d: d["spec"]["triggers"][0]["metadata"].update(lagThreshold=16),
    ),
    "scaledobject no triggers": ("ScaledObject", "sift-worker-minilm", lambda d: d["spec"].update(triggers=[])),
    "scaledobject minimum above maximum": (
        "ScaledObject",
        "sift-worker-minilm",
        lambda d: d["spec"].update(minReplicaCount=9, maxReplicaCount=2),
    ),
    "unknown kind": ("ConfigMap", "sift-catalog", lambda d: d.update(kind="ConfigMapp")),
}


@pytest.mark.parametrize("mistake", sorted(BROKEN))
def test_a_broken_manifest_fails(mistake: str) -> None:
    kind, name, change = BROKEN[mistake]
    (original,) = [m for m in MANIFESTS if m.kind == kind and m.name == name]
    doc = copy.deepcopy(original.doc)
    change(doc)
    assert schema_problems(doc) != []
