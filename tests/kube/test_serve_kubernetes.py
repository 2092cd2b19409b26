"""`shoal serve --backend kubernetes` end to end against the fake API server: the real
scheduler loop and a SQLite store drive `KubeRuntime` (backend + leader election + CR
watcher), built from the chart's environment as `serve` builds it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler.backends.kubernetes import names
from scheduler.backends.kubernetes.runtime import KubeRuntime, from_settings
from scheduler.cli import settings
from scheduler.controller import watcher
from scheduler.loop.service import Loop, LoopConfig
from scheduler.model import WorkerPlacement
from scheduler.spec import JobSpec, Phase
from scheduler.spec.queue import QueueSpec
from scheduler.store import queues
from scheduler.store.db import Database, open_database
from scheduler.store.lease import release_lease
from scheduler.store.rows import get_job
from scheduler.store.submission import submit_job

from .conftest import NS, eventually, node, pod
from .fakeapi import FakeKube
from .test_fractional import run_reserve

pytestmark = pytest.mark.integration  # starts uvicorn and the runtime's threads

Obj = dict[str, Any]


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Database]:
    db = open_database(f"sqlite:///{tmp_path / 'shoal.db'}")
    yield db
    db.close()


@pytest.fixture
def chart_env(kube: FakeKube, tmp_path: Path) -> dict[str, str]:
    """The environment the Helm chart's Deployment gives the container."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "policy: binpack\nminRuntimeSeconds: 5\nstarvationSeconds: 60\n"
        "preemption: true\nintervalSeconds: 0.1\n"
    )
    sc = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    (tmp_path / "sc.json").write_text(json.dumps(sc))
    tolerations = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    (tmp_path / "tol.json").write_text(json.dumps(tolerations))
    return {
        "SHOAL_KUBE_API_URL": kube.url,
        "SHOAL_POLICY_FILE": str(policy),
        "SHOAL_WORKER_SECURITY_CONTEXT_FILE": str(tmp_path / "sc.json"),
        "SHOAL_WORKER_TOLERATIONS_FILE": str(tmp_path / "tol.json"),
        "SHOAL_JOBS_NAMESPACE": NS,
        "SHOAL_SCHEDULER_NAME": "shoal",
        "SHOAL_RESERVE_IMAGE": "ghcr.io/x/shoal:test",
        "SHOAL_LEADER_ELECTION": "false",
        "SHOAL_LEADER_ELECTION_NAMESPACE": "shoal-system",
        "SHOAL_LEADER_ELECTION_LEASE": "shoal-scheduler",
        "SHOAL_POD_NAME": "shoal-0",
    }


@pytest.fixture
def runtimes() -> Iterator[list[KubeRuntime]]:
    made: list[KubeRuntime] = []
    yield made
    for r in made:
        r.close()


def start(
    env: dict[str, str], database: Database, made: list[KubeRuntime]
) -> tuple[KubeRuntime, Loop]:
    """What `shoal serve` does with the chart's environment (minus uvicorn)."""
    s = settings.from_env(env)
    pol = settings.load_policy(s.policy_file, policy="fgd", min_runtime_s=60, interval_s=1)
    # A quick relist, so that status write-back shows within the test (default 30 s).
    rt = from_settings(s, leader_tasks=[watcher.leader_task(database.session, resync_s=1)])
    made.append(rt)
    loop = Loop(
        database,
        rt.backend,
        config=LoopConfig(
            holder=f"serve-{s.pod_name}",
            interval_s=pol.interval_s,
            core=pol.core,
            is_leader=rt.is_leader,
        ),
    )
    return rt, loop


def submit(database: Database, workers: int = 2) -> str:
    with database.session() as session:
        queues.create_queue(
            session=session,
            spec=QueueSpec.model_validate({"name": "vision", "guaranteed": {"total": 8}}),
        )
        row, _ = submit_job(
            session=session,
            spec=JobSpec(
                name="resnet",
                queue="vision",
                framework="pytorch",
                image="ghcr.io/x/train:1",
                command=["python", "train.py"],
                workers=workers,
                gpu=1,
                cpu="2",
                memory="8Gi",
            ),
            submitter="test",
        )
        return row.id


def phase_of(database: Database, job_id: str) -> Phase:
    with database.session() as session:
        return Phase(get_job(session=session, job_id=job_id).phase)


def cycle_until(loop: Loop, check: Callable[[], Any], timeout: float = 10.0) -> Any:
    def step() -> Any:
        loop.run_once()
        return check()

    return eventually(step, timeout=timeout, every=0.05)


def worker_pods(kube: FakeKube, job_id: str) -> list[Obj]:
    return [
        p for p in kube.objects("pods", NS) if names.annotations_of(p).get(names.JOB_ID) == job_id
    ]


def test_settings_reach_the_backend_and_the_loop(
    chart_env: dict[str, str], database: Database, runtimes: list[KubeRuntime]
) -> None:
    rt, loop = start(chart_env, database, runtimes)
    cfg = rt.backend.config
    assert cfg.namespace == NS and cfg.reserve_image == "ghcr.io/x/shoal:test"
    assert cfg.security_context == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert cfg.tolerations == ({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},)
    assert rt.elector is None and rt.is_leader()
    assert loop.config.core.policy == "binpack" and loop.config.core.min_runtime_s == 5
    assert loop.config.interval_s == 0.1


def test_a_pytorch_job_runs_through_the_loop_on_kubernetes(
    kube: FakeKube, chart_env: dict[str, str], database: Database, runtimes: list[KubeRuntime]
) -> None:
    kube.put("nodes", node("n1", gpus=4))
    kube.put("nodes", node("n2", gpus=4))
    rt, loop = start(chart_env, database, runtimes)
    cycle_until(loop, lambda: len(rt.backend.nodes()) == 2)
    job_id = submit(database)

    # One cycle places it: the store says Scheduled; the launch runs on the backend's
    # pool, off the loop's thread, so the Service and the bound pods follow in a moment.
    cycle_until(loop, lambda: phase_of(database, job_id) is Phase.SCHEDULED)
    stem = names.job_base(job_id, "resnet")
    service = eventually(lambda: kube.get("services", stem, NS))
    assert service["spec"]["clusterIP"] == "None"
    pods = eventually(
        lambda: (
            (ps := worker_pods(kube, job_id))
            and len(ps) == 2
            and all(p["spec"].get("nodeName") for p in ps)
            and ps
        )
    )
    assert sorted(p["metadata"]["name"] for p in pods) == [f"{stem}-a1-w0", f"{stem}-a1-w1"]
    for p in pods:
        assert p["spec"]["schedulerName"] == "shoal"
        assert not p["metadata"].get("ownerReferences")  # not a CR: nothing owns it
        assert p["spec"]["nodeName"] in ("n1", "n2")  # bound through pods/binding
        env = {e["name"]: e.get("value") for e in p["spec"]["containers"][0]["env"]}
        assert env["WORLD_SIZE"] == "2" and env["MASTER_ADDR"].startswith(f"{stem}-a1-w0.")
        assert p["spec"]["tolerations"] == [  # the chart's, and Shoal's node pool's
            {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
            {
                "key": "shoal.dev/pool",
                "operator": "Equal",
                "value": "shoal",
                "effect": "NoSchedule",
            },
        ]
    assert len({p["spec"]["nodeName"] for p in pods}) == 1  # binpack: one node holds both

    # The kubelet starts them: Running; they exit 0: Succeeded.
    for p in pods:
        kube.update("pods", p["metadata"]["name"], NS, {"status": {"phase": "Running"}})
    cycle_until(loop, lambda: phase_of(database, job_id) is Phase.RUNNING)
    for p in pods:
        kube.update("pods", p["metadata"]["name"], NS, {"status": {"phase": "Succeeded"}})
    cycle_until(loop, lambda: phase_of(database, job_id) is Phase.SUCCEEDED)
    assert all(v == 1 for v in kube.bindings.values())  # never bound twice


def test_a_trainingjob_cr_is_imported_and_gets_status(
    kube: FakeKube, chart_env: dict[str, str], database: Database, runtimes: list[KubeRuntime]
) -> None:
    kube.put("nodes", node("n1", gpus=4))
    kube.put(
        "queues",
        {"metadata": {"name": "vision"}, "spec": {"guaranteed": {"total": 4}, "weight": 1}},
    )
    rt, loop = start(chart_env, database, runtimes)
    eventually(lambda: rt.cr_watching)

    def stored_queue() -> bool:
        with database.session() as session:
            return any(q.name == "vision" for q in queues.list_queues(session=session))

    eventually(stored_queue)
    kube.put(
        "trainingjobs",
        {
            "metadata": {"name": "ddp", "namespace": NS},
            "spec": {
                "queue": "vision",
                "framework": "pytorch",
                "image": "ghcr.io/x/train:1",
                "command": ["python", "train.py"],
                "workers": 2,
                "gpu": 1,
            },
        },
    )
    status = eventually(lambda: kube.obj("trainingjobs", "ddp", NS).get("status") or {})
    job_id = status["jobId"]
    assert status["phase"] == "Pending" and status["queue"] == "vision"
    assert status["observedGeneration"] == 1
    with database.session() as session:
        assert get_job(session=session, job_id=job_id).spec["workers"] == 2

    cycle_until(loop, lambda: len(worker_pods(kube, job_id)) == 2)
    uid = kube.obj("trainingjobs", "ddp", NS)["metadata"]["uid"]
    for p in worker_pods(kube, job_id):  # `kubectl delete tj ddp` takes them along
        (owner,) = p["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("TrainingJob", "ddp", uid)
    for p in worker_pods(kube, job_id):
        kube.update("pods", p["metadata"]["name"], NS, {"status": {"phase": "Running"}})
    cycle_until(loop, lambda: phase_of(database, job_id) is Phase.RUNNING)
    # The periodic relist carries the store's phase onto the CR.
    st = eventually(
        lambda: (s := kube.obj("trainingjobs", "ddp", NS)["status"])["phase"] == "Running" and s
    )
    assert len(st["placements"]) == 2
    assert {c["type"]: c["status"] for c in st["conditions"]}["Scheduled"] == "True"
    # Status writes settle: our own patches come back as MODIFIED and change nothing.
    patches = [r for r in kube.requests if r[0] == "PATCH" and r[1].endswith("/status")]
    assert len(patches) < 10, patches


def test_of_two_replicas_only_the_leader_schedules(
    kube: FakeKube,
    chart_env: dict[str, str],
    database: Database,
    tmp_path: Path,
    runtimes: list[KubeRuntime],
) -> None:
    kube.put("nodes", node("n1", gpus=4))
    elected = {
        **chart_env,
        "SHOAL_LEADER_ELECTION": "true",
        "SHOAL_LEADER_ELECTION_NAMESPACE": NS,
        "SHOAL_LEADER_ELECTION_DURATION_SECONDS": "2",
    }
    rt_a, loop_a = start({**elected, "SHOAL_POD_NAME": "shoal-a"}, database, runtimes)
    eventually(lambda: rt_a.is_leader() and rt_a.cr_watching)
    # The second replica: its own connection to the same store, as two pods would have.
    other = open_database(f"sqlite:///{tmp_path / 'shoal.db'}")
    try:
        rt_b, loop_b = start({**elected, "SHOAL_POD_NAME": "shoal-b"}, other, runtimes)
        job_id = submit(database)
        for _ in range(10):
            assert loop_b.run_once() is None  # a follower does not even take the store lease
            loop_a.run_once()
        assert not rt_b.is_leader() and not rt_b.cr_watching
        assert phase_of(database, job_id) is Phase.SCHEDULED
        # The launch runs on the backend's pool, off the loop's thread.
        pods = eventually(lambda: (ps := worker_pods(kube, job_id)) and len(ps) == 2 and ps)
        assert all(n == 1 for n in kube.creates.values())
        lease = kube.obj("leases", "shoal-scheduler", NS)
        assert lease["spec"]["holderIdentity"] == "shoal-a"

        # The leader shuts down cleanly: it gives up the Lease (and, as `serve` does on
        # the way out, the store lease); the follower takes over and carries on.
        rt_a.close()
        with database.session() as session:
            release_lease(session=session, holder=loop_a.config.holder)
        eventually(rt_b.is_leader, timeout=5)
        eventually(lambda: rt_b.cr_watching)
        for p in pods:
            kube.update("pods", p["metadata"]["name"], NS, {"status": {"phase": "Running"}})
        cycle_until(loop_b, lambda: phase_of(other, job_id) is Phase.RUNNING)
        assert all(n == 1 for n in kube.creates.values())  # nothing launched twice
        assert kube.obj("leases", "shoal-scheduler", NS)["spec"]["holderIdentity"] == "shoal-b"
    finally:
        for r in runtimes:
            r.close()
        runtimes.clear()
        other.close()


def test_foreign_pods_are_scheduled_by_the_loop(
    kube: FakeKube, chart_env: dict[str, str], database: Database, runtimes: list[KubeRuntime]
) -> None:
    kube.put("nodes", node("n1", gpus=4))
    with database.session() as session:
        queues.create_queue(
            session=session,
            spec=QueueSpec.model_validate({"name": "research", "guaranteed": {"total": 4}}),
        )
    for name, queue in (("notebook", "research"), ("stray", "nowhere")):
        kube.put(
            "pods",
            pod(
                name,
                phase="Pending",
                scheduler="shoal",
                labels={"shoal.dev/queue": queue},
                annotations={"shoal.dev/gpu-fraction": "0.5"},
                requests={"cpu": "1", "memory": "4Gi"},
            ),
        )
    rt, loop = start(chart_env, database, runtimes)
    eventually(lambda: len(rt.backend.foreign_pods()) == 2 and rt.backend.nodes())
    report = loop.run_once()
    assert report is not None and report.applied.placed == ["pod:default/notebook"]
    # The fraction waits for its GPU's UUID (the reservation pod reports it), then binds.
    eventually(lambda: kube.get("pods", "shoal-gpu-n1-g0", NS))
    run_reserve(kube, "shoal-gpu-n1-g0")
    eventually(lambda: kube.obj("pods", "notebook", "default")["spec"].get("nodeName") == "n1")
    ran = cycle_until(loop, lambda: rt.backend.foreign_running())
    assert [(r.job.id, r.job.queue, r.placements) for r in ran] == [
        ("pod:default/notebook", "research", (WorkerPlacement(0, "n1", (0,), 0.5),))
    ]
    # Later cycles neither bind it again nor treat it as an orphan; the stray stays.
    for _ in range(3):
        again = loop.run_once()
        assert again is not None and again.applied.placed == []
    adopted = kube.obj("pods", "notebook", "default")
    assert adopted["spec"]["nodeName"] == "n1" and not adopted["metadata"].get("deletionTimestamp")

    # The "Scheduled" Event goes out on a thread of its own (a bind never waits for it).
    def scheduled() -> list[dict[str, Any]]:
        return [e for e in kube.objects("events", "default") if e.get("reason") == "Scheduled"]

    eventually(scheduled)
    assert len(scheduled()) == 1
    assert not kube.obj("pods", "stray", "default")["spec"].get("nodeName")
