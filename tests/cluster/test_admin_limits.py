"""Admins' limits on a real control plane (issue 37 item 3): a TrainingJob asking
`system-node-critical`, or tolerating every taint, is refused (Invalid, with the field and
the rule, and no pod is made) with no configuration at all; a Queue's `allowed` and the
chart's admission.allowed (the policy file) bound the rest; an allowed job runs with its
PriorityClass and toleration on its pods."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .conftest import ControlPlane, Shoal, eventually
from .test_jobs import queue, running, trainingjob

pytestmark = pytest.mark.cluster

ALLOWED = {"key": "dedicated", "operator": "Equal", "value": "vision", "effect": "NoSchedule"}
OTHER = {**ALLOWED, "value": "infra"}


def status_of(cp: ControlPlane, name: str) -> dict[str, Any]:
    got: dict[str, Any] = eventually(
        lambda: (cp.tj(name).get("status") or {}).get("phase") and cp.tj(name)["status"],
        timeout=60,
    )
    return got


def test_dangerous_asks_are_refused_and_an_allowed_job_runs(
    cluster: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> None:
    # The chart's admission.allowed, as its ConfigMap renders it into the policy file.
    policy = Path(shoal_env["SHOAL_POLICY_FILE"])
    policy.write_text(policy.read_text() + f"\nallowed: {json.dumps({'tolerations': [ALLOWED]})}\n")
    cluster.kubectl("create", "priorityclass", "shoal-test-team", "--value=100", check=False)
    cluster.add_node("kw-l1", gpus=4)
    queue(cluster, total=4, allowed={"priorityClasses": ["shoal-test-*"]})
    shoal = start_shoal(shoal_env)

    trainingjob(cluster, "crit", priorityClassName="system-node-critical", workers=1)
    trainingjob(cluster, "every", tolerations=[{"operator": "Exists"}], workers=1)
    trainingjob(cluster, "batch", priorityClassName="batch-high", workers=1)
    trainingjob(cluster, "infra", tolerations=[OTHER], workers=1)
    trainingjob(
        cluster, "ok", priorityClassName="shoal-test-team", tolerations=[ALLOWED], workers=1
    )

    ok = status_of(cluster, "ok")
    assert ok["phase"] != "Invalid", ok
    (pod,) = running(cluster, ok["jobId"], 1, shoal)
    assert pod["spec"]["priorityClassName"] == "shoal-test-team"
    assert pod["spec"]["priority"] == 100
    assert ALLOWED in [{k: t.get(k) for k in ALLOWED} for t in pod["spec"]["tolerations"]]

    expected = {
        "crit": "spec.priorityClassName: PriorityClass 'system-node-critical' is refused by "
        "default",
        "every": "spec.tolerations.0: a toleration of every taint (operator Exists with no "
        "key) is refused by default",
        "batch": "spec.priorityClassName: PriorityClass 'batch-high' is not allowed: queue "
        "'vision' allows only these",
        "infra": "spec.tolerations.0: this toleration is not allowed: the chart allows only "
        "these (admission.allowed.tolerations)",
    }
    for name, words in expected.items():
        st = status_of(cluster, name)
        assert st["phase"] == "Invalid", (name, st)
        assert st["reason"].startswith(words), (name, st["reason"])
        (valid,) = st["conditions"]
        assert (valid["type"], valid["status"], valid["reason"]) == (
            "Valid",
            "False",
            "AdmissionRefused",
        )
        assert "jobId" not in st
    # Only the allowed job's pod exists: nothing was made for the refused ones.
    assert [p["metadata"]["name"] for p in cluster.pods()] == [pod["metadata"]["name"]]
