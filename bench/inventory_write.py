"""The loop's inventory write at 1,000 nodes when a few nodes' free capacity moved (not a
test): the row-by-row merge it used to do, kept here as the baseline, against
`save_inventory` (only changed rows), in one process, SQLite and PostgreSQL (when
SHOAL_TEST_PG_URL is set; a schema of its own).

    nice .venv/bin/python -m bench.inventory_write
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from collections.abc import Callable

from sqlalchemy import delete
from sqlalchemy.orm import Session

from bench.serving import pg_schema
from scheduler.model import Node
from scheduler.store import schema
from scheduler.store.cluster import save_inventory
from scheduler.store.db import Database, open_database

NODES = 1000


def merge_every_row(session: Session, nodes: list[Node]) -> None:
    """The write before issue 10.14's fix: one merge (a SELECT and a write) per node."""
    at = schema.utcnow()
    names = [n.name for n in nodes]
    session.execute(delete(schema.InventoryRow).where(schema.InventoryRow.name.not_in(names)))
    for n in nodes:
        session.merge(
            schema.InventoryRow(
                name=n.name,
                cpu_milli=n.cpu_milli,
                memory_mib=n.memory_mib,
                gpu_count=n.gpu_count,
                gpu_model=n.gpu_model,
                gpu_memory_mib=n.gpu_memory_mib,
                seen_at=at,
            )
        )
    session.commit()


def changed_rows(session: Session, nodes: list[Node]) -> None:
    save_inventory(session=session, nodes=nodes)


def best_of(db: Database, write: Callable[[Session, list[Node]], None]) -> float:
    nodes = [Node(f"n{i:04d}", 64_000, 512_000, 8, "H100", 81_920) for i in range(NODES)]
    with db.session() as s:
        save_inventory(session=s, nodes=nodes)
    times = []
    for k in range(5):  # one more node's free CPU moved each time
        nodes[k] = dataclasses.replace(nodes[k], cpu_milli=nodes[k].cpu_milli - 1000)
        with db.session() as s:
            t = time.perf_counter()
            write(s, nodes)
            times.append(time.perf_counter() - t)
    return min(times)


def run(label: str, url: str) -> None:
    db = open_database(url)
    try:
        before, after = best_of(db, merge_every_row), best_of(db, changed_rows)
    finally:
        db.close()
    print(
        f"{label}: merge every row {before * 1000:.0f} ms, changed rows only "
        f"{after * 1000:.0f} ms, ratio {before / after:.1f}x (best of 5, {NODES} nodes)"
    )


def main() -> None:
    run("SQLite", f"sqlite:///{tempfile.mkdtemp(prefix='shoal-inv-')}/shoal.db")
    pg = os.environ.get("SHOAL_TEST_PG_URL")
    if pg:
        with pg_schema(pg, "inv") as url:
            run("PostgreSQL", url)
    else:
        print("PostgreSQL: skipped (SHOAL_TEST_PG_URL not set)")


if __name__ == "__main__":
    main()
