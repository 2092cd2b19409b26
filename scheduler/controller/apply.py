"""Carries out a reconcile `Decision` on the store (the only I/O of the controller), and
turns refusals into status conditions on the CR. Before storing anything it runs the
feasibility checks the REST API runs (`scheduler.feasibility`: unknown queue, a GPU type no
node has, more workers than the cluster could ever hold, a queue tree that does not add
up), so a TrainingJob or Queue is accepted or refused for the same reasons as a POST.
Called by the CR watcher in `scheduler.controller.watcher`.
"""

from __future__ import annotations

from typing import Any

from scheduler import feasibility
from scheduler.controller import reconcile
from scheduler.spec.allowed import Allowances
from scheduler.store import crstatus, errors, jobs, queues
from scheduler.store.cluster import load_capacity, load_queues
from scheduler.store.db import Session
from scheduler.store.submission import submit_job


def _refused(status: dict[str, Any], action: reconcile.Action, reason: str, message: str) -> None:
    status.update(
        phase=reconcile.INVALID if isinstance(action, reconcile.Submit) else status.get("phase"),
        reason=message,
        conditions=[reconcile.condition("Valid", False, reason, message)],
    )


def _feasibility(
    session: Session, action: reconcile.Action, chart_limits: Allowances | None
) -> str | None:
    """What the REST API's feasibility checks would say against `action` ("spec.gpuType.0: ..."),
    or None when it admits."""
    if isinstance(action, reconcile.Submit):
        known = {q.name: q for q in load_queues(session=session)}
        nodes = load_capacity(session=session)
        problems = feasibility.check_job(
            action.spec,
            queues=known,
            nodes=nodes,
            limits=queues.load_allowed(session=session),
            chart_limits=chart_limits,
        )
    elif isinstance(action, reconcile.UpsertQueue):
        known = {q.name: q for q in load_queues(session=session)}
        nodes = load_capacity(session=session)
        problems = feasibility.check_queue(action.spec, queues=known, nodes=nodes)
    else:
        return None
    if not problems:
        return None
    return "; ".join(".".join(str(p) for p in ("spec", *pr.loc)) + f": {pr.msg}" for pr in problems)


def apply(
    session: Session, decision: reconcile.Decision, chart_limits: Allowances | None = None
) -> dict[str, Any]:
    """Run `decision.action`; returns the status patch to write (decision's, amended).
    `chart_limits`: the chart's admission.allowed, as the REST API applies them."""
    status = dict(decision.status)
    action = decision.action
    refusal = _feasibility(session, action, chart_limits)
    if refusal is not None:
        _refused(status, action, "AdmissionRefused", refusal)
        return {k: v for k, v in status.items() if v is not None}
    try:
        if isinstance(action, reconcile.Submit):
            row, _ = submit_job(
                session=session,
                spec=action.spec,
                submitter=action.submitter,
                idempotency_key=action.idempotency_key,
                origin=action.origin,
            )
            status.update(reconcile.status_for(row))
        elif isinstance(action, reconcile.Cancel):
            jobs.cancel_job(session=session, job_id=action.job_id, by="kubectl delete")
        elif isinstance(action, reconcile.UpsertQueue):
            if action.create:
                queues.create_queue(session=session, spec=action.spec)
            else:
                queues.update_queue(session=session, spec=action.spec)
        elif isinstance(action, reconcile.DeleteQueue):
            queues.delete_queue(session=session, name=action.name)
    except errors.StoreError as exc:
        # e.g. a parent queue deleted meanwhile: the CR says so and nothing changed.
        loc = ".".join(str(p) for p in ("spec", *exc.loc))
        _refused(status, action, type(exc).__name__, f"{loc}: {exc}")
        status = {k: v for k, v in status.items() if v is not None}
    return status


def queue_usage(session: Session, name: str) -> dict[str, Any]:
    """What a Queue's status shows of its jobs now (`crstatus.queue_usage`): GPUs held,
    jobs waiting and running, over its whole subtree."""
    return crstatus.queue_usage(session=session, name=name)
