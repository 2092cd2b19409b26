"""A TrainingJob deleted while no watcher ran (no leader, a restart) sends no DELETED
event: the next full list finds the store job without its CR and cancels it."""

from __future__ import annotations

import threading

from scheduler.backends.kubernetes import KubeConfig, api_client
from scheduler.controller.watcher import CrWatcher
from scheduler.spec import Phase
from scheduler.store.db import Database
from scheduler.store.rows import get_job

from .conftest import NS, eventually
from .fakeapi import FakeKube


def trainingjob(name: str) -> dict[str, object]:
    return {
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "queue": "vision",
            "framework": "pytorch",
            "image": "ghcr.io/x/train:1",
            "command": ["python", "train.py"],
            "workers": 1,
            "gpu": 1,
        },
    }


def test_a_trainingjob_deleted_while_unwatched_is_cancelled(
    kube: FakeKube, config: KubeConfig, database: Database
) -> None:
    kube.put("trainingjobs", trainingjob("gone"))
    kube.put("trainingjobs", trainingjob("kept"))
    watcher = CrWatcher(api_client(config), database.session, (NS,), resync_s=1)
    stop = threading.Event()
    threads = watcher.start(stop)

    def ids() -> dict[str, str]:
        out = {}
        for name in ("gone", "kept"):
            st = kube.obj("trainingjobs", name, NS).get("status") or {}
            if st.get("jobId"):
                out[name] = st["jobId"]
        return out

    job_ids = eventually(lambda: len(ids()) == 2 and ids(), timeout=15)
    stop.set()
    for t in threads:
        t.join(timeout=10)
    kube.remove("trainingjobs", "gone", NS)  # nobody watches: no DELETED event is seen

    def phase(job_id: str) -> str:
        with database.session() as session:
            return get_job(session=session, job_id=job_id).phase

    assert phase(job_ids["gone"]) == Phase.PENDING.value
    stop = threading.Event()
    threads = watcher.start(stop)
    try:
        eventually(lambda: phase(job_ids["gone"]) == Phase.CANCELLED.value, timeout=15)
        assert phase(job_ids["kept"]) == Phase.PENDING.value
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)
