"""One job's trouble is that job's: a launch the API server refuses (a webhook's 403, a
quota, an invalid object, a 409) or cannot take (unreachable) becomes that job's reason
with a per-job backoff, and the loop keeps scheduling every other job. The real loop and
store drive the Kubernetes backend against the fake API server, on a virtual clock."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from scheduler.backends.kubernetes import KubeConfig, KubernetesBackend, names
from scheduler.backends.kubernetes.runtime import with_options
from scheduler.clock import VirtualClock
from scheduler.loop.service import Loop
from scheduler.spec import Phase
from scheduler.store.db import Database

from .conftest import NS, eventually, pod
from .fakeapi import FakeKube
from .loopkit import of_job, pods_of, row, submit


def test_a_refused_pod_create_is_the_jobs_reason_and_others_still_run(
    kube: FakeKube, loop: Loop, database: Database
) -> None:
    big = submit(database, "big")  # first in line
    small = submit(database, "small")
    rule = kube.deny("pods", of_job(big), 403)
    report = loop.run_once()
    assert report is not None
    assert report.applied.placed == [small] and report.applied.launch_failed == [big]
    assert len(pods_of(kube, small)) == 1 and pods_of(kube, big) == []
    r = row(database, big)
    assert r.phase == Phase.PENDING.value and r.pending_code == "LaunchFailed"
    assert "403" in r.pending_message and "denied the request" in r.pending_message
    assert r.restarts == 0  # it never ran: no backoffLimit used up

    # Within its backoff the job is not tried again; nothing else is held up.
    clock = loop.clock
    assert isinstance(clock, VirtualClock)
    tries = kube.requests.count(("POST", f"/api/v1/namespaces/{NS}/pods"))
    clock.advance_to(clock.now() + 2)
    loop.run_once()
    assert kube.requests.count(("POST", f"/api/v1/namespaces/{NS}/pods")) == tries
    assert row(database, big).phase == Phase.PENDING.value

    # The refusal lifted and the backoff over, it launches.
    kube.admission.remove(rule)
    clock.advance_to(clock.now() + 10)
    loop.run_once()
    assert row(database, big).phase == Phase.SCHEDULED.value
    assert len(pods_of(kube, big)) == 1 and pods_of(kube, big)[0]["spec"].get("nodeName")


@pytest.mark.parametrize("code", [409, 422])
def test_a_refused_binding_is_the_jobs_reason_and_its_pods_are_removed(
    kube: FakeKube, loop: Loop, database: Database, code: int
) -> None:
    bad = submit(database, "bad", workers=2)
    good = submit(database, "good")
    kube.deny("pods", of_job(bad), code, message="no", verb="bind")
    report = loop.run_once()
    assert report is not None and report.applied.placed == [good]
    r = row(database, bad)
    assert r.phase == Phase.PENDING.value and r.pending_code == "LaunchFailed"
    assert str(code) in r.pending_message
    # What the refused attempt made is deleted (gracefully: never a force delete).
    assert pods_of(kube, bad) == []
    stem = names.job_base(bad, "bad")
    graces = [g for res, _, n, g in kube.deletions if res == "pods" and n.startswith(stem)]
    assert graces and all(g is not None and g >= 1 for g in graces)
    assert pods_of(kube, good)[0]["spec"].get("nodeName") == "n1"


def test_backoff_doubles_with_each_refusal(kube: FakeKube, loop: Loop, database: Database) -> None:
    job_id = submit(database, "stubborn")
    kube.deny("pods", of_job(job_id), 403)
    clock = loop.clock
    assert isinstance(clock, VirtualClock)
    delays = []
    for _ in range(3):
        loop.run_once()
        until = loop.memory.launches.until(job_id)
        assert until is not None
        delays.append(round(until - clock.now()))
        clock.advance_to(until + 0.01)
    assert delays == [5, 10, 20]


def test_an_unreachable_api_keeps_the_placement_and_finishes_the_launch(
    kube: FakeKube, loop: Loop, database: Database
) -> None:
    job_id = submit(database, "patient", workers=2)
    # The second pod's create keeps failing with 503 until the client gives up.
    kube.inject(1000, 503, path=f"/namespaces/{NS}/pods", method="POST", skip=1)
    report = loop.run_once()
    assert report is not None and report.applied.launch_failed == [job_id]
    r = row(database, job_id)
    assert r.phase == Phase.SCHEDULED.value  # resumable: the placement stays
    assert len(pods_of(kube, job_id)) == 1
    kube.faults.clear()
    clock = loop.clock
    assert isinstance(clock, VirtualClock)
    clock.advance_to(clock.now() + 6)
    report = loop.run_once()
    assert report is not None and report.reconciled.launched == [job_id]
    pods = pods_of(kube, job_id)
    assert len(pods) == 2 and all(p["spec"].get("nodeName") == "n1" for p in pods)
    assert all(n == 1 for n in kube.creates.values())  # finished, nothing made twice
    assert row(database, job_id).restarts == 0


def test_foreign_pods_are_adopted_only_where_rbac_allows(
    kube: FakeKube, make_backend: Callable[..., KubernetesBackend]
) -> None:
    for ns in ("default", NS):
        kube.put(
            "pods",
            pod(
                "notebook",
                ns=ns,
                phase="Pending",
                scheduler="shoal",
                labels={"shoal.dev/queue": "research"},
                requests={"nvidia.com/gpu": "1"},
            ),
        )
    everywhere = make_backend()
    assert [f.namespace for f in eventually(everywhere.foreign_pods)] == ["default", NS]
    # rbac.foreignPods=false: pod patch/delete only in the jobs namespace.
    narrowed = make_backend(foreign_namespaces=(NS,))
    assert [f.namespace for f in eventually(narrowed.foreign_pods)] == [NS]


def test_the_charts_kube_options_reach_the_backend_config() -> None:
    cfg = with_options(
        KubeConfig(),
        {
            "foreignNamespaces": ["shoal-jobs"],
            "reserveImagePullSecrets": ["regcred"],
            "reservePriorityClass": "shoal-gpu-reservation",
            "reservationUuidTimeoutSeconds": 60,
            "reserveRuntimeClass": None,
        },
    )
    assert cfg.foreign_namespaces == ("shoal-jobs",)
    assert cfg.reserve_image_pull_secrets == ("regcred",)
    assert cfg.reserve_priority_class == "shoal-gpu-reservation"
    assert cfg.reservation_uuid_timeout_s == 60 and cfg.reserve_runtime_class is None
    with pytest.raises(ValueError, match="unknown key 'nope'"):
        with_options(KubeConfig(), {"nope": 1})


def test_a_waiting_foreign_pod_gets_pod_scheduled_false_and_an_event(
    kube: FakeKube, loop: Loop
) -> None:
    kube.put(
        "pods",
        pod(
            "too-big",
            ns="default",
            phase="Pending",
            scheduler="shoal",
            labels={"shoal.dev/queue": "vision"},
            requests={"nvidia.com/gpu": "8"},
        ),
    )
    backend = loop.backend
    assert isinstance(backend, KubernetesBackend)
    eventually(backend.foreign_pods)
    loop.run_once()
    conds = kube.obj("pods", "too-big", "default")["status"].get("conditions") or []
    (cond,) = [c for c in conds if c["type"] == "PodScheduled"]
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable") and cond["message"]
    (event,) = [e for e in kube.objects("events", "default") if e["reason"] == "FailedScheduling"]
    assert event["type"] == "Warning" and event["message"] == cond["message"]
    patches = [
        r for r in kube.requests if r == ("PATCH", "/api/v1/namespaces/default/pods/too-big/status")
    ]
    loop.run_once()  # the same reason is not written again
    assert [
        r for r in kube.requests if r == ("PATCH", "/api/v1/namespaces/default/pods/too-big/status")
    ] == patches
