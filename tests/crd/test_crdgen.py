"""The committed CRDs are what `python -m scheduler.controller.crdgen` generates, they
are structural, and their schemas validate what JobSpec/QueueSpec validate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from scheduler.controller import crdgen

from .schemas import crd_validator


@pytest.mark.parametrize("directory", crdgen.OUTPUT_DIRS, ids=lambda p: str(p.parent.name))
def test_committed_crds_are_fresh(directory: Path) -> None:
    for name, text in crdgen.render().items():
        path = directory / name
        assert path.exists(), f"{path} missing: run python -m scheduler.controller.crdgen"
        assert path.read_text() == text, f"{path} is stale: run python -m ...crdgen"


def _walk(node: Any, path: str = "") -> list[str]:
    """Structural-schema violations: every node has a type (or int-or-string /
    preserve-unknown-fields), and no $ref/anyOf/title/unsupported keyword survives."""
    bad: list[str] = []
    if isinstance(node, dict):
        for key in ("$ref", "$defs", "anyOf", "oneOf", "title", "const"):
            if key in node:
                bad.append(f"{path}: {key}")
        if not (
            {"type", "x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields"}
            & set(node)
        ):
            bad.append(f"{path}: no type")
        if "default" in node and node["default"] is None:
            bad.append(f"{path}: default null")
        for key, child in node.get("properties", {}).items():
            bad += _walk(child, f"{path}.{key}")
        if isinstance(node.get("items"), dict):
            bad += _walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            bad += _walk(node["additionalProperties"], f"{path}{{}}")
    return bad


@pytest.mark.parametrize(
    "crd", [crdgen.trainingjob_crd(), crdgen.queue_crd()], ids=["trainingjob", "queue"]
)
def test_structural(crd: dict[str, Any]) -> None:
    version = crd["spec"]["versions"][0]
    assert _walk(version["schema"]["openAPIV3Schema"]) == []
    assert version["subresources"] == {"status": {}}
    conditions = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"][
        "conditions"
    ]
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]


def test_names_and_columns() -> None:
    tj, q = crdgen.trainingjob_crd()["spec"], crdgen.queue_crd()["spec"]
    assert (tj["scope"], tj["names"]["shortNames"]) == ("Namespaced", ["tj"])
    assert (q["scope"], q["names"]["shortNames"]) == ("Cluster", ["sq"])
    tj_cols = [c["name"] for c in tj["versions"][0]["additionalPrinterColumns"]]
    assert {"Queue", "Workers", "GPUs", "Phase", "Age"} <= set(tj_cols)
    q_cols = [c["name"] for c in q["versions"][0]["additionalPrinterColumns"]]
    assert {"Guaranteed", "Limit", "Allocated", "FairShare", "Pending"} <= set(q_cols)
    assert (
        "name"
        not in tj["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    )


_TERM = {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a", "b"]}]}
_REQUIRED = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [_TERM]}}
_PREFERRED = {
    "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "preference": _TERM}]
}


@pytest.mark.parametrize(
    ("spec", "ok"),
    [
        ({"queue": "vision", "image": "x:1"}, True),
        ({"queue": "vision", "image": "x:1", "gpu": 0.5, "cpu": "500m"}, True),
        ({"queue": "vision", "image": "x:1", "cpu": 2}, True),
        ({"queue": "vision", "image": "x:1", "cpu": 0.5}, False),  # int-or-string
        ({"queue": "vision", "image": "x:1", "gpu": 0}, False),
        ({"queue": "vision", "image": "x:1", "gpu": -1}, False),
        ({"queue": "Vision", "image": "x:1"}, False),
        # `workers` is a count or {min, max}: no structural schema says that, so the API
        # server keeps it as given and Shoal's controller checks it (status Invalid).
        ({"queue": "vision", "image": "x:1", "workers": {"min": 2, "max": 4}}, True),
        ({"queue": "vision", "image": "x:1", "command": "python train.py"}, False),
        ({"queue": "vision", "image": "x:1", "framework": "jax"}, False),
        ({"queue": "vision", "image": "x:1", "unknown": 1}, False),
        ({"image": "x:1"}, False),
        # where the workers may run, in a pod's shapes (issue 24 item 1)
        ({"queue": "vision", "image": "x:1", "nodeSelector": {"pool": "a"}}, True),
        ({"queue": "vision", "image": "x:1", "nodeSelector": {"gpus": 8}}, False),
        ({"queue": "vision", "image": "x:1", "tolerations": [{"operator": "Exists"}]}, True),
        ({"queue": "vision", "image": "x:1", "tolerations": [{"effect": "Never"}]}, False),
        ({"queue": "vision", "image": "x:1", "affinity": {"nodeAffinity": _REQUIRED}}, True),
        ({"queue": "vision", "image": "x:1", "affinity": {"nodeAffinity": _PREFERRED}}, True),
        ({"queue": "vision", "image": "x:1", "affinity": {"podAffinity": {}}}, False),
    ],
)
def test_trainingjob_schema_validates(spec: dict[str, Any], ok: bool) -> None:
    validator = crd_validator(crdgen.trainingjob_crd())
    errors = list(validator.iter_errors(spec))
    assert (not errors) is ok, [e.message for e in errors]


def test_queue_schema_validates_per_model_quotas() -> None:
    validator = crd_validator(crdgen.queue_crd())
    validator.validate({"guaranteed": {"total": 8, "H100": 4}, "weight": 2})
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({"guaranteed": {"H100": -1}})
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({"weight": 0})


def test_committed_files_parse() -> None:
    for directory in crdgen.OUTPUT_DIRS:
        for path in directory.glob("*.yaml"):
            assert yaml.safe_load(path.read_text())["kind"] == "CustomResourceDefinition"
