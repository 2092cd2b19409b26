"""The controller's reconcile functions as a table (pure), then `apply` on a real SQLite
store: a CR becomes a job once, a CR naming an unknown queue says so, delete cancels."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from scheduler.controller import apply as applying
from scheduler.controller import reconcile
from scheduler.spec import Phase
from scheduler.store import jobs, queues
from scheduler.store.db import Database, open_database


def tj(name: str = "resnet", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "shoal.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {
            "name": name,
            "namespace": "shoal-jobs",
            "uid": f"uid-{name}",
            "generation": 1,
        },
        "spec": {"queue": "vision", "image": "x:1", "workers": 2, "gpu": 0.5, **spec},
    }


@dataclass
class FakeJob:
    spec: dict[str, Any]
    id: str = "j1"
    phase: str = "Running"
    queue: str = "vision"
    placements: list[Any] = field(default_factory=list)
    pending_message: str | None = None
    attempt: int = 0
    restarts: int = 0
    cancel_requested: bool = False
    created_at: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    started_at: datetime | None = None
    finished_at: datetime | None = None


def stored(cr: dict[str, Any], **kw: Any) -> FakeJob:
    return FakeJob(spec=jobs.spec_json(reconcile.job_spec_of(cr)), **kw)


def _cond(decision: reconcile.Decision, type_: str) -> dict[str, Any]:
    return next(c for c in decision.status["conditions"] if c["type"] == type_)


@pytest.mark.parametrize(
    ("spec", "field_"),
    [
        ({"gpu": 1.5}, "spec.gpu"),
        ({"gpu": -1}, "spec.gpu"),
        ({"queue": "Not_DNS"}, "spec.queue"),
        ({"command": "python train.py"}, "spec.command"),
        ({"workers": 0}, "spec.workers"),
        ({"gpuMemory": "20Gi"}, "spec"),  # with gpu: both given
        ({"bogus": True}, "spec.bogus"),
        ({"name": "other"}, "spec.name"),
    ],
)
def test_invalid_cr_is_not_scheduled_and_says_which_field(
    spec: dict[str, Any], field_: str
) -> None:
    cr = tj()
    cr["spec"].update(spec)
    decision = reconcile.reconcile_trainingjob(cr, None)
    assert decision.action is None
    assert decision.status["phase"] == reconcile.INVALID
    valid = _cond(decision, "Valid")
    assert valid["status"] == "False" and valid["reason"] == "InvalidSpec"
    assert valid["message"].startswith(field_), valid["message"]


def test_invalid_metadata_name() -> None:
    decision = reconcile.reconcile_trainingjob(tj(name="x" * 64), None)
    assert decision.action is None and "spec.name" in _cond(decision, "Valid")["message"]


def test_new_valid_cr_is_submitted_idempotently() -> None:
    decision = reconcile.reconcile_trainingjob(tj(), None)
    assert isinstance(decision.action, reconcile.Submit)
    assert decision.action.spec.name == "resnet"
    assert decision.action.idempotency_key == "cr:uid-resnet"
    assert decision.action.submitter == "crd:shoal-jobs"
    assert decision.status["phase"] == "Pending"


def test_unchanged_cr_reports_the_stored_job() -> None:
    cr = tj()
    job = stored(
        cr,
        placements=[
            {"worker": 0, "node": "n1", "gpus": [0], "fraction": 0.5},
            {"worker": 1, "node": "n1", "gpus": [0], "fraction": 0.5},
        ],
    )
    decision = reconcile.reconcile_trainingjob(cr, job)
    assert decision.action is None
    assert decision.status["phase"] == "Running" and decision.status["gpus"] == "1"
    assert _cond(decision, "SpecApplied")["status"] == "True"
    assert decision.status["submittedAt"] == "2026-01-01T00:00:00Z"


def test_editing_an_immutable_field_is_refused_clearly() -> None:
    cr = tj()
    job = stored(cr)
    edited = copy.deepcopy(cr)
    edited["spec"]["workers"] = 4
    edited["metadata"]["generation"] = 2
    decision = reconcile.reconcile_trainingjob(edited, job)
    assert decision.action is None
    cond = _cond(decision, "SpecApplied")
    assert cond["status"] == "False" and cond["reason"] == "ImmutableField"
    assert "spec.workers cannot change" in cond["message"]
    assert decision.status["observedGeneration"] == 2
    assert decision.status["phase"] == "Running"  # still runs as submitted


def test_an_invalid_edit_of_a_submitted_job_keeps_it() -> None:
    cr = tj()
    edited = tj(gpu=7.5)
    decision = reconcile.reconcile_trainingjob(edited, stored(cr))
    assert decision.action is None
    assert _cond(decision, "SpecApplied")["reason"] == "InvalidEdit"


def test_deleting_cancels_unless_finished() -> None:
    cr = tj()
    cr["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert reconcile.reconcile_trainingjob(cr, stored(tj())).action == reconcile.Cancel("j1")
    done = stored(tj(), phase=Phase.SUCCEEDED.value)
    assert reconcile.reconcile_trainingjob(cr, done).action is None
    assert reconcile.reconcile_trainingjob(cr, None).action is None


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


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Database]:
    db = open_database(f"sqlite:///{tmp_path / 'shoal.db'}")
    yield db
    db.close()


def test_apply_on_a_real_store(database: Database) -> None:
    with database.session() as session:
        # Unknown queue: the CR says so, and nothing is stored.
        status = applying.apply(session, reconcile.reconcile_trainingjob(tj(), None))
        assert status["phase"] == reconcile.INVALID
        assert status["reason"].startswith("spec.queue: queue 'vision' does not exist")
        assert jobs.list_jobs(session=session).items == []

        qcr = {"metadata": {"name": "vision"}, "spec": {"guaranteed": {"total": 4}}}
        applying.apply(session, reconcile.reconcile_queue(qcr, None))
        assert queues.get_queue(session=session, name="vision").guaranteed["total"] == 4

        first = applying.apply(session, reconcile.reconcile_trainingjob(tj(), None))
        again = applying.apply(session, reconcile.reconcile_trainingjob(tj(), None))
        assert first["jobId"] == again["jobId"]  # a repeat after a crash: one job
        assert len(jobs.list_jobs(session=session).items) == 1

        row = jobs.get_job(session=session, job_id=first["jobId"])
        assert reconcile.reconcile_trainingjob(tj(), row).action is None
        deleted = tj()
        deleted["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        applying.apply(session, reconcile.reconcile_trainingjob(deleted, row))
        row = jobs.get_job(session=session, job_id=first["jobId"])
        assert row.phase == Phase.CANCELLED.value


def test_status_patch_writes_only_changes() -> None:
    from scheduler.controller import watcher as crds

    first = reconcile.reconcile_trainingjob(tj(), None).status
    patch = crds.status_patch({}, copy.deepcopy(first), "2026-01-01T00:00:00Z")
    assert patch is not None
    assert patch["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    # The MODIFIED event of our own patch: same status, nothing to write.
    assert crds.status_patch(patch, copy.deepcopy(first), "2026-01-01T00:01:00Z") is None
    running = copy.deepcopy(first) | {"phase": "Running"}
    again = crds.status_patch(patch, running, "2026-01-01T00:02:00Z")
    assert again is not None and again["phase"] == "Running"
    assert again["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"


def test_a_trainingjob_gets_the_rest_apis_admission_check(database: Database) -> None:
    """An unknown gpuType, or more workers than the cluster could ever hold, is refused
    (Valid=False, phase Invalid, the field named) as POST /api/v1/jobs refuses it."""
    from scheduler.model import Node
    from scheduler.store import cycle

    with database.session() as session:
        qcr = {"metadata": {"name": "vision"}, "spec": {"guaranteed": {"total": 4}}}
        applying.apply(session, reconcile.reconcile_queue(qcr, None))
        node = Node("n1", 64000, 512000, 8, "NVIDIA-H100-80GB-HBM3", 81559)
        cycle.save_inventory(session=session, nodes=[node])

        status = applying.apply(
            session, reconcile.reconcile_trainingjob(tj("typo", gpuType=["H100"]), None)
        )
        assert status["phase"] == reconcile.INVALID
        assert status["reason"].startswith("spec.gpuType.0: no node has GPU type 'H100'")
        [valid] = status["conditions"]
        assert (valid["type"], valid["status"], valid["reason"]) == (
            "Valid",
            "False",
            "AdmissionRefused",
        )
        huge = reconcile.reconcile_trainingjob(tj("huge", workers=64, gpu=1), None)
        status = applying.apply(session, huge)
        assert status["phase"] == reconcile.INVALID and "spec.workers:" in status["reason"]
        assert jobs.list_jobs(session=session).items == []

        ok = reconcile.reconcile_trainingjob(tj("ok", gpuType=["NVIDIA-H100-80GB-HBM3"]), None)
        assert applying.apply(session, ok)["phase"] == "Pending"
        # A queue whose per-model guarantee names a GPU model no node has: refused too.
        bad = {"metadata": {"name": "nlp"}, "spec": {"guaranteed": {"total": 2, "A100": 2}}}
        status = applying.apply(session, reconcile.reconcile_queue(bad, None))
        assert status["conditions"][0]["status"] == "False"
        assert "spec.guaranteed" in status["reason"]
        assert [q.name for q in cycle.load_queues(session=session)] == ["vision"]


def _status_validator(crd: dict[str, Any]) -> Any:
    import jsonschema

    from .schemas import _to_draft4

    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return jsonschema.Draft4Validator(_to_draft4(root["properties"]["status"]))


def test_written_conditions_are_metav1_conditions() -> None:
    """Every condition the controller writes has type, status, reason, message,
    lastTransitionTime and observedGeneration, and passes the CRD's status schema."""
    from scheduler.controller import crdgen
    from scheduler.controller import watcher as crds

    tj_schema = _status_validator(crdgen.trainingjob_crd())
    cr = tj()
    cr["metadata"]["generation"] = 3
    outcomes = [
        reconcile.reconcile_trainingjob(cr, None),
        reconcile.reconcile_trainingjob(tj(workers=0), None),
        reconcile.reconcile_trainingjob(cr, stored(tj(workers=4))),
    ]
    for decision in outcomes:
        patch = crds.status_patch({}, copy.deepcopy(decision.status), "2026-01-01T00:00:00Z")
        assert patch is not None
        assert list(tj_schema.iter_errors(patch)) == []
        for c in patch["conditions"]:
            assert {"type", "status", "reason", "message", "lastTransitionTime"} <= set(c)
            assert c["observedGeneration"] == decision.status["observedGeneration"]
    first = crds.status_patch({}, copy.deepcopy(outcomes[0].status), "2026-01-01T00:00:00Z")
    assert first is not None and first["conditions"][0]["observedGeneration"] == 3
    # Written once, it settles: the same decision again is nothing to write.
    assert crds.status_patch(first, copy.deepcopy(outcomes[0].status), "2026-01-02") is None
    # The schema refuses what metav1.Condition refuses.
    bad = {"conditions": [{"type": "Valid", "status": "True", "message": ""}]}
    assert list(tj_schema.iter_errors(bad))


def test_a_queue_status_shows_its_allocated_gpus_and_pending_jobs(database: Database) -> None:
    from scheduler.model import WorkerPlacement
    from scheduler.store import cycle

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
        [live, *_] = cycle.live_jobs(session=session)
        cycle.record_placement(
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
    from scheduler.store import cycle

    patches: list[tuple[str, dict[str, Any]]] = []

    class StatusApi:  # what the watcher writes, kept instead of sent
        def patch_cluster_custom_object_status(
            self, group: str, version: str, plural: str, name: str, body: dict[str, Any]
        ) -> None:
            patches.append((name, body["status"]))

    watcher = crds.CrWatcher(None, database.session, "shoal-jobs")
    watcher.api = StatusApi()
    with database.session() as session:
        cycle.save_inventory(session=session, nodes=[node("n1", gpus=8)])
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
