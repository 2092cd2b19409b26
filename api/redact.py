"""What a reader learns of other teams' jobs through reasons and explanations: nothing.

A pending reason names the jobs its job waits for (the victims of a preemption, the jobs
still stopping, a reservation's holder), and so do explain's preemptions and a victim's
"Preempted (for X)". To a reader who cannot see such a job's queue (a job that is 404 for
them), it is "a job in another queue": its name and id leave the message, and its id the
details. An id the store does not know (a foreign pod) is hidden too. Admins see all.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from api import models
from api.auth import Principal
from scheduler.store import views as store_views
from scheduler.store.db import Session

HIDDEN = "a job in another queue"
HIDDEN_ID = "hidden"
# Details keys that hold job ids (see scheduler/core/reasons.py).
_REFS = ("victims", "stopping", "reserved_for", "reservedFor")  # stored, and as served
T = TypeVar("T", models.JobPublic, models.JobEventPublic)
_M = TypeVar("_M", models.Condition, models.ResizePublic)
_FOR = re.compile(r"\(for ([A-Za-z0-9-]+)\)")


def referenced(details: Mapping[str, Any]) -> set[str]:
    out: set[str] = set()
    for key in _REFS:
        value = details.get(key)
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str) and v:
                out.add(v)
    return out


def referenced_in(text: str) -> set[str]:
    """Ids a message names as "(for X)": the job a preemption made room for."""
    return set(_FOR.findall(text))


class Hidden:
    """The referenced jobs one reader may not see: id -> (label, queue)."""

    def __init__(self, session: Session, principal: Principal, ids: Iterable[str]) -> None:
        self.jobs: dict[str, tuple[str, str | None]] = {}
        wanted = set(ids)
        if principal.visible_queues is None or not wanted:
            return
        known = store_views.job_labels(session=session, ids=wanted)
        for job_id in wanted:
            name, queue = known.get(job_id, ("", None))
            if queue is not None and principal.sees(queue):
                continue
            label = f"{name} ({job_id})" if name and name != job_id else job_id
            self.jobs[job_id] = (label, queue)

    def __bool__(self) -> bool:
        return bool(self.jobs)

    def text(self, message: str) -> str:
        for job_id, (label, queue) in self.jobs.items():
            if queue is not None:
                message = message.replace(f"job {label} in queue {queue}", HIDDEN)
                message = message.replace(f"{label} in queue {queue}", HIDDEN)
            message = message.replace(label, HIDDEN).replace(job_id, HIDDEN)
        return message.replace(f"job {HIDDEN}", HIDDEN)

    def id(self, value: object) -> object:
        if isinstance(value, str) and value in self.jobs:
            return HIDDEN_ID
        return value

    def details(self, details: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(details)
        for key in _REFS:
            value = out.get(key)
            if isinstance(value, list):
                out[key] = [self.id(v) for v in value]
            elif value is not None:
                out[key] = self.id(value)
        return out


def reason(
    hidden: Hidden, r: models.PendingReasonPublic | None
) -> models.PendingReasonPublic | None:
    if r is None or not hidden:
        return r
    return models.PendingReasonPublic(
        code=r.code, message=hidden.text(r.message), details=hidden.details(r.details)
    )


def _hiding(
    session: Session,
    principal: Principal,
    items: list[T],
    refs: Callable[[T], set[str]],
    hide: Callable[[Hidden, T], T],
) -> list[T]:
    """`items` with the jobs they name (`refs`) that `principal` may not see hidden by
    `hide`; one query for the whole page, none for an admin."""
    if principal.visible_queues is None:
        return items
    hidden = Hidden(session, principal, set().union(*map(refs, items)))
    if not hidden:
        return items
    return [hide(hidden, item) for item in items]


def _job_texts(j: models.JobPublic) -> list[str]:
    """Every text of a job's view that can name another job: the one list both finding
    and hiding read, so a field added here is hidden everywhere it is served."""
    e = j.estimated_start
    return [
        *(c.message for c in j.conditions),
        *(r.message for r in j.resizes),
        *([] if j.pending_reason is None else [j.pending_reason.message]),
        *([] if e is None else [e.basis, e.unknown]),
    ]


def _job_refs(j: models.JobPublic) -> set[str]:
    ids = set().union(*map(referenced_in, _job_texts(j)))
    if j.pending_reason is not None:
        ids |= referenced(j.pending_reason.details)
    return ids


def _hide_job(hidden: Hidden, j: models.JobPublic) -> models.JobPublic:
    def text(item: _M) -> _M:
        return item.model_copy(update={"message": hidden.text(item.message)})

    e = j.estimated_start
    if e is not None:
        e = e.model_copy(update={"basis": hidden.text(e.basis), "unknown": hidden.text(e.unknown)})
    return j.model_copy(
        update={
            "pending_reason": reason(hidden, j.pending_reason),
            "conditions": [text(c) for c in j.conditions],
            "resizes": [text(r) for r in j.resizes],
            "estimated_start": e,
        }
    )


def _event_refs(e: models.JobEventPublic) -> set[str]:
    return referenced_in(e.message) | referenced(e.data)


def _hide_event(hidden: Hidden, e: models.JobEventPublic) -> models.JobEventPublic:
    return e.model_copy(update={"message": hidden.text(e.message), "data": hidden.details(e.data)})


def jobs(
    session: Session, principal: Principal, items: list[models.JobPublic]
) -> list[models.JobPublic]:
    """`items` with every other team's job they name hidden (one query for the page)."""
    return _hiding(session, principal, items, _job_refs, _hide_job)


def events(
    session: Session, principal: Principal, items: list[models.JobEventPublic]
) -> list[models.JobEventPublic]:
    """A job's history with the other teams' jobs it names hidden ("Preempted (for X)")."""
    return _hiding(session, principal, items, _event_refs, _hide_event)
