"""A restarted `shoal serve` has its predecessor's lease identity and takes the lease at once."""

from __future__ import annotations

from pathlib import Path

from scheduler.cli.wiring import lease_identity
from scheduler.store.db import open_database
from scheduler.store.lease import acquire_lease


def test_same_state_directory_same_identity_across_restarts(tmp_path: Path) -> None:
    first = lease_identity(tmp_path, pod_name=None, owns_state=True)
    again = lease_identity(tmp_path, pod_name=None, owns_state=True)
    assert first == again and str(tmp_path) in first
    assert lease_identity(tmp_path / "b", pod_name=None, owns_state=True) != first
    # A second process on a directory another one holds never shares the holder's name.
    assert lease_identity(tmp_path, pod_name=None, owns_state=False) != first
    assert lease_identity(tmp_path, pod_name="shoal-0", owns_state=True) == "serve-shoal-0"


def test_restarted_replica_takes_its_unexpired_lease_back(tmp_path: Path) -> None:
    db = open_database(f"sqlite:///{tmp_path / 'shoal.db'}")
    me = lease_identity(tmp_path, pod_name=None, owns_state=True)
    try:
        with db.session() as s:
            assert acquire_lease(session=s, holder=me, ttl_s=600)
        # SIGKILL, restart at once: the lease has not expired.
        with db.session() as s:
            assert not acquire_lease(session=s, holder="serve-12345", ttl_s=600)
        with db.session() as s:
            assert acquire_lease(session=s, holder=me, ttl_s=600)
    finally:
        db.close()
