"""Every custom resource in deploy/examples/ is valid the three ways it will be checked:
by the API server (the generated CRD schema, and ObjectMeta through kubernetes-validate),
by the shared pydantic specs, and by the controller, which accepts it for submission."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from scheduler.controller import crdgen, reconcile

from .schemas import crd_validator

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"
RAW = [
    (path.name, doc)
    for path in sorted(EXAMPLES.glob("*.yaml"))
    for doc in yaml.safe_load_all(path.read_text())
    if doc
]
DOCS = [pytest.param(doc, id=f"{name}:{doc['metadata']['name']}") for name, doc in RAW]
CRDS = {"TrainingJob": crdgen.trainingjob_crd(), "Queue": crdgen.queue_crd()}


def test_examples_cover_the_brief() -> None:
    kinds = [doc["kind"] for _, doc in RAW]
    specs = [doc["spec"] for _, doc in RAW]
    assert kinds.count("Queue") >= 3
    assert any(s.get("parent") for s in specs)
    assert any(len(s.get("guaranteed", {})) > 1 for s in specs)  # per-model guarantees
    frameworks = {s.get("framework") for s in specs}
    assert {"pytorch", "tensorflow"} <= frameworks
    assert any(s.get("gpu") == 0.25 for s in specs)
    assert any("gpuMemory" in s for s in specs)
    assert any({"nodeSelector", "affinity", "tolerations"} <= set(s) for s in specs)


@pytest.mark.parametrize("doc", DOCS)
def test_example_is_valid(doc: dict[str, Any]) -> None:
    assert doc["apiVersion"] == f"{crdgen.GROUP}/{crdgen.VERSION}"
    crd = CRDS[doc["kind"]]
    crd_validator(crd).validate(doc["spec"])
    namespaced = crd["spec"]["scope"] == "Namespaced"
    assert ("namespace" in doc["metadata"]) is namespaced
    # kubernetes-validate knows no custom kinds, so check the metadata as a ConfigMap's.
    kubernetes_validate.validate(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": doc["metadata"]}, "1.30.0", True
    )
    if doc["kind"] == "TrainingJob":
        reconcile.job_spec_of(doc)
        decision = reconcile.reconcile_trainingjob(doc, None)
        assert isinstance(decision.action, reconcile.Submit), decision.status
    else:
        reconcile.queue_spec_of(doc)
        decision = reconcile.reconcile_queue(doc, None)
        assert isinstance(decision.action, reconcile.UpsertQueue), decision.status
    assert decision.status["conditions"][0] == reconcile.condition("Valid", True, "Accepted")
