"""Leader election over a coordination.k8s.io/v1 Lease: exactly one of two replicas
leads; the other takes over within the lease duration when the leader dies."""

from __future__ import annotations

import threading

import pytest

from scheduler.backends.kubernetes import (
    Kube,
    KubeConfig,
    LeaderElector,
    Unavailable,
    api_client,
)

from .conftest import NS, eventually
from .fakeapi import FakeKube

pytestmark = pytest.mark.integration  # starts electors on threads


def elector(config: KubeConfig, identity: str, duration: int = 2) -> LeaderElector:
    return LeaderElector(
        Kube(api_client(config), config), NS, identity, lease_duration_s=duration, renew_every_s=0.2
    )


def test_exactly_one_of_two_replicas_leads_and_the_other_takes_over(
    kube: FakeKube, config: KubeConfig
) -> None:
    # A lease long enough that a busy machine's scheduling delays (renewals every 0.2 s)
    # never make the leader miss its renew deadline (2/3 of it) during the test.
    a, b = elector(config, "replica-a", duration=8), elector(config, "replica-b", duration=8)
    a.start()
    eventually(lambda: a.is_leader)
    b.start()
    for _ in range(10):  # b keeps polling and keeps following
        eventually(lambda: kube.get("leases", "shoal-scheduler", NS) is not None)
        assert a.is_leader and not b.is_leader
        threading.Event().wait(0.1)
    lease = kube.obj("leases", "shoal-scheduler", NS)
    assert lease["spec"]["holderIdentity"] == "replica-a"
    assert lease["spec"]["leaseDurationSeconds"] == 8

    a.stop(release=False)  # the leader dies without a word
    eventually(lambda: b.is_leader, timeout=60)
    assert kube.obj("leases", "shoal-scheduler", NS)["spec"]["holderIdentity"] == "replica-b"
    assert kube.obj("leases", "shoal-scheduler", NS)["spec"]["leaseTransitions"] == 1
    b.stop()  # a clean shutdown releases the lease at once
    c = elector(config, "replica-c", duration=30)
    assert c.try_acquire_or_renew() and c.is_leader


def test_racing_replicas_never_both_lead(kube: FakeKube, config: KubeConfig) -> None:
    for round_ in range(8):
        kube.store["leases"].clear()
        replicas = [elector(config, f"r{round_}-{i}") for i in range(3)]
        gate = threading.Barrier(len(replicas))
        won: list[bool] = [False] * len(replicas)

        def run(
            i: int, gate: threading.Barrier, won: list[bool], replicas: list[LeaderElector]
        ) -> None:
            gate.wait()
            won[i] = replicas[i].try_acquire_or_renew()

        threads = [
            threading.Thread(target=run, args=(i, gate, won, replicas))
            for i in range(len(replicas))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # Safety: the resourceVersion check (409) lets at most one win. (None may win
        # on a loaded machine, if every call timed out; then one wins on a retry.)
        assert sum(won) <= 1, won
        if not any(won):
            eventually(lambda rs=replicas: any(r.try_acquire_or_renew() for r in rs))


def test_a_leader_that_cannot_renew_steps_down(kube: FakeKube, config: KubeConfig) -> None:
    clock = [0.0]
    a = LeaderElector(
        Kube(api_client(config), config), NS, "a", lease_duration_s=2, clock=lambda: clock[0]
    )
    assert a.try_acquire_or_renew()
    kube.inject(10_000, 503)
    clock[0] = 1.0
    quick = KubeConfig(
        **{**{f: getattr(config, f) for f in config.__slots__}, "retry_deadline_s": 0.1}
    )
    a.kube = Kube(api_client(quick), quick)
    assert a.try_acquire_or_renew() is True  # still inside its lease: keeps leading
    clock[0] = 2.5
    assert a.try_acquire_or_renew() is False and not a.is_leader


def test_a_leader_stops_acting_at_the_renew_deadline_before_its_lease_expires(
    kube: FakeKube, config: KubeConfig
) -> None:
    clock = [0.0]
    a = LeaderElector(
        Kube(api_client(config), config), NS, "a", lease_duration_s=3, clock=lambda: clock[0]
    )
    assert a.leader_until() is None
    assert a.try_acquire_or_renew()
    until = a.leader_until()
    assert until is not None and until <= 2.0  # 2/3 of the 3 s lease, not all of it
    clock[0] = 1.9
    assert a.is_leader
    clock[0] = 2.1  # the Lease is still a's for another 0.9 s, but a no longer acts
    assert not a.is_leader
    # A follower could not have taken over yet: a's last write is safely before that.
    b = LeaderElector(
        Kube(api_client(config), config), NS, "b", lease_duration_s=3, clock=lambda: clock[0]
    )
    assert b.try_acquire_or_renew() is False
    assert a.try_acquire_or_renew() and a.is_leader  # renewing restores it


def test_a_conflict_on_renew_is_reread_not_taken_as_lost(
    kube: FakeKube, config: KubeConfig
) -> None:
    a = elector(config, "a", duration=30)
    assert a.try_acquire_or_renew()
    kube.inject(1, 409, path="leases", method="PUT")  # a stale resourceVersion, once
    assert a.try_acquire_or_renew() is True and a.is_leader
    # A real conflict (another holder took the Lease) still loses after the re-read.
    lease = a.kube.get("leases", "shoal-scheduler", NS)
    assert lease is not None
    lease["spec"]["holderIdentity"] = "b"
    a.kube.replace("leases", "shoal-scheduler", lease, NS)
    kube.inject(1, 409, path="leases", method="PUT")
    assert a.try_acquire_or_renew() is False and not a.is_leader


def test_writes_are_fenced_by_the_renew_deadline(kube: FakeKube, config: KubeConfig) -> None:
    """A cycle in progress cannot write once leadership ends: the backend's client
    (fenced as KubeRuntime wires it) refuses writes past the elector's renew deadline,
    while reads still work."""
    a = LeaderElector(
        Kube(api_client(config), config), NS, "a", lease_duration_s=30, renew_deadline_s=1.0
    )
    writer = Kube(api_client(config), config)
    writer.fence = a.leader_until
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fenced"}}
    with pytest.raises(Unavailable, match="not the leader"):
        writer.create("configmaps", cm, NS)  # not leading yet
    assert a.try_acquire_or_renew()
    writer.create("configmaps", cm, NS)  # leading: the write goes through
    eventually(lambda: not a.is_leader, timeout=30)  # no renewal: the deadline passes
    with pytest.raises(Unavailable, match="not the leader"):
        writer.delete("configmaps", "fenced", NS)
    assert writer.get("configmaps", "fenced", NS) is not None  # reads are not fenced
    assert a.try_acquire_or_renew()
    writer.delete("configmaps", "fenced", NS)
    a.release()
    with pytest.raises(Unavailable, match="not the leader"):
        writer.create("configmaps", cm, NS)
