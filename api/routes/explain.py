"""`GET /api/v1/jobs/{id}/explain`: the core's full account of one job's fate, computed on
a snapshot built from the store the way the loop builds it (inventory, queues, live jobs,
the wall clock now) with the policy the loop runs (`Wiring.core_config`, given by
`shoal serve` from its policy file and flags; the default `Config` otherwise). Keys are
camelCase, as everywhere else in the API.

The store does not see the victims of a preemption that are still stopping (they are
Pending again, their workers not yet gone), so on it the job would look placeable. While
the loop's last word for the job is that it waits for them, the account says so
("preempting", "awaiting preemption of ...") rather than "placed". Other teams' jobs it
names are hidden from a reader who cannot see them (`api.redact`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import APIRouter, Path
from pydantic import field_validator

from api import queuestats, redact, views
from api.deps import PrincipalDep, ServicesDep, SessionDep
from api.models import PendingReasonPublic, StartEstimatePublic, _Model, camel_keys
from scheduler import model
from scheduler.core import explain as core_explain
from scheduler.spec import Phase
from scheduler.store import schema
from scheduler.store import views as store_views
from scheduler.store.db import Session
from scheduler.store.rows import get_job

router = APIRouter(prefix="/jobs", tags=["jobs"])


class ExplanationPublic(_Model):
    job_id: str
    queue: str
    decision: str  # "placed" | "preempting" | "pending" | "running" | "unknown"
    position: int | None  # 1-based place in the cycle's order of pending jobs
    queue_position: int | None  # 1-based place among its queue's pending jobs
    # The core's own lines (one explanation model): their fields are one word each, so
    # the same in camelCase.
    fair_share: list[core_explain.ShareLine]  # its queue, then its ancestors
    reason: PendingReasonPublic | None
    placements: list[dict[str, Any]]
    preempts: list[dict[str, Any]]
    candidates: list[core_explain.Candidate]
    policy: str  # the placement policy the account was computed with
    # The estimator's last word on when it starts (a pending job; `GET /jobs/{id}`'s).
    estimated_start: StartEstimatePublic | None = None

    @field_validator("placements", "preempts")
    @classmethod
    def _camel(cls, v: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [camel_keys(x) for x in v]


@router.get(
    "/{job_id}/explain",
    response_model=ExplanationPublic,
    response_model_by_alias=True,
)
def explain_job(
    services: ServicesDep,
    session: SessionDep,
    principal: PrincipalDep,
    job_id: str = Path(min_length=1, max_length=32),
) -> ExplanationPublic:
    """Fair-share arithmetic, place in the order, decision and the best candidate nodes."""
    row = get_job(session=session, job_id=job_id, queues=principal.visible_queues)
    config = services.wiring.core_config or model.Config()
    snap = queuestats.snapshot(session, config)
    found = dataclasses.asdict(core_explain.explain(snap, job_id))
    _countdown(found["reason"], snap.now)
    # A parent's line sums its whole subtree: a member sees only the queues it may see,
    # so another team's usage cannot be read off its parent.
    found["fair_share"] = [line for line in found["fair_share"] if principal.sees(line["queue"])]
    if found["decision"] == "placed" and _awaits_preemption(row):
        found.update(
            decision="preempting",
            reason=_awaiting(session, row),
            placements=[],
            candidates=[],
        )
    reason = found["reason"]
    ids = {p["job_id"] for p in found["preempts"]}
    if reason is not None:
        ids |= redact.referenced(reason["details"]) | redact.referenced_in(reason["message"])
    hidden = redact.Hidden(session, principal, ids)
    if hidden:
        found["preempts"] = [
            {**p, "job_id": hidden.id(p["job_id"]), "reason": hidden.text(p["reason"])}
            for p in found["preempts"]
        ]
        if reason is not None:
            found["reason"] = {
                **reason,
                "message": hidden.text(reason["message"]),
                "details": hidden.details(reason["details"]),
            }
    shown = redact.jobs(session, principal, [views.job(row)])[0].estimated_start
    return ExplanationPublic.model_validate(
        {**found, "policy": str(config.policy), "estimated_start": shown}
    )


def _countdown(reason: dict[str, Any] | None, now: float) -> None:
    """Seconds until a victim becomes preemptible, rendered at read time: the core's
    reasons name only the instant (`preemptibleAt`), so the stored reason stays stable."""
    at = (reason or {}).get("details", {}).get("preemptibleAt")
    if reason is not None and isinstance(at, int | float):
        reason["details"]["preemptibleInSeconds"] = round(max(0.0, at - now))


def _awaits_preemption(row: schema.JobRow) -> bool:
    return (
        row.phase == Phase.PENDING.value
        and row.pending_code == model.ReasonCode.WAITING_FOR_PREEMPTION.value
    )


def _awaiting(session: Session, row: schema.JobRow) -> dict[str, Any]:
    """The loop's stored reason, led by the jobs the job waits for."""
    details = dict(row.pending_details or {})
    ids = sorted(redact.referenced(details))
    names = {
        i: f"{name} ({i})" if name and name != i else i
        for i, (name, _queue) in store_views.job_labels(session=session, ids=ids).items()
    }
    waits = ", ".join(names.get(i, i) for i in ids) or "the jobs preempted for it"
    return {
        "code": row.pending_code,
        "message": f"awaiting preemption of {waits}: {row.pending_message or ''}".rstrip(": "),
        "details": details,
    }
