"""Leader election over a coordination.k8s.io/v1 Lease: exactly one of two replicas
leads; the other takes over within the lease duration when the leader dies."""

from __future__ import annotations

import threading

from scheduler.backends.kubernetes import Kube, KubeConfig, LeaderElector, api_client

from .conftest import NS, eventually
from .fakeapi import FakeKube


def elector(config: KubeConfig, identity: str, duration: int = 2) -> LeaderElector:
    return LeaderElector(
        Kube(api_client(config), config), NS, identity, lease_duration_s=duration, renew_every_s=0.2
    )


def test_exactly_one_of_two_replicas_leads_and_the_other_takes_over(
    kube: FakeKube, config: KubeConfig
) -> None:
    a, b = elector(config, "replica-a"), elector(config, "replica-b")
    a.start()
    eventually(lambda: a.is_leader)
    b.start()
    for _ in range(10):  # b keeps polling and keeps following
        eventually(lambda: kube.get("leases", "shoal-scheduler", NS) is not None)
        assert a.is_leader and not b.is_leader
        threading.Event().wait(0.1)
    lease = kube.obj("leases", "shoal-scheduler", NS)
    assert lease["spec"]["holderIdentity"] == "replica-a"
    assert lease["spec"]["leaseDurationSeconds"] == 2

    a.stop(release=False)  # the leader dies without a word
    eventually(lambda: b.is_leader, timeout=4)
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
        assert sum(won) == 1, won  # the resourceVersion check (409) decides


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
