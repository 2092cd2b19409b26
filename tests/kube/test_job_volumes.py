"""A job's volumes, mounts, ServiceAccount, pull secrets, Secret-fed env and extended
resources on its worker pod (validated against the official schemas by the fake API
server), and what its claims and resources say about placement: a bound volume's node
affinity narrows the nodes, a WaitForFirstConsumer claim not bound yet is refused with
the reason (issue 37 item 2). The real control plane: tests/cluster/test_job_volumes.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from scheduler.backends.base import BackendError
from scheduler.backends.kubernetes import KubernetesBackend
from scheduler.loop.service import Loop
from scheduler.placement import eligible
from scheduler.spec import JobSpec, Phase
from scheduler.store.db import Database

from .conftest import NS, env_of, eventually, job, node
from .fakeapi import FakeKube
from .loopkit import pods_of, row, submit

Make = Callable[..., KubernetesBackend]
Obj = dict[str, Any]
HOST = "kubernetes.io/hostname"
SECRET_ENV = {"valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}
MOUNTS: Obj = {
    "volumes": [
        {"name": "data", "persistentVolumeClaim": {"claimName": "datasets", "readOnly": True}},
        {"name": "creds", "secret": {"secretName": "creds", "defaultMode": 0o400}},
        {"name": "cfg", "configMap": {"name": "train-cfg", "items": [{"key": "a", "path": "a"}]}},
        {"name": "scratch", "emptyDir": {"sizeLimit": "10Gi"}},
        {"name": "inline", "csi": {"driver": "csi.example.com", "volumeAttributes": {"x": "1"}}},
    ],
    "volumeMounts": [
        {"name": "data", "mountPath": "/data", "readOnly": True},
        {"name": "creds", "mountPath": "/etc/creds"},
        {"name": "cfg", "mountPath": "/etc/train", "subPath": "a"},
        {"name": "scratch", "mountPath": "/scratch"},
        {"name": "inline", "mountPath": "/inline"},
    ],
    "serviceAccountName": "trainer",
    "imagePullSecrets": [{"name": "registry"}],
    "env": {"PLAIN": "1", "TOKEN": SECRET_ENV, "RANK": SECRET_ENV},
    "resources": {"example.com/rdma": 1, "ephemeral-storage": "20Gi"},
}


def with_spec(name: str, **fields: Any) -> Any:
    req = job(name)
    spec = JobSpec.model_validate({**req.spec.model_dump(by_alias=True), **fields})
    return dataclasses.replace(req, spec=spec)


def test_the_worker_pod_carries_what_the_job_mounts_and_reads(
    kube: FakeKube, make_backend: Make
) -> None:
    kube.put("nodes", node("n1"))
    make_backend().launch(with_spec("mounts", **MOUNTS))
    (pod,) = kube.objects("pods", NS)  # the fake refused it (422) were it invalid
    spec = pod["spec"]
    own = [v for v in spec["volumes"] if v["name"] not in ("podinfo", "dshm")]  # Shoal's
    assert own == MOUNTS["volumes"]
    container = spec["containers"][0]
    mounts = [m for m in container["volumeMounts"] if m["name"] not in ("podinfo", "dshm")]
    assert mounts == MOUNTS["volumeMounts"]
    assert spec["serviceAccountName"] == "trainer"
    assert "automountServiceAccountToken" not in spec  # the job asked for its account
    assert spec["imagePullSecrets"] == [{"name": "registry"}]
    env = env_of(pod)
    assert env["PLAIN"] == "1" and env["TOKEN"] == SECRET_ENV["valueFrom"]
    assert env["RANK"] == "0"  # Shoal's rendezvous variables win over the job's
    for part in ("requests", "limits"):
        assert container["resources"][part]["example.com/rdma"] == "1"
        assert container["resources"][part]["ephemeral-storage"] == "20Gi"


def test_a_job_that_mounts_its_own_shm_gets_no_second_one(
    kube: FakeKube, make_backend: Make
) -> None:
    kube.put("nodes", node("n1"))
    shm = {
        "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}],
        "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
    }
    make_backend().launch(with_spec("shm", **shm))
    (pod,) = kube.objects("pods", NS)
    at_shm = [
        m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["mountPath"] == "/dev/shm"
    ]
    assert at_shm == [{"name": "shm", "mountPath": "/dev/shm"}]


def pvc(name: str, *, volume: str = "", storage_class: str = "standard") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": storage_class,
            **({"volumeName": volume} if volume else {}),
        },
        "status": {"phase": "Bound" if volume else "Pending"},
    }


def pv_on(name: str, node_name: str) -> Obj:
    term = {"matchExpressions": [{"key": HOST, "operator": "In", "values": [node_name]}]}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "local": {"path": "/mnt/disk"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [term]}},
        },
    }


def storage_class(name: str, mode: str) -> Obj:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": mode,
    }


def claim_spec(claim: str) -> Obj:
    return {
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }


def test_backend_rules_from_claims_and_extended_resources(
    kube: FakeKube, make_backend: Make
) -> None:
    rdma = node("n2")
    rdma["status"]["allocatable"]["example.com/rdma"] = "1"
    for n in (node("n1"), rdma):
        kube.put("nodes", n)
    kube.put("persistentvolumes", pv_on("local-n2", "n2"))
    kube.put("persistentvolumeclaims", pvc("near", volume="local-n2"))
    kube.put("storageclasses", storage_class("late", "WaitForFirstConsumer"))
    kube.put("persistentvolumeclaims", pvc("waiting", storage_class="late"))
    backend = make_backend()
    nodes = {n.name: n for n in backend.nodes()}

    def allowed(spec: Obj) -> list[str]:
        rules = backend.job_rules(with_spec("j", **spec).spec)
        return sorted(n for n, v in nodes.items() if eligible.refusal(rules, v) is None)

    assert backend.job_rules(job("plain").spec) is None  # asks nothing such: no reads
    assert allowed(claim_spec("near")) == ["n2"]
    assert allowed({"resources": {"example.com/rdma": 1}}) == ["n2"]
    assert allowed({"resources": {"example.com/rdma": 2}}) == []
    waiting = backend.job_rules(with_spec("j", **claim_spec("waiting")).spec)
    assert waiting is not None and "WaitForFirstConsumer" in waiting.blocked
    missing = backend.job_rules(with_spec("j", **claim_spec("nowhere")).spec)
    assert missing is not None and '"nowhere" not found' in missing.blocked


@pytest.mark.parametrize(
    ("claim", "phase", "says"),
    [
        ("near", Phase.SCHEDULED, ""),
        ("waiting", Phase.PENDING, "Shoal does not bind volumes"),
    ],
)
def test_the_loop_places_a_job_where_its_volume_is_or_says_why_not(
    kube: FakeKube, loop: Loop, database: Database, claim: str, phase: Phase, says: str
) -> None:
    kube.put("nodes", node("n2", gpus=4))  # the loop's n1 has 4 GPUs too
    kube.put("persistentvolumes", pv_on("local-n2", "n2"))
    kube.put("persistentvolumeclaims", pvc("near", volume="local-n2"))
    kube.put("storageclasses", storage_class("late", "WaitForFirstConsumer"))
    kube.put("persistentvolumeclaims", pvc("waiting", storage_class="late"))
    eventually(lambda: len(loop.backend.nodes()) == 2, timeout=30)
    job_id = submit(
        database,
        "vol",
        **JobSpec.model_validate(
            {"name": "x", "queue": "q", "image": "i", **claim_spec(claim)}
        ).model_dump(include={"volumes", "volume_mounts"}),
    )
    loop.run_once()
    r = row(database, job_id)
    assert r.phase == phase.value, r.pending_message
    if phase is Phase.SCHEDULED:
        assert [p["spec"]["nodeName"] for p in pods_of(kube, job_id)] == ["n2"]
    else:
        assert says in r.pending_message and "waiting" in r.pending_message


def test_a_job_runs_in_its_team_namespace_and_not_in_one_not_given(
    kube: FakeKube, make_backend: Make
) -> None:
    """Issue 37 item 1: a job's pods go to its namespace when Shoal is given it
    (teamNamespaces), and a namespace Shoal has no Role in is refused with the reason."""
    kube.put("nodes", node("n1"))
    backend = make_backend(team_namespaces=("vision",))
    assert backend.config.job_namespaces == (NS, "vision")
    nlp = with_spec("nlp", namespace="nlp")
    (refusal,) = backend.spec_refusals(nlp.spec)
    assert refusal[0] == ("namespace",) and "teamNamespaces" in refusal[1]
    with pytest.raises(
        BackendError, match=r"namespace: Shoal does not run jobs in namespace 'nlp'"
    ):
        backend.launch(nlp)
    assert kube.objects("pods", "nlp") == []
    backend.launch(with_spec("vision", namespace="vision"))
    assert [p["metadata"]["namespace"] for p in kube.objects("pods", "vision")] == ["vision"]
    assert kube.objects("pods", NS) == []
    backend.stop("vision", 0.0)
    eventually(lambda: kube.objects("pods", "vision") == [], what="the pods deleted there")
