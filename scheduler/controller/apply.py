"""Carries out a reconcile `Outcome` on the store (the only I/O of the controller), and
turns the store's refusals (unknown queue, a parent that does not exist) into status
conditions on the CR. Called by the CR watcher in `scheduler.backends.kubernetes.crds`.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from scheduler.controller import reconcile
from scheduler.store import errors, jobs, queues


def apply(session: Session, outcome: reconcile.Outcome) -> dict[str, Any]:
    """Run `outcome.action`; returns the status patch to write (outcome's, amended)."""
    status = dict(outcome.status)
    action = outcome.action
    try:
        if isinstance(action, reconcile.Submit):
            row, _ = jobs.submit_job(
                session=session,
                spec=action.spec,
                submitter=action.submitter,
                idempotency_key=action.idempotency_key,
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
        # e.g. "queue 'vision' does not exist": the CR says so and nothing changed.
        loc = ".".join(str(p) for p in ("spec", *exc.loc))
        message = f"{loc}: {exc}"
        status.update(
            phase=reconcile.INVALID
            if isinstance(action, reconcile.Submit)
            else status.get("phase"),
            reason=message,
            conditions=[reconcile.condition("Valid", False, type(exc).__name__, message)],
        )
        status = {k: v for k, v in status.items() if v is not None}
    return status
