"""Stored rows -> the scheduling core's types (`scheduler.model`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler import model
from scheduler.core import request
from scheduler.spec import STORED, JobSpec
from scheduler.store import schema


def quota(data: dict[str, Any] | None, *, unlimited: bool) -> model.Quota:
    """The JSON quota column as a core `Quota`; a missing limit is unlimited."""
    if data is None:
        return model.Quota(total=None if unlimited else 0.0)
    total = data.get("total")
    by_model = {k: float(v) for k, v in data.items() if k != "total" and v is not None}
    if total is None:
        total_value: float | None = None if unlimited else 0.0
    else:
        total_value = float(total)
    return model.Quota(total=total_value, by_model=by_model)


def queue(row: schema.QueueRow) -> model.Queue:
    return model.Queue(
        name=row.name,
        guaranteed=quota(row.guaranteed, unlimited=False),
        limit=quota(row.limit, unlimited=True),
        weight=row.weight,
        priority=row.priority,
        parent=row.parent,
    )


def job_spec(row: schema.JobRow) -> JobSpec:
    return JobSpec.model_validate(row.spec, context=STORED)


def job_request(row: schema.JobRow, spec: JobSpec | None = None) -> model.JobRequest:
    """The core's request of a stored job: its spec's (`core.request`), with the row's
    id, name (a REST job may have had one made up), queue, priority and time."""
    return request.job_request(
        spec or job_spec(row),
        job_id=row.id,
        name=row.name,
        queue=row.queue,
        priority=row.priority,
        submitted_at=row.created_at.timestamp(),
    )


def placements(data: Sequence[Any]) -> tuple[model.WorkerPlacement, ...]:
    return tuple(
        model.WorkerPlacement(
            worker=int(p["worker"]),
            node=str(p["node"]),
            gpus=tuple(int(g) for g in p.get("gpus", ())),
            fraction=float(p.get("fraction", 1.0)),
        )
        for p in data
    )


def placements_json(items: Sequence[model.WorkerPlacement]) -> list[dict[str, Any]]:
    return [
        {"worker": p.worker, "node": p.node, "gpus": list(p.gpus), "fraction": p.fraction}
        for p in items
    ]


def node(row: schema.InventoryRow | schema.CapacityRow) -> model.Node:
    return model.Node(
        name=row.name,
        cpu_milli=row.cpu_milli,
        memory_mib=row.memory_mib,
        gpu_count=row.gpu_count,
        gpu_model=row.gpu_model,
        gpu_memory_mib=row.gpu_memory_mib,
        enforcement=model.Enforcement(row.enforcement or model.Enforcement.ADVISORY),
        slices=row.slices or 0,
        no_sharing=getattr(row, "no_sharing", "") or "",  # inventory rows only
        labels=dict(getattr(row, "labels", None) or {}),
        taints=tuple(
            model.Taint(str(t["key"]), str(t.get("value", "")), str(t["effect"]))
            for t in getattr(row, "taints", None) or ()
        ),
    )


def taints_json(taints: Sequence[model.Taint]) -> list[dict[str, str]]:
    return [{"key": t.key, "value": t.value, "effect": t.effect} for t in taints]
