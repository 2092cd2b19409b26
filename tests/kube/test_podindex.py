"""A foreign pod's job id is looked up in the pod index, pending or adopted, never parsed."""

from __future__ import annotations

from scheduler.backends.kubernetes.view.podindex import PodIndex

from .conftest import pod

QUEUE = {"shoal.dev/queue": "research"}


def test_a_foreign_job_maps_to_its_pod_while_it_waits_and_once_adopted() -> None:
    index = PodIndex("shoal")
    waiting = pod("nb", ns="team", phase="Pending", scheduler="shoal", labels=QUEUE)
    index.reset({"team/nb": waiting})
    assert index.key_of_job("pod:team/nb") == "team/nb"
    assert index.key_of_job("pod:team/other") is None
    bound = pod(
        "nb",
        ns="team",
        node_name="n1",
        scheduler="shoal",
        labels=QUEUE,
        annotations={
            "shoal.dev/job-id": "pod:team/nb",
            "shoal.dev/node": "n1",
            "shoal.dev/gpus": "0",
        },
    )
    index.update("team/nb", bound)  # adopted: no longer pending, still the same job
    assert index.pending("team/nb") is None
    assert index.key_of_job("pod:team/nb") == "team/nb"
    index.update("team/nb", None)
    assert index.key_of_job("pod:team/nb") is None


def test_shoal_workers_are_not_foreign_jobs() -> None:
    index = PodIndex("shoal")
    worker = pod(
        "j1-w0",
        node_name="n1",
        scheduler="shoal",
        labels={"app.kubernetes.io/managed-by": "shoal", "shoal.dev/job": "j1"},
        annotations={"shoal.dev/job-id": "j1", "shoal.dev/node": "n1"},
    )
    index.reset({"default/j1-w0": worker})
    assert index.key_of_job("j1") is None
