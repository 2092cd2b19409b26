"""Gangs that heal (issue 36 item 3), on a control plane of its own with kube-scheduler
running and the chart installed with its defaults: a PodGroup's members placed already
count toward its minCount, as kube-scheduler 1.37 counts them.

- minCount 2 with three pods: all three are bound (the third waited "1 of 2 pods" for
  ever before).
- A running gang's member deleted and a new one created in its place (what a Job
  controller does after a failure): the new pod is bound beside the one still running.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .conftest import ControlPlane, eventually
from .localshoal import Shoal
from .test_jobs import queue
from .test_podgroups import bound, member, pod_group

pytestmark = pytest.mark.cluster
NODE = "kw-heal"


@pytest.fixture
def cluster(beside: ControlPlane) -> Iterator[ControlPlane]:
    cp = beside
    yield cp
    cp.kubectl("delete", "pods", "--all", "-n", "default", "--force", check=False)
    cp.kubectl("delete", "podgroups", "--all", "-n", "default", check=False)


@pytest.fixture
def shoal(cluster: ControlPlane, shoal_beside: Shoal) -> Shoal:
    cluster.add_node(NODE, gpus=8)
    queue(cluster)
    running = shoal_beside
    eventually(lambda: NODE in {n.name for n in running.runtime.backend.nodes()}, 60)
    return running


def test_a_third_member_beyond_min_count_is_bound(cluster: ControlPlane, shoal: Shoal) -> None:
    pod_group(cluster, "trio", 2)
    for i in range(3):
        cluster.core.create_namespaced_pod("default", member(f"trio-{i}", "trio", 1))
    pods = [f"trio-{i}" for i in range(3)]
    eventually(lambda: bound(cluster, *pods) == [NODE] * 3, 90, every=1.0)


def test_a_recreated_member_of_a_running_gang_is_bound(cluster: ControlPlane, shoal: Shoal) -> None:
    pod_group(cluster, "pair", 2)
    for i in range(2):
        cluster.core.create_namespaced_pod("default", member(f"pair-{i}", "pair", 1))
    eventually(lambda: bound(cluster, "pair-0", "pair-1") == [NODE] * 2, 90, every=1.0)
    # Its controller replaces a failed member: the old pod goes, a new one comes.
    cluster.core.delete_namespaced_pod("pair-1", "default")
    cluster.core.create_namespaced_pod("default", member("pair-2", "pair", 1))
    eventually(lambda: bound(cluster, "pair-0", "pair-2") == [NODE] * 2, 90, every=1.0)
