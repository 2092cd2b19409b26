"""Jobs end to end on a real control plane: Shoal on this host (the chart's
ServiceAccount token, so the chart's RBAC), kwok playing the kubelets, the real garbage
collector."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from scheduler.spec import Phase
from scheduler.store.rows import get_job

from .conftest import JOBS_NS, ROOT, ControlPlane, Shoal, eventually

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]


def queue(cp: ControlPlane, name: str = "vision", total: float = 16, **spec: Any) -> None:
    cp.custom.create_cluster_custom_object(
        "shoal.dev",
        "v1alpha1",
        "queues",
        {
            "apiVersion": "shoal.dev/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": name},
            "spec": {"guaranteed": {"total": total}, "weight": 1, **spec},
        },
    )


def trainingjob(cp: ControlPlane, name: str, ns: str = JOBS_NS, **spec: Any) -> None:
    body = {
        "queue": "vision",
        "framework": "pytorch",
        "image": "ghcr.io/x/train:1",
        "command": ["python", "train.py"],
        "workers": 2,
        "gpu": 1,
        "cpu": "1",
        "memory": "1Gi",
        **spec,
    }
    cp.create_tj(name, body, ns)


def phase_of(shoal: Shoal, job_id: str) -> Phase:
    with shoal.database.session() as session:
        return Phase(get_job(session=session, job_id=job_id).phase)


def running(
    cp: ControlPlane, job_id: str, n: int, shoal: Shoal | None = None, ns: str = JOBS_NS
) -> list[Obj]:
    """Wait for `n` pods of the job in `ns`, bound to kwok nodes and Running (kwok
    started them)."""

    def check() -> list[Obj] | None:
        pods = cp.job_pods(job_id, ns)
        ok = len(pods) == n and all(
            p["spec"].get("nodeName") and p["status"].get("phase") == "Running" for p in pods
        )
        return pods if ok else None

    try:
        got: list[Obj] = eventually(check, timeout=90)
    except AssertionError as e:
        pods = [(p["metadata"]["name"], p["spec"].get("nodeName"), p["status"].get("phase"))
                for p in cp.job_pods(job_id, ns)]  # fmt: skip
        raise AssertionError(
            f"{e}\npods: {pods}\n{shoal.diagnose(job_id) if shoal else ''}"
        ) from None
    return got


def test_a_trainingjob_runs_to_success_and_its_status_follows(
    cluster: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> None:
    cluster.add_node("kw-a1", gpus=4)
    cluster.add_node("kw-a2", gpus=4)
    queue(cluster)
    shoal = start_shoal(shoal_env)
    trainingjob(cluster, "ddp")
    status = eventually(lambda: cluster.tj("ddp").get("status", {}).get("jobId") and
                        cluster.tj("ddp")["status"])  # fmt: skip
    job_id = status["jobId"]
    pods = running(cluster, job_id, 2, shoal)
    uid = cluster.tj("ddp")["metadata"]["uid"]
    for p in pods:
        assert p["spec"]["schedulerName"] == "shoal"
        assert p["spec"]["nodeName"] in ("kw-a1", "kw-a2")
        (owner,) = p["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("TrainingJob", "ddp", uid)
        scheduled = {c["type"]: c["status"] for c in p["status"].get("conditions") or []}
        assert scheduled.get("PodScheduled") == "True"
    assert len({p["spec"]["nodeName"] for p in pods}) == 1  # binpack: one node
    eventually(lambda: phase_of(shoal, job_id) is Phase.RUNNING, timeout=60)
    eventually(lambda: cluster.tj("ddp").get("status", {}).get("phase") == "Running", timeout=60)
    for cond in cluster.tj("ddp")["status"]["conditions"]:  # metav1.Condition's fields
        assert {"reason", "message", "lastTransitionTime"} <= set(cond), cond
        assert cond["observedGeneration"] == 1, cond
    # The Queue's Allocated/FairShare/Pending columns follow (queues relist every 30 s);
    # its only demand is the 2 GPUs it holds, so that is its fair share.

    def allocated() -> object:
        got: Obj = cluster.custom.get_cluster_custom_object(
            "shoal.dev", "v1alpha1", "queues", "vision"
        )
        status = got.get("status") or {}
        return status.get("allocated"), status.get("fairShare")

    eventually(lambda: allocated() == (2, 2), timeout=120)
    header, row = cluster.kubectl("get", "queues", "vision").stdout.splitlines()[:2]
    at = header.index("FAIRSHARE")  # empty columns (Parent, Limit) print as blanks
    assert row[at:].split()[0] == "2", (header, row)
    for p in pods:
        cluster.finish(p)
    eventually(lambda: phase_of(shoal, job_id) is Phase.SUCCEEDED, timeout=60)
    eventually(lambda: cluster.tj("ddp")["status"].get("phase") == "Succeeded", timeout=60)


def test_deleting_a_trainingjob_cancels_it_and_the_gc_removes_its_pods(
    cluster: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> None:
    cluster.add_node("kw-b1", gpus=8)
    queue(cluster)
    shoal = start_shoal(shoal_env)
    trainingjob(cluster, "doomed", workers=2)
    job_id = eventually(lambda: cluster.tj("doomed").get("status", {}).get("jobId"))
    running(cluster, job_id, 2)
    cluster.kubectl("delete", "tj", "doomed", "-n", JOBS_NS, "--wait=false")
    # The garbage collector (owner references) or Shoal's cancel takes the pods away.
    eventually(lambda: not cluster.job_pods(job_id), timeout=90)
    eventually(lambda: phase_of(shoal, job_id) in (Phase.CANCELLED, Phase.FAILED), timeout=60)
    assert not cluster.kubectl("get", "tj", "-n", JOBS_NS, "-o", "name").stdout.strip()


def test_a_gang_is_all_or_nothing(
    cluster: ControlPlane, shoal_env: dict[str, str], start_shoal: Callable[..., Shoal]
) -> None:
    for name in ("kw-c1", "kw-c2", "kw-c3"):
        cluster.add_node(name, gpus=4)
    queue(cluster)
    shoal = start_shoal(shoal_env)
    # A job that takes two of the three nodes runs first...
    trainingjob(cluster, "fits", workers=2, gpu=4)
    fits = eventually(lambda: cluster.tj("fits").get("status", {}).get("jobId"))
    running(cluster, fits, 2)
    # A gang larger than the whole cluster is refused at admission, as a POST would be.
    trainingjob(cluster, "never", workers=4, gpu=4)
    refused = eventually(
        lambda: (
            cluster.tj("never").get("status", {}).get("phase") == "Invalid"
            and cluster.tj("never")["status"]
        )
    )
    assert refused["reason"].startswith("spec.workers: 4 workers can never run"), refused
    assert [(c["type"], c["status"], c["reason"]) for c in refused["conditions"]] == [
        ("Valid", "False", "AdmissionRefused")
    ]
    # ...then three workers of 4 GPUs with one node free: never a partial gang.
    trainingjob(cluster, "toobig", workers=3, gpu=4)
    big = eventually(lambda: cluster.tj("toobig").get("status", {}).get("jobId"))
    for _ in range(10):  # several cycles
        assert not [p for p in cluster.job_pods(big) if p["spec"].get("nodeName")]
        time.sleep(0.3)
    assert phase_of(shoal, big) is Phase.PENDING
    for p in cluster.job_pods(fits):
        cluster.finish(p)
    # The GPUs are free: now the gang is placed, all three workers at once.
    pods = running(cluster, big, 3)
    assert len({p["spec"]["nodeName"] for p in pods}) == 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_rest_job_through_shoal_serve(
    cluster: ControlPlane, shoal_env: dict[str, str], tmp_path: Path
) -> None:
    """`shoal serve --backend kubernetes` as a process on this host, the chart's token."""
    cluster.add_node("kw-d1", gpus=8, product="NVIDIA-H100-80GB-HBM3")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        **shoal_env,
        "SHOAL_STATE_DIR": str(tmp_path / "state"),
        "SHOAL_BACKEND": "kubernetes",
        "PYTHONPATH": str(ROOT),
    }
    for k in ("SHOAL_TOKEN", "SHOAL_KUBE_API_URL", "SHOAL_API_TOKENS_FILE", "SHOAL_DATABASE_URL"):
        env.pop(k, None)
    log_path = tmp_path / "serve.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "scheduler.cli.main", "serve", "--port", str(port),
             "--min-runtime", "0", "--interval", "0.2"],
            env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:

            def up() -> bool:
                assert proc.poll() is None, log_path.read_text()
                try:
                    return (tmp_path / "state" / "admin-token").exists() and httpx.get(
                        f"{url}/healthz"
                    ).status_code == 200
                except httpx.HTTPError:
                    return False

            eventually(up, timeout=90)
            token = (tmp_path / "state" / "admin-token").read_text().strip()
            http = httpx.Client(
                base_url=f"{url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=30
            )
            r = http.post("/queues", json={"name": "rest", "guaranteed": {"total": 8}})
            assert r.status_code in (200, 201), r.text
            eventually(lambda: http.get("/nodes").json().get("data"), timeout=60)
            r = http.post(
                "/jobs",
                json={
                    "name": "rest-job",
                    "queue": "rest",
                    "framework": "pytorch",
                    "image": "ghcr.io/x/train:1",
                    "command": ["python", "train.py"],
                    "workers": 2,
                    "gpu": 2,
                    "cpu": "1",
                    "memory": "1Gi",
                },
            )
            assert r.status_code in (200, 201, 202), r.text
            job_id = r.json()["id"]
            pods = running(cluster, job_id, 2)
            assert all(p["spec"]["nodeName"] == "kw-d1" for p in pods)
            assert not any(p["metadata"].get("ownerReferences") for p in pods)
            eventually(lambda: http.get(f"/jobs/{job_id}").json()["phase"] == "Running", 60)
            for p in pods:
                cluster.finish(p)
            eventually(lambda: http.get(f"/jobs/{job_id}").json()["phase"] == "Succeeded", 60)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    # It released the Lease on the way out (SIGTERM), as the chart's pod would.
    assert "Shoal stopped" in log_path.read_text(), log_path.read_text()
