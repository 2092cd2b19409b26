"""The controller's Queue reconcile (create, update, refuse, delete) and the status a
Queue CR shows: its allocated GPUs, pending jobs and the core's fair share."""

from __future__ import annotations

import copy
from typing import Any

from scheduler.controller import apply as applying
from scheduler.controller import reconcile
from scheduler.store import queues
from scheduler.store.cluster import save_inventory
from scheduler.store.db import Database
from scheduler.store.live import live_jobs
from scheduler.store.transitions import record_placement

from .reconcilekit import tj


def test_queue_reconcile() -> None:
    cr: dict[str, Any] = {
        "metadata": {"name": "vision", "generation": 1},
        "spec": {"guaranteed": {"total": 8, "H100": 4}},
    }
    out = reconcile.reconcile_queue(cr, None)
    assert isinstance(out.action, reconcile.UpsertQueue) and out.action.create
    assert out.action.spec.guaranteed.by_model == {"H100": 4.0}
    assert reconcile.reconcile_queue(cr, out.action.spec).action is None
    changed = copy.deepcopy(cr)
    changed["spec"]["weight"] = 3
    out2 = reconcile.reconcile_queue(changed, out.action.spec)
    assert isinstance(out2.action, reconcile.UpsertQueue) and not out2.action.create
    bad = reconcile.reconcile_queue({"metadata": {"name": "q"}, "spec": {"weight": 0}}, None)
    assert bad.action is None and "spec.weight" in bad.status["reason"]
    gone = {"metadata": {"name": "vision", "deletionTimestamp": "x"}}
    assert reconcile.reconcile_queue(gone, out.action.spec).action == reconcile.DeleteQueue(
        "vision"
    )


def test_a_queue_status_shows_its_allocated_gpus_and_pending_jobs(database: Database) -> None:
    from scheduler.model import WorkerPlacement

    with database.session() as session:
        qcr = {"metadata": {"name": "vision"}, "spec": {"guaranteed": {"total": 4}}}
        applying.apply(session, reconcile.reconcile_queue(qcr, None))
        assert applying.queue_usage(session, "vision") == {
            "allocated": 0,
            "pending": 0,
            "running": 0,
        }
        for name in ("a", "b", "c"):
            applying.apply(session, reconcile.reconcile_trainingjob(tj(name), None))
        [live, *_] = live_jobs(session=session)
        record_placement(
            session=session,
            job_id=live.id,
            expected_version=live.version,
            placements=[WorkerPlacement(0, "n1", (0,), 0.5), WorkerPlacement(1, "n1", (0,), 0.5)],
            attempt=1,
        )
        assert applying.queue_usage(session, "vision") == {
            "allocated": 1.0,
            "pending": 2,
            "running": 0,
        }
        # A parent shows its subtree (as the dashboard does).
        applying.apply(session, reconcile.reconcile_queue({"metadata": {"name": "dept"}}, None))
        child = {"metadata": {"name": "vision"}, "spec": {"parent": "dept", "guaranteed": 4}}
        applying.apply(
            session,
            reconcile.reconcile_queue(
                child, queues.spec_of(queues.get_queue(session=session, name="vision"))
            ),
        )
        assert applying.queue_usage(session, "dept")["allocated"] == 1.0
        assert applying.queue_usage(session, "dept")["pending"] == 2


def test_a_queue_status_shows_the_cores_fair_share(database: Database) -> None:
    """The watcher writes status.fairShare (the FairShare column): the core's weighted
    water-filling over the recorded inventory, the same figure the dashboard shows."""
    from support.builders import node

    from api import queuestats
    from scheduler.controller import watcher as crds

    patches: list[tuple[str, dict[str, Any]]] = []

    class StatusApi:  # what the watcher writes, kept instead of sent
        def patch_cluster_custom_object_status(
            self, group: str, version: str, plural: str, name: str, body: dict[str, Any]
        ) -> None:
            patches.append((name, body["status"]))

    watcher = crds.CrWatcher(None, database.session, ("shoal-jobs",))
    watcher.api = StatusApi()
    with database.session() as session:
        save_inventory(session=session, nodes=[node("n1", gpus=8)])
    vision = {"metadata": {"name": "vision"}, "spec": {"weight": 1}}
    nlp = {"metadata": {"name": "nlp"}, "spec": {"weight": 3}}
    watcher.queue(vision)
    watcher.queue(nlp)
    # No demand yet: nobody is owed anything.
    assert {name: st["fairShare"] for name, st in patches} == {"vision": 0.0, "nlp": 0.0}
    with database.session() as session:
        for name, queue in (("a", "vision"), ("b", "nlp")):
            cr = tj(name, queue=queue, workers=2, gpu=4)
            assert applying.apply(session, reconcile.reconcile_trainingjob(cr, None))["jobId"]
    patches.clear()
    watcher.queue({**vision, "status": {}})
    watcher.queue({**nlp, "status": {}})
    # 8 GPUs, both want 8: split 1:3 by weight.
    assert {name: st["fairShare"] for name, st in patches} == {"vision": 2.0, "nlp": 6.0}
    with database.session() as session:
        dashboard = {s.name: s.fair_share for s in queuestats.compute(queuestats.snapshot(session))}
    assert dashboard == {"vision": 2.0, "nlp": 6.0}
