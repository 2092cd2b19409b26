"""The cluster as the scheduling core sees it: the queues as core `Queue`s, and the nodes
twice over: the inventory (each node's free room now) and the capacity (each node as if
empty, for admission's "can never run"). The loop writes the nodes; everyone reads them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TypeVar

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from scheduler import model
from scheduler.store import convert, schema

_NodeRow = TypeVar("_NodeRow", schema.InventoryRow, schema.CapacityRow)


def load_queues(*, session: Session) -> tuple[model.Queue, ...]:
    rows = session.scalars(select(schema.QueueRow).order_by(schema.QueueRow.name))
    return tuple(convert.queue(r) for r in rows)


def save_inventory(
    *, session: Session, nodes: Sequence[model.Node], now: datetime | None = None
) -> None:
    """Replace the inventory with `nodes` (those not listed are gone). Only rows that
    changed are written (`seen_at`: when a row last changed): at 1,000 nodes a row-by-row
    merge cost ~2 s a cycle while one node's free capacity moved."""
    _replace_nodes(session, schema.InventoryRow, nodes, now)


def save_capacity(
    *, session: Session, nodes: Sequence[model.Node], now: datetime | None = None
) -> None:
    """Replace what each node could hold if empty (`schema.CapacityRow`), as
    `save_inventory` does the free room."""
    _replace_nodes(session, schema.CapacityRow, nodes, now)


def _replace_nodes(
    session: Session,
    table: type[_NodeRow],
    nodes: Sequence[model.Node],
    now: datetime | None,
) -> None:
    at = now or schema.utcnow()
    names = [n.name for n in nodes]
    session.execute(delete(table).where(table.name.not_in(names)))
    rows = {r.name: r for r in session.scalars(select(table))}
    for n in nodes:
        values = {
            "cpu_milli": n.cpu_milli,
            "memory_mib": n.memory_mib,
            "gpu_count": n.gpu_count,
            "gpu_model": n.gpu_model,
            "gpu_memory_mib": n.gpu_memory_mib,
            "enforcement": str(n.enforcement),
            "slices": n.slices,
        }
        if table is schema.InventoryRow:  # capacity is the node as if empty: no such flag;
            values["no_sharing"] = n.no_sharing  # admission does not read labels and taints
            values["labels"] = dict(n.labels)
            values["taints"] = convert.taints_json(n.taints)
        row = rows.get(n.name)
        if row is None:
            session.add(table(name=n.name, seen_at=at, **values))
        elif any(getattr(row, k) != v for k, v in values.items()):
            for k, v in values.items():
                setattr(row, k, v)
            row.seen_at = at
    session.commit()


def load_inventory(*, session: Session) -> tuple[model.Node, ...]:
    rows = session.scalars(select(schema.InventoryRow).order_by(schema.InventoryRow.name))
    return tuple(convert.node(r) for r in rows)


def load_capacity(*, session: Session) -> tuple[model.Node, ...]:
    """Every node as it would be empty, for admission's "can never run"; the inventory
    until a scheduler has written capacity (one older than it, or none yet)."""
    rows = session.scalars(select(schema.CapacityRow).order_by(schema.CapacityRow.name))
    return tuple(convert.node(r) for r in rows) or load_inventory(session=session)
