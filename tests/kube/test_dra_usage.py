"""What allocated ResourceClaims hold: whole devices, shares of consumable capacity,
shared counters; and the caller's own claims left out."""

from __future__ import annotations

from typing import Any

import pytest
from support.draslices import allocated_claim, counter_set, gpu_slice

from scheduler.backends.kubernetes.dra import Inventory, Usage, read_slices

GIB = 1024**3
D = "gpu.nvidia.com"
MEM = f"{D}/memory"


def inv(**kw: Any) -> Inventory:
    return read_slices(gpu_slice("n", **kw))


def dev(inventory: Inventory, name: str) -> Any:
    return inventory.by_key[(D, "n", name)]


def test_nothing_allocated_everything_free() -> None:
    i = inv(mig=True)
    u = Usage.from_claims([], i)
    assert all(u.is_free(d) for d in i.devices)
    assert u.counters_left(D, "n", counter_set(0)) == {"memory": 80 * GIB, "gpcs": 7}


def test_a_whole_device_is_taken() -> None:
    i = inv(gpus=2)
    u = Usage.from_claims([allocated_claim("c", [(D, "n", "gpu-1")])], i)
    assert u.is_free(dev(i, "gpu-0")) and not u.is_free(dev(i, "gpu-1"))
    assert u.capacity_left(dev(i, "gpu-1"), MEM) == 0
    assert u.why_not(dev(i, "gpu-1"), None) == "gpu-1 is in use"
    assert not u.fits(dev(i, "gpu-1"), {MEM: GIB})


def test_shares_of_consumable_capacity_add_up() -> None:
    i = inv(gpus=1, consumable=True)
    gpu = dev(i, "gpu-0")
    claims = [
        allocated_claim("a", [(D, "n", "gpu-0", {"memory": "20Gi"})]),
        allocated_claim("b", [(D, "n", "gpu-0", {f"{D}/memory": "30Gi"})]),
    ]
    u = Usage.from_claims(claims, i)
    assert u.capacity_left(gpu, MEM) == 30 * GIB
    assert not u.is_free(gpu)  # shared already: not whole any more
    assert u.fits(gpu, {MEM: 30 * GIB}) and not u.fits(gpu, {MEM: 30 * GIB + 1})
    assert (
        u.why_not(gpu, {MEM: 31 * GIB}) == f"gpu-0 has {30 * GIB} of {MEM} left, {31 * GIB} asked"
    )
    assert u.why_not(gpu, None) == "gpu-0 is in use"


def test_a_share_without_consumed_capacity_takes_the_policy_default() -> None:
    i = inv(gpus=1, consumable=True, memory_gib=40)  # default: all 40Gi
    u = Usage.from_claims([allocated_claim("a", [(D, "n", "gpu-0")])], i)
    assert u.capacity_left(dev(i, "gpu-0"), MEM) == 0


def test_shares_are_refused_on_a_device_that_does_not_allow_them() -> None:
    i = inv(gpus=1)
    u = Usage.from_claims([], i)
    assert u.why_not(dev(i, "gpu-0"), {MEM: GIB}) == "gpu-0 does not allow shared allocations"


@pytest.mark.parametrize(
    ("held", "free", "busy"),
    [
        (["gpu-0-mig-3g40gb-0"], ["gpu-0-mig-3g40gb-1", "gpu-0-mig-1g10gb-0"], ["gpu-0"]),
        (
            ["gpu-0-mig-3g40gb-0", "gpu-0-mig-3g40gb-1"],
            ["gpu-1", "gpu-1-mig-7g80gb-0"],
            ["gpu-0-mig-1g10gb-0", "gpu-0-mig-7g80gb-0"],  # all memory counted out
        ),
        (
            ["gpu-0-mig-2g20gb-0", "gpu-0-mig-2g20gb-1", "gpu-0-mig-2g20gb-2"],
            ["gpu-0-mig-1g10gb-0"],  # 6 gpcs and 60Gi used: one 1g is left
            ["gpu-0-mig-3g40gb-0"],
        ),
        (["gpu-0"], ["gpu-1-mig-1g10gb-0"], ["gpu-0-mig-1g10gb-0", "gpu-0-mig-7g80gb-0"]),
    ],
)
def test_counters_tie_a_gpu_and_its_mig_devices(
    held: list[str], free: list[str], busy: list[str]
) -> None:
    i = inv(gpus=2, mig=True)
    u = Usage.from_claims([allocated_claim("c", [(D, "n", h) for h in held])], i)
    for name in free:
        assert u.is_free(dev(i, name)), name
    for name in busy:
        assert not u.is_free(dev(i, name)), (name, u.why_not(dev(i, name), None))


def test_counters_left_and_why() -> None:
    i = inv(gpus=1, mig=True)
    u = Usage.from_claims([allocated_claim("c", [(D, "n", "gpu-0-mig-3g40gb-0")])], i)
    assert u.counters_left(D, "n", counter_set(0)) == {"memory": 40 * GIB, "gpcs": 4}
    why = u.why_not(dev(i, "gpu-0"), None)
    assert (
        why == f"counter memory of set {counter_set(0)} has {40 * GIB} left, gpu-0 needs {80 * GIB}"
    )
    assert u.counters_left(D, "n", "no-such-set") == {}


def test_an_unpublished_counter_set_fits_nothing() -> None:
    _, devices = gpu_slice("n", gpus=1, mig=True)
    i = read_slices([devices])
    u = Usage.from_claims([], i)
    assert u.why_not(dev(i, "gpu-0-mig-1g10gb-0"), None) == (
        f"counter set {counter_set(0)} of pool n is not published"
    )


def test_own_claims_can_be_left_out() -> None:
    i = inv(gpus=2)
    claims = [
        allocated_claim("mine", [(D, "n", "gpu-0")]),
        allocated_claim("theirs", [(D, "n", "gpu-1")]),
    ]
    u = Usage.from_claims(claims, i, exclude=lambda c: c["metadata"]["name"] == "mine")
    assert u.is_free(dev(i, "gpu-0")) and not u.is_free(dev(i, "gpu-1"))


def test_unallocated_admin_and_unknown_results() -> None:
    i = inv(gpus=2)
    pending = allocated_claim("p", [])
    del pending["status"]
    admin = allocated_claim("admin", [(D, "n", "gpu-0")])
    admin["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = True
    gone = allocated_claim("gone", [(D, "n", "gpu-7")])
    u = Usage.from_claims([pending, admin, gone], i)
    assert u.is_free(dev(i, "gpu-0")) and u.is_free(dev(i, "gpu-1"))
    assert u.unknown == (f"{D}/n/gpu-7",)


def test_a_tainted_device_fits_nothing() -> None:
    (s,) = gpu_slice("n", gpus=1)
    s["spec"]["devices"][0]["taints"] = [{"key": "gpu.nvidia.com/xid", "effect": "NoExecute"}]
    i = read_slices([s])
    assert Usage.from_claims([], i).why_not(dev(i, "gpu-0"), None) == (
        "gpu-0 is tainted gpu.nvidia.com/xid"
    )


@pytest.mark.parametrize(
    "allocations",
    [
        [("gpu-0", None), ("gpu-1-mig-1g10gb-0", None), ("gpu-1-mig-3g40gb-1", None)],
        [("gpu-1-mig-2g20gb-0", None), ("gpu-1-mig-2g20gb-1", None)],
    ],
)
def test_with_allocation_is_from_claims_plus_one(allocations: list[tuple[str, None]]) -> None:
    i = inv(gpus=2, mig=True)
    step = Usage.from_claims([], i)
    for name, consumed in allocations:
        step = step.with_allocation(dev(i, name), consumed)
    whole = Usage.from_claims(
        [allocated_claim(f"c{k}", [(D, "n", n)]) for k, (n, _) in enumerate(allocations)], i
    )
    assert (step.taken, step.in_use, step.counters_used) == (
        whole.taken,
        whole.in_use,
        whole.counters_used,
    )


def test_with_allocation_adds_shares() -> None:
    i = inv(gpus=1, consumable=True)
    gpu = dev(i, "gpu-0")
    u = Usage.from_claims([], i).with_allocation(gpu, {MEM: 8 * GIB})
    u = u.with_allocation(gpu, {MEM: 8 * GIB})
    assert u.capacity_left(gpu, MEM) == 64 * GIB
    assert u.taken == frozenset() and u.in_use == {gpu.key}


def test_an_unreadable_share_counts_as_all_of_the_device() -> None:
    i = inv(gpus=1, consumable=True)
    u = Usage.from_claims([allocated_claim("a", [(D, "n", "gpu-0", {"memory": "much"})])], i)
    assert u.capacity_left(dev(i, "gpu-0"), MEM) == 0
