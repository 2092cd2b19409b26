"""A TrainingJob's status follows its job in the store (issue 24 item 8): Running and
Succeeded reach the CR through the controller's store poll, not at the next relist. The
relist is set to 300 s here, so a status that waited for it could never arrive within
these deadlines (at most a minute each)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from scheduler.spec import Phase

from .conftest import ControlPlane, Shoal, eventually
from .test_jobs import phase_of, queue, running, trainingjob

pytestmark = pytest.mark.cluster
RESYNC_S = 300  # the relist: far longer than any wait below


def test_trainingjob_status_follows_the_store_between_relists(
    cluster: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> None:
    cluster.add_node("kw-f1", gpus=4)
    queue(cluster)
    shoal = start_shoal(shoal_env, resync_s=RESYNC_S)
    trainingjob(cluster, "follow", workers=1)

    def status() -> dict[str, Any]:
        return dict(cluster.tj("follow").get("status") or {})

    # Written at submission, on the TrainingJob's ADDED event.
    job_id = eventually(lambda: status().get("jobId"), what="jobId on the TrainingJob")
    (pod,) = running(cluster, job_id, 1, shoal)
    eventually(lambda: phase_of(shoal, job_id) is Phase.RUNNING, what="store: Running")
    eventually(lambda: status().get("phase") == "Running", what="TrainingJob: Running")
    got = status()
    assert got["placements"][0]["node"] == "kw-f1", got
    assert "startedAt" in got, got
    conditions = {c["type"]: c["status"] for c in got["conditions"]}
    assert conditions["Scheduled"] == "True", got
    cluster.finish(pod)
    eventually(lambda: phase_of(shoal, job_id) is Phase.SUCCEEDED, what="store: Succeeded")
    eventually(lambda: status().get("phase") == "Succeeded", what="TrainingJob: Succeeded")
    got = status()
    assert {c["type"]: c["status"] for c in got["conditions"]}["Finished"] == "True", got
    assert "finishedAt" in got, got
