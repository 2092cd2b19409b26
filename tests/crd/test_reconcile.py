"""The controller's TrainingJob reconcile as a table (pure), then `apply` on a real SQLite
store: a CR becomes a job once, a CR naming an unknown queue says so, delete cancels;
the status it writes (conditions that are metav1.Conditions, patches only of changes)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from scheduler.controller import apply as applying
from scheduler.controller import reconcile
from scheduler.spec import Phase
from scheduler.store import jobs, queues
from scheduler.store.cluster import load_queues, save_inventory
from scheduler.store.db import Database
from scheduler.store.rows import get_job

from .reconcilekit import condition, stored, tj


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
    valid = condition(decision, "Valid")
    assert valid["status"] == "False" and valid["reason"] == "InvalidSpec"
    assert valid["message"].startswith(field_), valid["message"]


def test_invalid_metadata_name() -> None:
    decision = reconcile.reconcile_trainingjob(tj(name="x" * 64), None)
    assert decision.action is None and "spec.name" in condition(decision, "Valid")["message"]


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
    assert condition(decision, "SpecApplied")["status"] == "True"
    assert decision.status["submittedAt"] == "2026-01-01T00:00:00Z"


def test_editing_an_immutable_field_is_refused_clearly() -> None:
    cr = tj()
    job = stored(cr)
    edited = copy.deepcopy(cr)
    edited["spec"]["workers"] = 4
    edited["metadata"]["generation"] = 2
    decision = reconcile.reconcile_trainingjob(edited, job)
    assert decision.action is None
    cond = condition(decision, "SpecApplied")
    assert cond["status"] == "False" and cond["reason"] == "ImmutableField"
    assert "spec.workers cannot change" in cond["message"]
    assert decision.status["observedGeneration"] == 2
    assert decision.status["phase"] == "Running"  # still runs as submitted


def test_an_invalid_edit_of_a_submitted_job_keeps_it() -> None:
    cr = tj()
    edited = tj(gpu=7.5)
    decision = reconcile.reconcile_trainingjob(edited, stored(cr))
    assert decision.action is None
    assert condition(decision, "SpecApplied")["reason"] == "InvalidEdit"


def test_deleting_cancels_unless_finished() -> None:
    cr = tj()
    cr["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert reconcile.reconcile_trainingjob(cr, stored(tj())).action == reconcile.Cancel("j1")
    done = stored(tj(), phase=Phase.SUCCEEDED.value)
    assert reconcile.reconcile_trainingjob(cr, done).action is None
    assert reconcile.reconcile_trainingjob(cr, None).action is None


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

        row = get_job(session=session, job_id=first["jobId"])
        assert reconcile.reconcile_trainingjob(tj(), row).action is None
        deleted = tj()
        deleted["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        applying.apply(session, reconcile.reconcile_trainingjob(deleted, row))
        row = get_job(session=session, job_id=first["jobId"])
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

    with database.session() as session:
        qcr = {"metadata": {"name": "vision"}, "spec": {"guaranteed": {"total": 4}}}
        applying.apply(session, reconcile.reconcile_queue(qcr, None))
        node = Node("n1", 64000, 512000, 8, "NVIDIA-H100-80GB-HBM3", 81559)
        save_inventory(session=session, nodes=[node])

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
        assert [q.name for q in load_queues(session=session)] == ["vision"]


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
