"""Nodes with every GPU and its sharing, and the cluster summary."""

from __future__ import annotations

from fastapi import APIRouter

from api import models, usage, views
from api.deps import PrincipalDep, SessionDep
from scheduler.store import jobs, queues

router = APIRouter(tags=["cluster"])


@router.get("/nodes", response_model=models.NodesPublic)
def list_nodes(session: SessionDep, principal: PrincipalDep) -> models.NodesPublic:
    """Every node the scheduler last saw; each GPU's model, memory and who holds which
    fraction (jobs outside the caller's queues show as anonymous shares)."""
    return views.nodes(usage.compute(session), principal)


@router.get("/cluster/summary", response_model=models.ClusterSummary)
def cluster_summary(session: SessionDep, principal: PrincipalDep) -> models.ClusterSummary:
    """GPUs total/allocated/idle, per-queue usage against guarantee and limit, pending."""
    visible = principal.visible_queues
    names = None if visible is None else sorted(visible)
    return views.summary(
        usage.compute(session),
        queues.list_queues(session=session, names=names),
        jobs.count_by_phase(session=session, queues=names),
    )
