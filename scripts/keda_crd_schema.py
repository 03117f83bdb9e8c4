"""Write the openAPIV3Schema of a KEDA CRD as the pinned test schema of tests/deploy.

    python scripts/keda_crd_schema.py CRD.yaml TAG COMMIT > tests/deploy/schemas/keda-scaledobject.yaml

CRD.yaml is config/crd/bases/keda.sh_scaledobjects.yaml of github.com/kedacore/keda at TAG
(Apache-2.0). Descriptions are dropped: the test needs the structure, not the prose."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml


def without_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: without_descriptions(value) for key, value in node.items() if key != "description"}
    if isinstance(node, list):
        return [without_descriptions(value) for value in node]
    return node


def main(argv: list[str]) -> int:
    crd_path, tag, commit = argv
    crd = yaml.safe_load(Path(crd_path).read_text(encoding="utf-8"))
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    header = (
        f"# openAPIV3Schema of KEDA's {crd['spec']['names']['kind']} CRD ({crd['spec']['group']}/{version['name']}),\n"
        f"# from github.com/kedacore/keda {tag} ({commit}),\n"
        "# config/crd/bases/keda.sh_scaledobjects.yaml; Apache-2.0. Descriptions removed.\n"
        "# Regenerate with scripts/keda_crd_schema.py.\n"
    )
    body = {
        "group": crd["spec"]["group"],
        "version": version["name"],
        "kind": crd["spec"]["names"]["kind"],
        "keda": tag,
        "openAPIV3Schema": without_descriptions(version["schema"]["openAPIV3Schema"]),
    }
    sys.stdout.write(header + yaml.safe_dump(body, sort_keys=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
