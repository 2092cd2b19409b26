"""Issue 24 item 5: a reservation pod holds its GPU until it is gone. Idle (no share not
yet finished on it), whole-GPU jobs may not have its GPU but fractions may reuse it;
Terminating, nothing may; the core is shown that as a stopping entry in no queue."""

from __future__ import annotations

from scheduler import model as m
from scheduler.backends.kubernetes.config import KubeConfig
from scheduler.backends.kubernetes.reservations import holds, reservationpod
from scheduler.backends.kubernetes.view.podindex import PodIndex
from scheduler.core import cycle, invariants

from .conftest import pod

RES = "shoal-gpu-n1-g3"
N1 = {"n1": 4}  # the GPUs node n1 offers now


def reservation(*, deleting: bool = False, phase: str = "Running") -> dict:
    body = reservationpod.reservation_pod("n1", 3, KubeConfig(namespace="jobs"))
    body["spec"]["nodeName"] = "n1"
    body["status"] = {"phase": phase}
    if deleting:
        body["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return body


def share(name: str, phase: str = "Running") -> dict:
    return pod(
        name,
        ns="jobs",
        node_name="n1",
        phase=phase,
        labels={"app.kubernetes.io/managed-by": "shoal", "shoal.dev/reservation": RES},
        annotations={"shoal.dev/job-id": name, "shoal.dev/node": "n1", "shoal.dev/gpus": "3"},
    )


def test_the_index_counts_the_shares_not_yet_finished_on_each_reservation() -> None:
    index = PodIndex("shoal")
    res = reservation()
    index.reset({"jobs/res": res, "jobs/a": share("a"), "jobs/b": share("b", "Succeeded")})
    assert index.reservation_users() == [(res, 1)]
    index.update("jobs/a", share("a", "Succeeded"))
    assert index.reservation_users() == [(res, 0)]
    index.update("jobs/c", share("c", "Pending"))
    assert index.reservation_users() == [(res, 1)]
    index.update("jobs/c", None)
    assert index.reservation_users() == [(res, 0)]


def test_what_a_reservation_holds_beyond_its_shares() -> None:
    assert holds.holds([(reservation(), 1)], {}, N1) == []  # its shares count its GPU
    assert holds.holds([(reservation(), 0)], {RES: 0.0}, N1) == []  # a share is on its way
    assert holds.holds([(reservation(phase="Failed"), 0)], {}, N1) == []  # the GPU is free
    (idle,) = holds.holds([(reservation(), 0)], {}, N1)
    assert idle.stopping and idle.job.queue == "" and holds.is_hold(idle.job.id)
    assert idle.job.id == f"gpu-reservation:jobs/{RES}"
    assert idle.placements == (m.WorkerPlacement(0, "n1", (3,), holds.IDLE_SHARE),)
    (going,) = holds.holds([(reservation(deleting=True), 1)], {RES: 0.0}, N1)
    assert going.placements == (m.WorkerPlacement(0, "n1", (3,), 1.0),)
    # Other pods took room since (3 GPUs offered: no index 3), or the node is not offered.
    assert holds.holds([(reservation(deleting=True), 0)], {}, {"n1": 3}) == []
    assert holds.holds([(reservation(deleting=True), 0)], {}, {}) == []


def snapshot(hold: m.RunningJob, *pending: m.JobRequest) -> m.Snapshot:
    return m.Snapshot(
        nodes=(m.Node("n1", 64000, 512000, gpu_count=4),),
        queues=(m.Queue("q", guaranteed=m.Quota(total=4)),),
        running=(hold,),
        pending=pending,
        now=100.0,
        config=m.Config(policy=m.Policy.BINPACK),
    )


def test_the_core_keeps_whole_gpus_off_a_held_gpu_and_fractions_may_reuse_an_idle_one() -> None:
    (idle,) = holds.holds([(reservation(), 0)], {}, N1)
    whole = m.JobRequest(id="whole", queue="q", workers=1, gpu=4)
    got = cycle.schedule(snapshot(idle, whole))
    assert not got.places and not got.violations  # 3 GPUs free, not 4; no drift reported
    half = m.JobRequest(id="half", queue="q", workers=1, gpu=0.5)
    got = cycle.schedule(snapshot(idle, half, m.JobRequest(id="three", queue="q", gpu=3)))
    by_id = {p.job_id: p.placements for p in got.places}
    assert by_id["three"][0].gpus == (0, 1, 2) and by_id["half"][0].gpus == (3,), by_id
    (going,) = holds.holds([(reservation(deleting=True), 0)], {}, N1)
    got = cycle.schedule(snapshot(going, half))
    (placed,) = got.places
    assert placed.placements[0].gpus != (3,)  # nothing joins a GPU going away
    assert not invariants.check(snapshot(going))
