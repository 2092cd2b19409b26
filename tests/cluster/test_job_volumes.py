"""A TrainingJob that mounts a PersistentVolumeClaim and a Secret on a real control plane
(issue 37 item 2): its pods carry the volumes, the mounts, its ServiceAccount and an env
value from the Secret, the API server admits them, they are placed on the node the claim's
volume is reachable from (its PV's node affinity) and run; a claim of a
WaitForFirstConsumer class is refused with the reason, and no pod is made."""

from __future__ import annotations

import base64
from collections.abc import Callable

import kubernetes
import pytest

from .conftest import JOBS_NS, ControlPlane, Shoal, eventually
from .test_jobs import phase_of, queue, running, trainingjob

pytestmark = pytest.mark.cluster
# The volume is on the node binpack would not pick first (equal, empty: by name).
NEAR, FAR = "kw-vol-z", "kw-vol-a"
CLAIM = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}


def objects(cp: ControlPlane) -> None:
    """A local volume on NEAR bound to claim `datasets`, a WaitForFirstConsumer class
    with claim `late`, Secret `creds` and ServiceAccount `trainer` in the jobs namespace."""
    kubernetes.client.StorageV1Api(cp.api).create_storage_class({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "vol-wffc"}, "provisioner": "example.com/none",
        "volumeBindingMode": "WaitForFirstConsumer",
    })  # fmt: skip
    cp.core.create_persistent_volume({
        "metadata": {"name": "pv-datasets"},
        "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "storageClassName": "vol-manual", "local": {"path": "/datasets"},
            "claimRef": {"namespace": JOBS_NS, "name": "datasets"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [NEAR]}]}]}},
        },
    })  # fmt: skip
    create_claim = cp.core.create_namespaced_persistent_volume_claim
    create_claim(JOBS_NS, {"metadata": {"name": "datasets"}, "spec": {
        **CLAIM, "storageClassName": "vol-manual", "volumeName": "pv-datasets"}})  # fmt: skip
    create_claim(JOBS_NS, {"metadata": {"name": "late"},
                           "spec": {**CLAIM, "storageClassName": "vol-wffc"}})  # fmt: skip
    token = base64.b64encode(b"s3cret").decode()
    cp.core.create_namespaced_secret(
        JOBS_NS, {"metadata": {"name": "creds"}, "data": {"token": token}}
    )
    cp.core.create_namespaced_service_account(JOBS_NS, {"metadata": {"name": "trainer"}})


def remove(cp: ControlPlane) -> None:
    for args in (
        ("pvc", "datasets", "late", "-n", JOBS_NS),
        ("pv", "pv-datasets"),
        ("storageclass", "vol-wffc"),
        ("secret", "creds", "-n", JOBS_NS),
        ("serviceaccount", "trainer", "-n", JOBS_NS),
    ):
        cp.kubectl("delete", *args, "--wait=false", "--ignore-not-found", check=False)


def mounts(claim: str) -> dict[str, object]:
    return {
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}},
            {"name": "creds", "secret": {"secretName": "creds"}},
        ],
        "volumeMounts": [
            {"name": "data", "mountPath": "/data", "readOnly": True},
            {"name": "creds", "mountPath": "/etc/creds"},
        ],
        "serviceAccountName": "trainer",
        "env": {"TOKEN": {"valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}},
    }


def test_a_trainingjob_mounts_a_claim_and_a_secret_where_its_volume_is(
    cluster: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> None:
    cluster.add_node(NEAR, gpus=4)
    cluster.add_node(FAR, gpus=4)
    queue(cluster)
    remove(cluster)
    try:
        objects(cluster)
        claim = lambda: cluster.core.read_namespaced_persistent_volume_claim("datasets", JOBS_NS)  # noqa: E731
        eventually(lambda: claim().status.phase == "Bound", 90)  # the PV controller binds it
        shoal = start_shoal(shoal_env)
        eventually(lambda: len(shoal.runtime.backend.nodes()) == 2, 60)
        trainingjob(cluster, "mounted", workers=1, **mounts("datasets"))
        job_id = eventually(lambda: cluster.tj("mounted").get("status", {}).get("jobId"), 60)
        (pod,) = running(cluster, job_id, 1, shoal)
        spec = pod["spec"]
        assert spec["nodeName"] == NEAR, shoal.diagnose(job_id)  # the volume's node only
        assert spec["serviceAccountName"] == "trainer"
        by_name = {v["name"]: v for v in spec["volumes"]}
        assert by_name["data"]["persistentVolumeClaim"] == {
            "claimName": "datasets",
            "readOnly": True,
        }
        assert by_name["creds"]["secret"]["secretName"] == "creds"
        mounted = {m["mountPath"]: m["name"] for m in spec["containers"][0]["volumeMounts"]}
        assert mounted["/data"] == "data" and mounted["/etc/creds"] == "creds"
        (token,) = [e for e in spec["containers"][0]["env"] if e["name"] == "TOKEN"]
        assert token["valueFrom"]["secretKeyRef"] == {"name": "creds", "key": "token"}
        cluster.finish(pod)
        eventually(lambda: phase_of(shoal, job_id).value == "Succeeded", 60)

        # A claim no one has bound yet (WaitForFirstConsumer): Shoal binds no volumes.
        trainingjob(cluster, "unbound", workers=1, **mounts("late"))
        reason = eventually(
            lambda: (cluster.tj("unbound").get("status") or {}).get("reason") or None, 60
        )
        assert 'persistentvolumeclaim "late" waits for its first consumer' in reason, reason
        assert not cluster.job_pods(str(cluster.tj("unbound")["status"]["jobId"]))
    finally:
        remove(cluster)
