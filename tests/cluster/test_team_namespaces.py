"""Teams in their own namespaces on a real control plane (issue 37 items 1 and 5): the
chart given `teamNamespaces` grants Shoal its Role there; a TrainingJob in `vision`
has its pods made in `vision` (owned by it: deleting it deletes them), mounting a claim
and a Secret of that namespace; whole GPUs and a reservation's share are charged to
`vision`'s ResourceQuota (`requests.nvidia.com/gpu`, `requests.shoal.dev/gpu-milli`),
and a job past it goes back to Pending with the quota's words; dangerous asks are
refused there too; the queue's `allowed.namespaces` keeps `vision`'s queue out of `nlp`,
and a namespace Shoal is not given is refused with the reason."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler.spec import JobSpec

from .conftest import RESERVATIONS_NS, Chart, ControlPlane, Shoal, eventually
from .helmchart import install
from .test_jobs import queue, running, trainingjob

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]
TEAMS = ("vision", "nlp")
NODE = "kw-team"
UUID = "GPU-5f0e6c4a-0b7e-4c1c-9a77-2b3c4d5e6f71"
QUOTA = {"requests.nvidia.com/gpu": "2", "requests.shoal.dev/gpu-milli": "1000"}
MOUNTS: Obj = {
    "volumes": [
        {"name": "data", "persistentVolumeClaim": {"claimName": "datasets", "readOnly": True}},
        {"name": "creds", "secret": {"secretName": "creds"}},
    ],
    "volumeMounts": [
        {"name": "data", "mountPath": "/data", "readOnly": True},
        {"name": "creds", "mountPath": "/etc/creds"},
    ],
}


def tj(cp: ControlPlane, name: str, ns: str = "vision", **spec: Any) -> None:
    trainingjob(cp, name, ns, **{"workers": 1, **spec})


def empty(cp: ControlPlane) -> None:
    """What the test makes in the team namespaces (the fixture's reset knows only the
    jobs namespace)."""
    for ns in TEAMS:
        for kind in ("trainingjobs", "resourcequotas", "pvc", "secrets"):
            cp.kubectl("delete", kind, "--all", "-n", ns, "--wait=false", check=False)
        cp.kubectl("delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force", check=False)
        cp.kubectl("delete", "services,configmaps", "-n", ns, "-l",
                   "app.kubernetes.io/managed-by=shoal", check=False)  # fmt: skip
    cp.kubectl(
        "delete", "pv", "pv-team-datasets", "--wait=false", "--ignore-not-found", check=False
    )


@pytest.fixture
def teams(cluster: ControlPlane, chart: Chart) -> Iterator[ControlPlane]:
    """The chart upgraded with teamNamespaces={vision,nlp} (their Roles), and put back."""
    for ns in TEAMS:
        cluster.kubectl("create", "namespace", ns, check=False)
    empty(cluster)
    install(cluster, path=chart.kubeconfig, values=["--set", "teamNamespaces={vision,nlp}"])
    try:
        yield cluster
    finally:
        empty(cluster)
        install(cluster, path=chart.kubeconfig)


def team_objects(cp: ControlPlane) -> None:
    """In `vision`: a claim bound to a volume, a Secret and the team's GPU quota."""
    cp.core.create_persistent_volume({
        "metadata": {"name": "pv-team-datasets"},
        "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadOnlyMany"],
            "storageClassName": "team-manual", "hostPath": {"path": "/datasets"},
            "claimRef": {"namespace": "vision", "name": "datasets"},
        },
    })  # fmt: skip
    cp.core.create_namespaced_persistent_volume_claim("vision", {
        "metadata": {"name": "datasets"},
        "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "team-manual",
                 "volumeName": "pv-team-datasets", "resources": {"requests": {"storage": "1Gi"}}},
    })  # fmt: skip
    token = base64.b64encode(b"s3cret").decode()
    cp.core.create_namespaced_secret(
        "vision", {"metadata": {"name": "creds"}, "data": {"token": token}}
    )
    cp.core.create_namespaced_resource_quota(
        "vision", {"metadata": {"name": "gpus"}, "spec": {"hard": QUOTA}}
    )


def status(cp: ControlPlane, name: str, ns: str = "vision", has: str = "phase") -> Obj:
    """The TrainingJob's status once it says `has`."""
    got: Obj = eventually(
        lambda: (st := cp.tj(name, ns).get("status") or {}).get(has) and st, timeout=90
    )
    return got


def used(cp: ControlPlane) -> dict[str, str]:
    """`kubectl describe quota gpus -n vision`'s Used column."""
    quota = cp.core.read_namespaced_resource_quota("gpus", "vision")
    return dict(quota.status.used or {})


def test_a_team_runs_in_its_namespace_charged_to_its_quota(
    teams: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> None:
    cp = teams
    cp.add_node(NODE, gpus=4)
    queue(cp, total=4, allowed={"namespaces": ["vision"]})
    team_objects(cp)
    claim = lambda: cp.core.read_namespaced_persistent_volume_claim("datasets", "vision")  # noqa: E731
    eventually(lambda: claim().status.phase == "Bound", 90)
    # The chart's kube options, as it renders them with teamNamespaces.
    options = Path(shoal_env["SHOAL_KUBE_OPTIONS_FILE"])
    opts = {**json.loads(options.read_text()), "teamNamespaces": list(TEAMS)}
    options.write_text(json.dumps(opts))
    shoal = start_shoal(shoal_env)
    eventually(lambda: len(shoal.runtime.backend.nodes()) == 1, 60)

    # A whole GPU, mounting the team's claim and Secret: its pod is the team's.
    tj(cp, "mounted", **MOUNTS)
    mounted = status(cp, "mounted", has="jobId")
    assert mounted["phase"] != "Invalid", mounted
    (pod,) = running(cp, mounted["jobId"], 1, shoal, ns="vision")
    assert pod["metadata"]["namespace"] == "vision"
    (owner,) = pod["metadata"]["ownerReferences"]
    uid = cp.tj("mounted", "vision")["metadata"]["uid"]
    assert (owner["kind"], owner["uid"]) == ("TrainingJob", uid)
    by_name = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert by_name["data"]["persistentVolumeClaim"]["claimName"] == "datasets"
    assert by_name["creds"]["secret"]["secretName"] == "creds"
    # Not the chart's worker account (that is in the jobs namespace only), and no token.
    assert pod["spec"]["automountServiceAccountToken"] is False
    eventually(lambda: used(cp).get("requests.nvidia.com/gpu") == "1", 90)

    # A half GPU: the reservation (Shoal's namespace) holds the GPU, the share is charged
    # to the team in thousandths.
    tj(cp, "half", gpu=0.5)
    res = eventually(
        lambda: next((p["metadata"]["name"] for p in cp.pods(RESERVATIONS_NS)), None), 90
    )
    ann = {"shoal.dev/gpu-uuid": UUID}  # what the reserver says on a real node
    cp.core.patch_namespaced_pod(res, RESERVATIONS_NS, {"metadata": {"annotations": ann}})
    (share,) = running(cp, status(cp, "half", has="jobId")["jobId"], 1, shoal, ns="vision")
    resources = share["spec"]["containers"][0]["resources"]
    assert resources["requests"]["shoal.dev/gpu-milli"] == "500"
    assert "nvidia.com/gpu" not in resources["requests"]
    capacity = cp.api.sanitize_for_serialization(cp.core.read_node(NODE))["status"]["capacity"]
    assert capacity["shoal.dev/gpu-milli"] in ("4k", "4000"), capacity  # 1000 per GPU
    eventually(lambda: used(cp).get("requests.shoal.dev/gpu-milli") == "500", 90)
    # As docs/install.md has an admin read it.
    described = cp.kubectl("-n", "vision", "describe", "quota", "gpus").stdout
    assert re.search(r"requests\.shoal\.dev/gpu-milli\s+500\s+1k", described), described
    assert re.search(r"requests\.nvidia\.com/gpu\s+1\s+2", described), described

    # Past the quota (1 of 2 GPUs used, 2 asked): the API server refuses the pod, the job
    # waits in Pending with its words, and nothing of it runs.
    tj(cp, "over", gpu=2)
    over = eventually(
        lambda: "exceeded quota" in ((st := status(cp, "over")).get("reason") or "") and st, 90
    )
    assert over["phase"] == "Pending", over
    assert not cp.job_pods(over["jobId"], "vision")

    # Refused in the team's namespace as anywhere: no configuration needed.
    tj(cp, "crit", priorityClassName="system-node-critical")
    tj(cp, "every", tolerations=[{"operator": "Exists"}])
    for name, words in (
        ("crit", "spec.priorityClassName: PriorityClass 'system-node-critical' is refused"),
        ("every", "spec.tolerations.0: a toleration of every taint"),
    ):
        st = status(cp, name)
        assert st["phase"] == "Invalid" and st["reason"].startswith(words), (name, st)

    # `nlp` is given to Shoal, but the vision queue does not reach it.
    tj(cp, "elsewhere", ns="nlp")
    st = status(cp, "elsewhere", "nlp")
    assert st["phase"] == "Invalid", st
    assert st["reason"].startswith("spec.namespace: namespace 'nlp' is not allowed"), st
    assert not cp.pods("nlp")

    # A namespace Shoal is not given (REST jobs name theirs): refused with the reason.
    spec = JobSpec.model_validate(
        {"name": "x", "queue": "vision", "image": "i", "namespace": "finance"}
    )
    ((loc, why),) = shoal.runtime.backend.spec_refusals(spec)
    assert loc == ("namespace",) and "teamNamespaces" in why, why

    # Deleting the TrainingJob deletes its pods in the team's namespace (the GC follows
    # the owner references); the quota is given back.
    cp.kubectl("delete", "tj", "mounted", "-n", "vision", "--wait=false")
    eventually(lambda: not cp.job_pods(mounted["jobId"], "vision"), 90)
    eventually(lambda: used(cp).get("requests.nvidia.com/gpu") == "0", 90)
