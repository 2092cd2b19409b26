"""The scheduling lease runs on the database's clock: replicas whose clocks disagree still
see one holder at a time (issue 10.15)."""

from __future__ import annotations

import time

import pytest

from scheduler.backends.local import cluster
from scheduler.backends.sim import SimBackend
from scheduler.clock import VirtualClock
from scheduler.loop.service import Loop, LoopConfig
from scheduler.store.db import Database
from scheduler.store.lease import lease_holder, release_lease


def replica(db: Database, name: str, skew_s: float) -> Loop:
    clock = VirtualClock(time.time() + skew_s)
    backend = SimBackend(cluster.load_nodes(), clock)
    return Loop(db, backend, clock=clock, config=LoopConfig(holder=name, lease_ttl_s=600))


@pytest.mark.parametrize("skew_s", [3600.0, -3600.0])
def test_a_replica_with_a_skewed_clock_neither_steals_nor_loses_the_lease(
    database: Database, skew_s: float
) -> None:
    # First the skewed replica leads, then the other one must not get in; then the reverse.
    for first, second in (("skewed", "true"), ("true", "skewed")):
        with database.session() as s:
            release_lease(session=s, holder="skewed")
            release_lease(session=s, holder="true")
        loops = {
            "skewed": replica(database, "skewed", skew_s),
            "true": replica(database, "true", 0),
        }
        loops[first].run_once()
        assert loops[first].leading
        loops[second].run_once()
        assert not loops[second].leading, f"{second} took {first}'s unexpired lease"
        with database.session() as s:
            assert lease_holder(session=s) == first
