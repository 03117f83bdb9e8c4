"""Reading deploy/ and checking it: the schemas (Kubernetes built-in kinds, KEDA's ScaledObject)
and the wiring to Sift itself (flags, ports, subjects, consumer names, grace periods).

Every check returns a list of problems (empty: fine), so that the tests can show both that the
committed manifests pass and that a broken copy does not."""

from __future__ import annotations

import copy
import io
import re
import shlex
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import redirect_stderr
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import jsonschema
import kubernetes_validate
import yaml
from kubernetes_validate.utils import SchemaNotFoundError, VersionNotSupportedError

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KEDA_SCHEMA = Path(__file__).with_name("schemas") / "keda-scaledobject.yaml"

# The Kubernetes versions whose schemas (shipped by kubernetes-validate, pinned in
# requirements-dev.txt) every built-in object must satisfy: the oldest the manifests support
# (1.30: the preStop `sleep` action is on by default) and the newest the package ships.
KUBERNETES_VERSIONS = ("1.30", "1.37")

# Sift's processes are gone within --shutdown-grace-s plus this (docs/cluster.md, "Drains").
SIFT_EXIT_SLACK_S = 0.5

# The metadata of KEDA's nats-jetstream trigger (keda.sh/docs/2.20/scalers/nats-jetstream):
# what it may hold, and what these manifests always set.
JETSTREAM_TRIGGER = "nats-jetstream"
JETSTREAM_FIELDS = frozenset(
    {
        "natsServerMonitoringEndpoint",
        "account",
        "accountID",
        "stream",
        "consumer",
        "lagThreshold",
        "activationLagThreshold",
        "useHttps",
    }
)
JETSTREAM_REQUIRED = frozenset(
    {"natsServerMonitoringEndpoint", "account", "stream", "consumer", "lagThreshold", "activationLagThreshold"}
)


@dataclass(frozen=True)
class Manifest:
    path: Path
    doc: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.doc.get("kind"))

    @property
    def name(self) -> str:
        return str(self.doc.get("metadata", {}).get("name"))

    def __str__(self) -> str:
        return f"{self.path.relative_to(DEPLOY)}: {self.kind}/{self.name}"


def kustomization() -> dict[str, Any]:
    return dict(yaml.safe_load((DEPLOY / "kustomization.yaml").read_text(encoding="utf-8")))


def manifest_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*.yaml") if p.name != "kustomization.yaml")


def load_manifests() -> list[Manifest]:
    out = []
    for path in manifest_files():
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc:
                out.append(Manifest(path, doc))
    return out


# ---- schemas ---------------------------------------------------------------------------------


def _strict(schema: Any) -> Any:
    """The CRD schema as ``kubectl apply`` (strict field validation) reads it: an object that
    lists its properties takes no others, unless it says it keeps unknown fields."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _strict(value) for key, value in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def keda_schema() -> dict[str, Any]:
    pinned = yaml.safe_load(KEDA_SCHEMA.read_text(encoding="utf-8"))
    return dict(_strict(pinned["openAPIV3Schema"]))


def _where(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(top)"


def schema_problems(doc: dict[str, Any]) -> list[str]:
    """What the schema of the object's kind says is wrong with it."""
    if doc.get("apiVersion") == "keda.sh/v1alpha1" and doc.get("kind") == "ScaledObject":
        validator = jsonschema.Draft202012Validator(keda_schema())
        problems = [f"{_where(e)}: {e.message}" for e in validator.iter_errors(doc)]
        spec = doc.get("spec", {})
        # The CRD's one CEL rule (x-kubernetes-validations), which jsonschema does not read.
        if isinstance(spec, dict) and spec.get("minReplicaCount", 0) > spec.get("maxReplicaCount", 100):
            problems.append("spec: minReplicaCount must be less than or equal to maxReplicaCount")
        return problems
    problems = []
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            problems.append(f"Kubernetes {version}: {_where(e)}: {e.message}")
        except (SchemaNotFoundError, VersionNotSupportedError) as e:
            problems.append(f"Kubernetes {version}: {e.message}")
    return problems


# ---- the wiring to Sift ----------------------------------------------------------------------


def by_kind(manifests: Iterable[Manifest], kind: str) -> dict[str, Manifest]:
    return {m.name: m for m in manifests if m.kind == kind}


def containers(manifest: Manifest) -> list[dict[str, Any]]:
    return list(manifest.doc["spec"]["template"]["spec"]["containers"])


def sift_containers(manifests: Iterable[Manifest]) -> Iterator[tuple[Manifest, dict[str, Any]]]:
    for manifest in manifests:
        if manifest.kind in ("Deployment", "StatefulSet"):
            for container in containers(manifest):
                if container.get("command") == ["sift"]:
                    yield manifest, container


def parse_sift_args(argv: list[str]) -> tuple[Any, str | None]:
    """``sift``'s own parser over a container's args: (namespace, None) or (None, what is wrong)."""
    from sift_server.cli import parser_for

    parser = parser_for(argv)
    err = io.StringIO()
    try:
        with redirect_stderr(err):
            args, unknown = parser.parse_known_args(argv)
    except SystemExit:
        return None, f"sift {shlex.join(argv)}: {err.getvalue().strip().splitlines()[-1]}"
    if unknown:
        return None, f"sift {argv[0]}: unrecognized arguments: {' '.join(unknown)}"
    return args, None


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def quantity(text: str | int | float) -> float:
    """A Kubernetes quantity as a number (bytes, or cores)."""
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9, "m": 1e-3}
    match = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(text))
    if match is None or match.group(2) not in ("", *units):
        raise ValueError(f"not a quantity: {text!r}")
    return float(match.group(1)) * units.get(match.group(2), 1)


def _service_target(manifests: list[Manifest], host: str, port: int, namespace: str) -> tuple[Manifest, int] | str:
    """The workload and container port behind ``host:port`` (a Service of these manifests)."""
    labels = host.split(".")
    if len(labels) > 1 and labels[1] != namespace:
        return f"{host}: namespace {labels[1]!r} is not the kustomization's {namespace!r}"
    service = by_kind(manifests, "Service").get(labels[0])
    if service is None:
        return f"{host}: no Service {labels[0]!r} in deploy/"
    ports = [p for p in service.doc["spec"]["ports"] if p["port"] == port]
    if not ports:
        return f"{host}:{port}: Service {service.name} has no port {port}"
    target = ports[0].get("targetPort", port)
    selector = service.doc["spec"]["selector"]
    for workload in manifests:
        if workload.kind not in ("Deployment", "StatefulSet"):
            continue
        pod_labels = workload.doc["spec"]["template"]["metadata"]["labels"]
        if not all(pod_labels.get(k) == v for k, v in selector.items()):
            continue
        for container in containers(workload):
            for p in container.get("ports", []):
                if target in (p.get("name"), p["containerPort"]):
                    return workload, int(p["containerPort"])
    return f"{host}:{port}: no container port {target!r} behind Service {service.name}"


def nats_conf(manifests: list[Manifest]) -> dict[str, Any]:
    """The scalar settings at the top of nats.conf (``key: value`` lines)."""
    config = by_kind(manifests, "ConfigMap")["nats-config"].doc["data"]["nats.conf"]
    out: dict[str, Any] = {}
    for line in config.splitlines():
        match = re.fullmatch(r"(\w+):\s*(\S+)", line.strip())
        if match and not line.startswith((" ", "\t")):
            out[match.group(1)] = match.group(2)
    return out


def nats_conf_problems(manifests: list[Manifest], nats_server: str) -> list[str]:
    """``nats-server -t`` over the ConfigMap's nats.conf (its store folder moved to a temp one)."""
    config = by_kind(manifests, "ConfigMap")["nats-config"].doc["data"]["nats.conf"]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "nats.conf"
        path.write_text(re.sub(r"store_dir:\s*\S+", f"store_dir: {folder}", config), encoding="utf-8")
        done = subprocess.run(
            [nats_server, "-t", "-c", str(path)],
            env={"SERVER_NAME": "nats-0"},
            capture_output=True,
            text=True,
            timeout=30,
        )
    return [] if done.returncode == 0 else [f"nats.conf: {(done.stderr or done.stdout).strip()}"]


def catalog_specs(manifests: list[Manifest]) -> tuple[Any, list[str]]:
    """The catalog the pods see (shipped + the ConfigMap's entries), through Sift's own loader."""
    from sift_server.registry.catalog import Catalog, CatalogError

    entries = by_kind(manifests, "ConfigMap")["sift-catalog"].doc["data"]
    with tempfile.TemporaryDirectory() as folder:
        for name, text in entries.items():
            (Path(folder) / name).write_text(text, encoding="utf-8")
        try:
            return Catalog.from_dirs([Path(folder)], check_weights=False), []
        except CatalogError as exc:
            return None, [f"sift-catalog: {exc}"]


def wiring_problems(manifests: list[Manifest]) -> list[str]:
    """Everything in deploy/ that must agree with Sift's code and docs, or with itself."""
    from sift_server.cluster.subjects import STREAM, durable_name

    problems: list[str] = []
    namespace = kustomization()["namespace"]
    deployments = by_kind(manifests, "Deployment")
    catalog, catalog_errors = catalog_specs(manifests)
    problems += catalog_errors
    conf = nats_conf(manifests)

    for manifest, container in sift_containers(manifests):
        where = f"{manifest}, container {container['name']}"
        args, error = parse_sift_args(list(container.get("args", [])))
        if error:
            problems.append(f"{where}: {error}")
            continue
        env = env_of(container)
        if env.get("HF_HUB_OFFLINE") != "1":
            problems.append(f"{where}: HF_HUB_OFFLINE=1 missing (no hub downloads)")
        nats_url = urlparse(str(env.get("SIFT_NATS_URL", "")))
        if nats_url.scheme != "nats" or nats_url.hostname is None or nats_url.port is None:
            problems.append(f"{where}: SIFT_NATS_URL {nats_url.geturl()!r} is not nats://HOST:PORT")
        else:
            target = _service_target(manifests, nats_url.hostname, nats_url.port, namespace)
            if isinstance(target, str):
                problems.append(f"{where}: SIFT_NATS_URL: {target}")
            elif target[0].name != "nats" or str(target[1]) != conf.get("port"):
                problems.append(f"{where}: SIFT_NATS_URL reaches {target[0]} port {target[1]}, not NATS's client port")
        grace = args.shutdown_grace_s if args.shutdown_grace_s is not None else 30.0
        pod = manifest.doc["spec"]["template"]["spec"]
        pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
        needed = pre_stop + grace + SIFT_EXIT_SLACK_S
        if pod.get("terminationGracePeriodSeconds", 30) < needed:
            problems.append(
                f"{where}: terminationGracePeriodSeconds {pod.get('terminationGracePeriodSeconds', 30)} < "
                f"preStop {pre_stop} s + --shutdown-grace-s {grace:g} s + {SIFT_EXIT_SLACK_S} s"
            )
        mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
        for folder in args.catalog or []:
            if str(folder) not in mounts:
                problems.append(f"{where}: --catalog {folder} is not a mounted volume")
        if catalog is not None:
            for spec in catalog.specs.values():
                path = spec.source.path
                if path is not None and not any(Path(path).is_relative_to(m) for m in mounts):
                    problems.append(f"{where}: catalog entry {spec.name} reads {path}, which is not mounted")
        if args.command == "gateway":
            problems += _gateway_problems(where, container, args)
        elif args.command == "worker":
            problems += _worker_problems(where, container, args, catalog)
        else:
            problems.append(f"{where}: runs `sift {args.command}`, neither gateway nor worker")

    for scaled in by_kind(manifests, "ScaledObject").values():
        spec = scaled.doc["spec"]
        target = deployments.get(spec["scaleTargetRef"]["name"])
        if target is None or spec["scaleTargetRef"].get("kind", "Deployment") != "Deployment":
            problems.append(f"{scaled}: scales {spec['scaleTargetRef']}, not a Deployment in deploy/")
            continue
        if "replicas" in target.doc["spec"]:
            problems.append(f"{target}: sets replicas, which KEDA owns (re-applying would fight it)")
        if spec.get("minReplicaCount") != 0:
            problems.append(f"{scaled}: minReplicaCount is not 0 (a pool must be able to sleep)")
        if "cooldownPeriod" not in spec:
            problems.append(f"{scaled}: no cooldownPeriod")
        args, error = parse_sift_args(list(containers(target)[0].get("args", [])))
        models = [args.default_model, *(args.preload or [])] if args is not None else []
        consumers = set()
        for trigger in spec["triggers"]:
            meta = trigger.get("metadata", {})
            if trigger.get("type") != JETSTREAM_TRIGGER:
                problems.append(f"{scaled}: trigger type {trigger.get('type')!r}, not {JETSTREAM_TRIGGER}")
                continue
            if unknown := set(meta) - JETSTREAM_FIELDS:
                problems.append(f"{scaled}: {JETSTREAM_TRIGGER} has no field {sorted(unknown)}")
            if missing := JETSTREAM_REQUIRED - set(meta):
                problems.append(f"{scaled}: {JETSTREAM_TRIGGER} trigger lacks {sorted(missing)}")
            for key in ("lagThreshold", "activationLagThreshold"):
                if not str(meta.get(key, "")).isdigit():
                    problems.append(f"{scaled}: {key} {meta.get(key)!r} is not a whole number")
            if meta.get("stream") != STREAM:
                problems.append(f"{scaled}: stream {meta.get('stream')!r}, Sift's is {STREAM!r}")
            if meta.get("account") != "$G":
                problems.append(f"{scaled}: account {meta.get('account')!r}; NATS without accounts has '$G'")
            consumers.add(meta.get("consumer"))
            host, _, port = str(meta.get("natsServerMonitoringEndpoint", "")).rpartition(":")
            if not port.isdigit():
                problems.append(f"{scaled}: natsServerMonitoringEndpoint has no port")
                continue
            reached = _service_target(manifests, host, int(port), namespace)
            if isinstance(reached, str):
                problems.append(f"{scaled}: natsServerMonitoringEndpoint: {reached}")
            elif reached[0].name != "nats" or str(reached[1]) != conf.get("http_port"):
                problems.append(
                    f"{scaled}: natsServerMonitoringEndpoint reaches port {reached[1]} of {reached[0]}, "
                    f"not NATS's http_port {conf.get('http_port')}"
                )
        wanted = {durable_name(m) for m in models}
        if consumers != wanted:
            problems.append(
                f"{scaled}: triggers on consumers {sorted(map(str, consumers))}, but {target} serves "
                f"{models}, whose durable consumers are {sorted(wanted)}"
            )
    for name, deployment in deployments.items():
        if containers(deployment)[0].get("args", [""])[0] == "worker" and not any(
            s.doc["spec"]["scaleTargetRef"]["name"] == name for s in by_kind(manifests, "ScaledObject").values()
        ):
            problems.append(f"{deployment}: a worker pool without a ScaledObject")
    return problems


def _probe_problems(where: str, container: dict[str, Any], probe: str, path: str, port: int) -> list[str]:
    get = container.get(probe, {}).get("httpGet", {})
    ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
    at = ports.get(get.get("port"), get.get("port"))
    if get.get("path") != path or at != port:
        return [f"{where}: {probe} is {get.get('path')} on port {at}, not {path} on --port {port}"]
    return []


def _gateway_problems(where: str, container: dict[str, Any], args: Any) -> list[str]:
    port = args.port if args.port is not None else 8080
    problems = []
    if args.host not in ("0.0.0.0", "::"):
        problems.append(f"{where}: --host {args.host} is not reachable from outside the pod")
    problems += _probe_problems(where, container, "readinessProbe", "/readyz", port)
    problems += _probe_problems(where, container, "livenessProbe", "/livez", port)
    return problems


def _worker_problems(where: str, container: dict[str, Any], args: Any, catalog: Any) -> list[str]:
    problems = []
    requests = container.get("resources", {}).get("requests", {})
    limits = container.get("resources", {}).get("limits", {})
    if args.torch_threads is None or "cpu" not in requests:
        problems.append(f"{where}: set --torch-threads and a CPU request (the default counts the node's cores)")
    elif args.torch_threads > quantity(requests["cpu"]):
        problems.append(f"{where}: --torch-threads {args.torch_threads} exceeds the CPU request {requests['cpu']}")
    if args.memory_budget_mb is None or "memory" not in limits:
        problems.append(f"{where}: set --memory-budget-mb and a memory limit")
    elif args.memory_budget_mb * 2**20 >= quantity(limits["memory"]):
        problems.append(
            f"{where}: --memory-budget-mb {args.memory_budget_mb} does not fit the limit {limits['memory']}"
        )
    if catalog is not None:
        for model in [args.default_model, *(args.preload or [])]:
            if model is None or model not in catalog:
                problems.append(f"{where}: model {model!r} is not in the catalog the pod sees")
    return problems


def mutated(manifests: list[Manifest], kind: str, name: str, change: Any) -> list[Manifest]:
    """A deep copy of the manifests with ``change(doc)`` applied to one object."""
    out = []
    for m in manifests:
        doc = copy.deepcopy(m.doc)
        if m.kind == kind and m.name == name:
            change(doc)
        out.append(Manifest(m.path, doc))
    return out
