"""Foreign pods keep their PriorityClass's value (`spec.priority`, which the API server's
admission sets) in Shoal's ordering and preemption, waiting or adopted (issue 36): a
pod kube-scheduler would never preempt for a lower-priority one is not Shoal's victim
either, and a waiting pod's place among equal priorities is its creation time."""

from __future__ import annotations

from typing import Any

import pytest
from support.builders import job, nodes, queue, snapshot

from scheduler.backends.kubernetes.view import status
from scheduler.core import cycle

from .conftest import pod

Obj = dict[str, Any]


def adopted_pod(name: str, priority: int | None) -> Obj:
    """A foreign pod Shoal bound (as `bind` leaves it): 8 GPUs of node n0."""
    p = pod(
        name,
        node_name="n0",
        scheduler="shoal",
        labels={"shoal.dev/queue": "q"},
        annotations={"shoal.dev/job-id": f"pod:default/{name}", "shoal.dev/node": "n0",
                     "shoal.dev/gpus": "0,1,2,3,4,5,6,7"},
        requests={"nvidia.com/gpu": "8"},
    )  # fmt: skip
    if priority is not None:
        p["spec"]["priority"] = priority
    return p


@pytest.mark.parametrize(
    ("given", "expected"), [(None, 0), (1000, 1000), (-5, -5), (2000001000, 2000001000)]
)
def test_a_waiting_and_an_adopted_pod_carry_spec_priority(given: int | None, expected: int) -> None:
    waiting = pod("w", phase="Pending", scheduler="shoal", labels={"shoal.dev/queue": "q"})
    waiting["metadata"]["creationTimestamp"] = "2026-12-06T08:00:00Z"
    if given is not None:
        waiting["spec"]["priority"] = given
    fp = status.foreign_pod(waiting, "shoal")
    assert fp is not None
    request = fp.to_job_request()
    assert (request.priority, request.submitted_at) == (expected, 1796544000.0)
    [running] = status.adopted([adopted_pod("a", given)])
    assert running.job.priority == expected


@pytest.mark.parametrize(("victim_priority", "preempted"), [(1000, False), (0, True)])
def test_a_higher_priority_adopted_pod_is_no_victim(victim_priority: int, preempted: bool) -> None:
    """A Shoal job of priority 10 in the pod's queue preempts an adopted pod of
    priority 0, never one whose PriorityClass says 1000."""
    [running] = status.adopted([adopted_pod("held", victim_priority)])
    snap = snapshot(
        nodes(1), [queue("q").obj()], [running], [job("hi", "q").gpu(8).priority(10).obj()]
    )
    result = cycle.schedule(snap)
    victims = {p.job_id for p in result.preempts}
    assert victims == ({"pod:default/held"} if preempted else set()), result
