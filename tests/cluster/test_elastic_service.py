"""An elastic TrainingJob through the whole service on a real kube-apiserver + kwok
(issue 29 part 2): it starts at the size its queue's fair share allows, gives back its
newest workers' pods when another queue reclaims its guarantee (the first pods stay,
the job is never preempted), grows back into the GPUs left idle afterwards, and its
TrainingJob status shows its size and its resizes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .conftest import ControlPlane, Shoal, eventually
from .test_jobs import queue, running, trainingjob

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]


def status(cluster: ControlPlane, name: str) -> Obj:
    got: Obj = cluster.tj(name).get("status") or {}
    return got


def uids(pods: list[Obj]) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}


def test_an_elastic_trainingjob_shrinks_for_a_reclaim_and_grows_back(
    cluster: ControlPlane,
    shoal_env: dict[str, str],
    start_shoal: Callable[..., Shoal],
    tmp_path: Path,
) -> None:
    cluster.add_node("kw-a1", gpus=4)
    cluster.add_node("kw-a2", gpus=4)
    queue(cluster, "research", 2)
    queue(cluster, "prod", 6)
    policy = tmp_path / "elastic-policy.yaml"
    policy.write_text("policy: binpack\nminRuntimeSeconds: 0\nresizeIntervalSeconds: 2\n")
    shoal = start_shoal({**shoal_env, "SHOAL_POLICY_FILE": str(policy)})

    # Alone in the cluster: research's fair share is all it asks for, 4 workers.
    trainingjob(cluster, "el", queue="research", workers={"min": 2, "max": 4})
    job_id = eventually(lambda: status(cluster, "el").get("jobId"), timeout=60)
    first = uids(running(cluster, job_id, 4, shoal))
    eventually(lambda: status(cluster, "el").get("workers") == 4, timeout=60)

    # prod comes back for 6 of its guarantee: 4 GPUs are free, research gives back 2.
    trainingjob(cluster, "owner", queue="prod", workers=6, framework="generic")
    owner = eventually(lambda: status(cluster, "owner").get("jobId"), timeout=60)
    owners = running(cluster, owner, 6, shoal)
    kept = uids(running(cluster, job_id, 2, shoal))
    assert kept.items() <= first.items()  # the first two pods, untouched
    assert sorted(kept) == sorted(first)[:2]
    shrunk = eventually(
        lambda: (s := status(cluster, "el")).get("workers") == 2 and s.get("resizes") and s,
        timeout=60,
    )
    assert shrunk["phase"] == "Running" and shrunk["restarts"] == 0
    assert [(r["from"], r["to"]) for r in shrunk["resizes"]] == [(4, 2)]
    assert "reclaimed for job owner" in shrunk["resizes"][0]["message"]

    # The owner finishes: 6 idle GPUs and nobody waiting, so it grows back to 4.
    for p in owners:
        cluster.finish(p)
    again = uids(running(cluster, job_id, 4, shoal))
    assert kept.items() <= again.items()
    grown = eventually(
        lambda: (
            (s := status(cluster, "el")).get("workers") == 4
            and len(s.get("resizes") or ()) == 2
            and s
        ),
        timeout=60,
    )
    assert [(r["from"], r["to"]) for r in grown["resizes"]] == [(4, 2), (2, 4)]
