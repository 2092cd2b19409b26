"""A node's labels and taints survive the store (issue 24 item 1): explain, the dashboard
and /metrics place jobs on the inventory the loop recorded, so a node selector or a taint
must mean there what it meant to the loop. Nodes recorded before migration 0009 read back
with neither."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import create_engine, text
from storebuild import node

from scheduler.model import Taint
from scheduler.store import db as store_db
from scheduler.store.cluster import load_capacity, load_inventory, save_capacity, save_inventory
from scheduler.store.db import Database

LABELLED = dataclasses.replace(
    node("h1"),
    labels={"nvidia.com/gpu.product": "H100", "pool": "training"},
    taints=(Taint("dedicated", "research", "NoSchedule"), Taint("spot", "", "PreferNoSchedule")),
)


def test_labels_and_taints_round_trip(database: Database) -> None:
    with database.session() as s:
        save_inventory(session=s, nodes=[LABELLED, node("a1", 4)])
        assert load_inventory(session=s) == (node("a1", 4), LABELLED)


def test_a_change_of_labels_or_taints_alone_is_written(database: Database) -> None:
    relabelled = dataclasses.replace(LABELLED, labels={"pool": "serving"})
    untainted = dataclasses.replace(relabelled, taints=())
    with database.session() as s:
        save_inventory(session=s, nodes=[LABELLED])
        save_inventory(session=s, nodes=[relabelled])
        assert load_inventory(session=s) == (relabelled,)
        save_inventory(session=s, nodes=[untainted])
        assert load_inventory(session=s) == (untainted,)


def test_capacity_rows_read_back_without_them(database: Database) -> None:
    """Capacity is for admission's "can never run", which does not look at labels."""
    with database.session() as s:
        save_capacity(session=s, nodes=[LABELLED])
        assert load_capacity(session=s) == (node("h1"),)


def test_a_node_recorded_before_0009_has_no_labels_or_taints(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    store_db.migrate(engine, "0008")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO inventory (name, cpu_milli, memory_mib, gpu_count, gpu_model,"
                " gpu_memory_mib, seen_at) VALUES ('old', 1000, 1024, 8, 'H100', 81920, :at)"
            ),
            {"at": datetime.now(UTC)},
        )
    engine.dispose()
    database = store_db.open_database(url)  # migrates to head
    with database.session() as s:
        (old,) = load_inventory(session=s)
    database.close()
    assert old.labels == {} and old.taints == ()
