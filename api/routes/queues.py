"""Queues: anyone reads the queues they may see; only admins create, change, delete."""

from __future__ import annotations

from fastapi import APIRouter, Path, status

from api import models, views
from api.deps import AdminDep, PrincipalDep, SessionDep
from api.errors import fail, feasibility_error
from scheduler import feasibility
from scheduler.spec.queue import QueueSpec
from scheduler.store import errors, queues
from scheduler.store.cluster import load_capacity, load_queues

router = APIRouter(prefix="/queues", tags=["queues"])
QueueName = Path(min_length=1, max_length=63)


def _not_found(name: str) -> errors.NotFound:
    return errors.NotFound(f"queue {name!r} does not exist", loc=("path", "name"))


@router.get("", response_model=models.QueuesPublic)
def list_queues(session: SessionDep, principal: PrincipalDep) -> models.QueuesPublic:
    visible = principal.visible_queues
    rows = queues.list_queues(session=session, names=None if visible is None else sorted(visible))
    return models.QueuesPublic(data=[views.queue(r) for r in rows], count=len(rows))


@router.post("", response_model=models.QueuePublic, status_code=status.HTTP_201_CREATED)
def create_queue(body: models.QueueCreate, session: SessionDep, _: AdminDep) -> models.QueuePublic:
    known = {q.name: q for q in load_queues(session=session)}
    if body.name in known:
        raise fail(409, f"queue {body.name!r} already exists", loc=["body", "name"])
    nodes = load_capacity(session=session)
    problems = feasibility.check_queue(body, queues=known, nodes=nodes)
    if problems:
        raise feasibility_error(problems)
    out = views.queue(queues.create_queue(session=session, spec=body))
    out.warnings = feasibility.queue_warnings(body, queues=known, nodes=nodes)
    return out


@router.get("/{name}", response_model=models.QueuePublic)
def get_queue(
    session: SessionDep, principal: PrincipalDep, name: str = QueueName
) -> models.QueuePublic:
    if not principal.sees(name):
        raise _not_found(name)
    try:
        return views.queue(queues.get_queue(session=session, name=name))
    except errors.NotFound:
        raise _not_found(name) from None


@router.patch("/{name}", response_model=models.QueuePublic)
def update_queue(
    body: models.QueueUpdate, session: SessionDep, _: AdminDep, name: str = QueueName
) -> models.QueuePublic:
    try:
        row = queues.get_queue(session=session, name=name)
    except errors.NotFound:
        raise _not_found(name) from None
    merged = queues.spec_of(row).model_dump(by_alias=True)
    merged.update(body.model_dump(by_alias=True, exclude_unset=True, exclude={"version"}))
    # The schema marks every field nullable: null on `parent`/`limit` means none, and on a
    # field with a default (guaranteed, weight, priority) it resets that default.
    for field in ("guaranteed", "weight", "priority"):
        if field in merged and merged[field] is None:
            del merged[field]
    spec = QueueSpec.model_validate(merged)
    known = {q.name: q for q in load_queues(session=session)}
    nodes = load_capacity(session=session)
    problems = feasibility.check_queue(spec, queues=known, nodes=nodes)
    if problems:
        raise feasibility_error(problems)
    updated = queues.update_queue(session=session, spec=spec, expected_version=body.version)
    out = views.queue(updated)
    out.warnings = feasibility.queue_warnings(spec, queues=known, nodes=nodes)
    return out


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT)
def delete_queue(session: SessionDep, _: AdminDep, name: str = QueueName) -> None:
    try:
        queues.delete_queue(session=session, name=name)
    except errors.NotFound:
        raise _not_found(name) from None
