"""Per-node GPUs from DRA devices, and the devices chosen for one worker: whole GPUs,
shares of consumable capacity, MIG devices; and, over random clusters and claims, that a
choice never takes what is taken, overfills a capacity, or overflows a counter."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.draslices import allocated_claim, gpu_class, gpu_slice

from scheduler.backends.kubernetes.dra import (
    Choice,
    Device,
    DeviceClasses,
    Inventory,
    NodeGpus,
    Unfit,
    Usage,
    choose,
    node_gpus,
    offered,
    read_slices,
)

GIB = 1024**3
D = "gpu.nvidia.com"
MEM = f"{D}/memory"
CLASSES = DeviceClasses([gpu_class(), gpu_class("mig.nvidia.com", type="mig")])


def node(**kw: Any) -> tuple[Inventory, NodeGpus]:
    i = read_slices(gpu_slice("n", **kw))
    return i, node_gpus(i, CLASSES, "gpu.nvidia.com", "mig.nvidia.com")["n"]


def names(choice: Choice | Unfit) -> list[tuple[str, Mapping[str, int] | None]]:
    assert isinstance(choice, Choice), choice
    return [(d.name, c) for d, c in choice]


def claim(*results: Any) -> dict[str, Any]:
    return allocated_claim(
        "c", [(D, "n", *r) if isinstance(r, tuple) else (D, "n", r) for r in results]
    )


# ---- the GPU view ----


def test_node_gpus_in_index_order_with_model_memory_and_uuid() -> None:
    _, n = node(gpus=12, memory_gib=141, product="NVIDIA H200")
    assert [g.device.name for g in n.gpus] == [f"gpu-{i}" for i in range(12)]
    g = n.gpus[10]
    assert (g.model, g.memory_mib, g.mig_profile, g.parent) == (
        "NVIDIA H200",
        141 * 1024,
        None,
        None,
    )
    assert g.uuid.startswith("GPU-")
    assert (n.migs, n.shareable, n.device_class) == ({}, False, "gpu.nvidia.com")


def test_mig_devices_hang_under_their_gpu_smallest_first() -> None:
    _, n = node(gpus=2, mig=True)
    assert [g.device.name for g in n.gpus] == ["gpu-0", "gpu-1"]
    migs = n.migs["gpu-1"]
    assert [m.mig_profile for m in migs] == ["1g.10gb"] * 7 + ["2g.20gb"] * 3 + ["3g.40gb"] * 2 + [
        "7g.80gb"
    ]
    assert all(m.parent is n.gpus[1].device for m in migs)
    assert migs[0].memory_mib == 10 * 1024


def test_mig_devices_in_the_gpu_class_count_too() -> None:
    """A driver whose one class selects both kinds: a profile makes a MIG device."""
    i = read_slices(gpu_slice("n", gpus=1, mig=True))
    only_driver = DeviceClasses(
        [{"metadata": {"name": "all"}, "spec": {"selectors": [{"cel": {"expression": "true"}}]}}]
    )
    n = node_gpus(i, only_driver, "all")["n"]
    assert [g.device.name for g in n.gpus] == ["gpu-0"] and len(n.migs["gpu-0"]) == 13


def test_shareable_means_every_gpu_shares_memory() -> None:
    assert node(consumable=True)[1].shareable
    i = read_slices(
        gpu_slice("n", gpus=1, consumable=True) + gpu_slice("n", driver="x.example.com")
    )
    classes = DeviceClasses([{"metadata": {"name": "any"}, "spec": {}}])
    assert not node_gpus(i, classes, "any")["n"].shareable


def test_other_classes_and_nodes_stay_apart() -> None:
    i = read_slices(gpu_slice("a", gpus=1) + gpu_slice("b", gpus=3, driver="gpu.example.com"))
    assert list(node_gpus(i, CLASSES, "gpu.nvidia.com")) == ["a"]


# ---- choosing ----


@pytest.mark.parametrize(
    ("kw", "claims", "indices", "fraction", "expected"),
    [
        ({"gpus": 4}, [], (1, 3), 1.0, [("gpu-1", None), ("gpu-3", None)]),
        ({"gpus": 2, "consumable": True}, [], (0,), 1.0, [("gpu-0", {MEM: 80 * GIB})]),
        ({"consumable": True}, [], (1,), 0.25, [("gpu-1", {MEM: 20 * GIB})]),
        ({"consumable": True}, [], (1,), 0.33, [("gpu-1", {MEM: 27 * GIB})]),  # 26.4 -> step
        ({"consumable": True}, [], (0,), 0.001, [("gpu-0", {MEM: GIB})]),  # min
        (
            {"consumable": True},
            [("gpu-0", {"memory": "70Gi"})],
            (0,),
            0.125,
            [("gpu-0", {MEM: 10 * GIB})],
        ),
        ({"mig": True}, [], (0,), 0.1, [("gpu-0-mig-1g10gb-0", None)]),
        ({"mig": True}, [], (0,), 0.125, [("gpu-0-mig-1g10gb-0", None)]),
        ({"mig": True}, [], (1,), 0.2, [("gpu-1-mig-2g20gb-0", None)]),
        ({"mig": True}, [], (0,), 0.5, [("gpu-0-mig-3g40gb-0", None)]),
        ({"mig": True}, [], (0,), 0.9, [("gpu-0-mig-7g80gb-0", None)]),
        ({"mig": True}, ["gpu-0-mig-1g10gb-0"], (0,), 0.1, [("gpu-0-mig-1g10gb-1", None)]),
        (
            {"mig": True},
            [f"gpu-0-mig-1g10gb-{k}" for k in range(6)],
            (0,),
            0.1,
            [("gpu-0-mig-1g10gb-6", None)],
        ),
        (
            {"mig": True},
            ["gpu-0-mig-1g10gb-0", "gpu-0-mig-3g40gb-0"],
            (0,),
            0.1,
            [("gpu-0-mig-1g10gb-1", None)],
        ),
        ({"mig": True}, [], (0, 1), 1.0, [("gpu-0", None), ("gpu-1", None)]),
    ],
)
def test_choices(
    kw: dict[str, Any],
    claims: list[Any],
    indices: tuple[int, ...],
    fraction: float,
    expected: list[Any],
) -> None:
    i, n = node(**kw)
    u = Usage.from_claims([claim(*claims)] if claims else [], i)
    assert names(choose(n, u, indices, fraction)) == expected


def test_a_mig_choice_names_its_profile() -> None:
    i, n = node(mig=True)
    got = choose(n, Usage.from_claims([], i), (0,), 0.3)
    assert isinstance(got, Choice) and got.mig_profile == "3g.40gb"
    assert choose(n, Usage.from_claims([], i), (0,), 1.0).mig_profile is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("kw", "claims", "indices", "fraction", "why"),
    [
        ({}, [], (0,), 0.5, "GPU gpu-0 is neither shared by capacity nor partitionable"),
        ({}, ["gpu-1"], (0, 1), 1.0, "whole GPU gpu-1 is not free: gpu-1 is in use"),
        (
            {},
            [],
            (2,),
            1.0,
            "node n (DeviceClass gpu.nvidia.com) offers 2 GPUs; there is no GPU index 2",
        ),
        ({}, [], (0, 0), 1.0, "are empty or repeat"),
        ({}, [], (), 1.0, "are empty or repeat"),
        ({}, [], (0,), 1.5, "at most 1, not 1.5"),
        ({}, [], (0,), 0.0, "above 0"),
        ({"consumable": True}, [], (0, 1), 0.5, "a fraction (0.5) takes one GPU"),
        (
            {"consumable": True},
            [("gpu-0", {"memory": "75Gi"})],
            (0,),
            0.1,
            f"GPU gpu-0 cannot take 0.1: gpu-0 has {5 * GIB} of {MEM} left, {8 * GIB} asked",
        ),
        (
            {"consumable": True},
            [("gpu-0", {"memory": "1Gi"})],
            (0,),
            1.0,
            f"gpu-0 has {79 * GIB} of {MEM} left, {80 * GIB} asked",
        ),
        ({"mig": True}, ["gpu-0-mig-1g10gb-0"], (0,), 1.0, "counter memory of set gpu-0-counters"),
        (
            {"mig": True},
            [f"gpu-0-mig-1g10gb-{k}" for k in range(7)],  # every gpc is taken
            (0,),
            0.1,
            "no free MIG device of GPU gpu-0 has 8192 MiB (0.1 of the GPU); 13 of its 13",
        ),
        (
            {"mig": True},
            ["gpu-0-mig-3g40gb-0"],
            (0,),
            0.6,
            "no free MIG device of GPU gpu-0 has 49152 MiB (0.6 of the GPU); 1 of its 13",
        ),
    ],
)
def test_unfit_says_why(
    kw: dict[str, Any], claims: list[Any], indices: tuple[int, ...], fraction: float, why: str
) -> None:
    i, n = node(**kw)
    got = choose(n, Usage.from_claims([claim(*claims)] if claims else [], i), indices, fraction)
    assert isinstance(got, Unfit) and why in got.reason, got


def test_offered_skips_gpus_other_schedulers_hold() -> None:
    i, n = node(gpus=4, mig=True)
    foreign = Usage.from_claims([claim("gpu-1", "gpu-2-mig-1g10gb-0", "gpu-3-mig-7g80gb-0")], i)
    # gpu-1 is theirs whole, gpu-3 has nothing left, gpu-2 has MIG devices left.
    gpus = offered(n, foreign)
    assert [g.device.name for g in gpus] == ["gpu-0", "gpu-2"]
    # Index 1 is then gpu-2: a whole GPU does not fit there, a fraction does.
    got = choose(n, foreign, (1,), 1.0, gpus=gpus)
    assert isinstance(got, Unfit) and "whole GPU gpu-2" in got.reason
    assert names(choose(n, foreign, (1,), 0.1, gpus=gpus)) == [("gpu-2-mig-1g10gb-1", None)]
    i, n = node(gpus=2, consumable=True)
    foreign = Usage.from_claims(
        [claim(("gpu-0", {"memory": "80Gi"}), ("gpu-1", {"memory": "8Gi"}))], i
    )
    assert [g.device.name for g in offered(n, foreign)] == ["gpu-1"]


def test_held_keeps_a_job_on_its_device() -> None:
    i, n = node(gpus=3, consumable=True)
    u = Usage.from_claims([], i)
    gpu2 = n.gpus[2].device
    # The job's share at index 0 already went to gpu-2 (the indices moved since).
    assert names(choose(n, u, (0,), 0.5, held={0: gpu2})) == [("gpu-2", {MEM: 40 * GIB})]
    i, n = node(gpus=2, mig=True)
    mine = i.by_key[(D, "n", "gpu-1-mig-2g20gb-2")]
    u = Usage.from_claims([claim("gpu-1-mig-1g10gb-0")], i)
    gone = Device(D, "n", "gpu-9", "n")
    got = choose(n, u, (0,), 0.1, held={0: gone})
    assert isinstance(got, Unfit) and "no longer has gpu-9, held at index 0" in got.reason
    # A re-choice of the worker's own MIG device keeps it; the GPU follows it too.
    assert names(choose(n, u, (0,), 0.1, held={0: mine})) == [("gpu-1-mig-2g20gb-2", None)]


# ---- properties ----

MODES = st.sampled_from([{}, {"mig": True}, {"consumable": True}])
FRACTIONS = st.sampled_from([1.0, 0.5, 0.25, 0.1, 0.33, 0.7, 0.05])


def check_invariants(i: Inventory, u: Usage) -> None:
    """Claims as Kubernetes would see them: nothing double-booked or overfilled."""
    for d in i.devices:
        for name, total in d.capacity.items():
            assert 0 <= u.capacity_left(d, name) <= total or d.key in u.taken
    for key, total in i.counters.items():
        left = u.counters_left(*key)
        assert all(0 <= left[c] <= total[c] for c in total), (key, left)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mode=MODES,
    gpus=st.integers(1, 3),
    asks=st.lists(
        st.tuples(st.lists(st.integers(0, 2), min_size=1, max_size=2, unique=True), FRACTIONS),
        max_size=12,
    ),
)
def test_choices_never_overbook(mode: dict[str, Any], gpus: int, asks: list[Any]) -> None:
    """Choose worker after worker, each seeing the claims of the ones before (rebuilt from
    claim objects, as the next cycle would): every choice fits where it lands, and the
    claims together never take a device twice, overfill capacity, or overflow a counter."""
    i, n = node(gpus=gpus, **mode)
    claims: list[dict[str, Any]] = []
    for k, (indices, fraction) in enumerate(asks):
        u = Usage.from_claims(claims, i)
        got = choose(n, u, tuple(indices), fraction if len(indices) == 1 else 1.0)
        if isinstance(got, Unfit):
            assert got.reason
            continue
        picks: list[tuple[Device, Mapping[str, int] | None]] = list(got)
        for d, consumed in picks:
            assert u.why_not(d, consumed) is None
            if consumed is None:
                assert d.key not in u.in_use and u.is_free(d)
            else:
                assert d.multiple and d.key not in u.taken
                assert all(v <= u.capacity_left(d, c) for c, v in consumed.items())
            u = u.with_allocation(d, consumed)
        assert len({d.key for d, _ in picks}) == len(picks)
        results = [
            (D, "n", d.name) if c is None else (D, "n", d.name, {m: str(v) for m, v in c.items()})
            for d, c in picks
        ]
        claims.append(allocated_claim(f"c{k}", results))
        check_invariants(i, Usage.from_claims(claims, i))
    taken = [
        r["device"]
        for c in claims
        for r in c["status"]["allocation"]["devices"]["results"]
        if "consumedCapacity" not in r
    ]
    assert len(taken) == len(set(taken))


@settings(max_examples=100, deadline=None)
@given(mode=MODES, gpus=st.integers(1, 3), held=st.sets(st.integers(0, 40), max_size=12))
def test_offered_gpus_all_have_room_for_something(
    mode: dict[str, Any], gpus: int, held: set[int]
) -> None:
    """Whatever other schedulers hold, an offered GPU still takes some fraction, and a
    GPU not offered takes nothing."""
    i, n = node(gpus=gpus, **mode)
    u = Usage.from_claims([], i)
    for k in sorted(held):
        d = i.devices[k % len(i.devices)]
        consumed = {MEM: 16 * GIB} if d.multiple else None
        if u.fits(d, consumed):
            u = u.with_allocation(d, consumed)
    check_invariants(i, u)
    listed = offered(n, u)
    for g in n.gpus:
        fits_any = any(
            isinstance(choose(n, u, (0,), f, gpus=[g]), Choice) for f in (1.0, 0.1, 0.01)
        )
        assert fits_any == (g in listed), g.device.name
