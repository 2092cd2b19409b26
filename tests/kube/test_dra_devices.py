"""DRA devices read from ResourceSlices: quantities, qualified names, pools and their
generations, counter sets published apart from the devices; and the test slices
themselves are objects a 1.37 API server accepts."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.draslices import allocated_claim, counter_set, gpu_class, gpu_slice

from scheduler.backends.kubernetes.dra import Version, read_slices
from scheduler.backends.kubernetes.dra.devices import RequestPolicy

GIB = 1024**3
K8S = "1.37.0"


def test_devices_carry_qualified_attributes_and_capacity() -> None:
    inv = read_slices(gpu_slice("node-a", gpus=2))
    assert [d.key for d in inv.devices] == [
        ("gpu.nvidia.com", "node-a", "gpu-0"),
        ("gpu.nvidia.com", "node-a", "gpu-1"),
    ]
    d = inv.devices[1]
    assert d.node == "node-a"
    assert d.attributes["gpu.nvidia.com/productName"] == "NVIDIA H100 80GB HBM3"
    assert d.attributes["gpu.nvidia.com/index"] == 1
    version = d.attributes["gpu.nvidia.com/driverVersion"]
    assert isinstance(version, Version)
    assert version == "580.82.7"
    assert d.capacity == {"gpu.nvidia.com/memory": 80 * GIB}
    assert (d.multiple, d.consumes, d.policies) == (False, (), {})
    assert inv.by_key[d.key] is d


def test_attribute_kinds_and_foreign_domains() -> None:
    raw = gpu_slice("n", gpus=1)
    raw[0]["spec"]["devices"][0]["attributes"] |= {
        "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
        "healthy": {"bool": True},
        "numaNodes": {"ints": [0, 1]},
    }
    (d,) = read_slices(raw).devices
    assert d.attributes["resource.kubernetes.io/pcieRoot"] == "pci0000:00"
    assert d.attributes["gpu.nvidia.com/healthy"] is True
    assert d.attributes["gpu.nvidia.com/numaNodes"] == (0, 1)


def test_consumable_capacity_and_its_policy() -> None:
    (d, _) = read_slices(gpu_slice("n", consumable=True, memory_gib=40)).devices
    assert d.multiple
    policy = d.policies["gpu.nvidia.com/memory"]
    assert policy == RequestPolicy(default=40 * GIB, min=GIB, step=GIB)


@pytest.mark.parametrize(
    ("policy", "asked", "got"),
    [
        (RequestPolicy(min=GIB, step=GIB), 1, GIB),
        (RequestPolicy(min=GIB, step=GIB), GIB + 1, 2 * GIB),
        (RequestPolicy(min=GIB, step=GIB), 3 * GIB, 3 * GIB),
        (RequestPolicy(min=GIB, step=GIB, max=4 * GIB), 5 * GIB, None),
        (RequestPolicy(valid_values=(10, 20, 40)), 11, 20),
        (RequestPolicy(valid_values=(10, 20, 40)), 41, None),
        (RequestPolicy(min=10), 5, 10),
        (RequestPolicy(), 7, 7),
    ],
)
def test_request_policies_round_a_request_up(
    policy: RequestPolicy, asked: int, got: int | None
) -> None:
    assert policy.round_up(asked) == got


def test_mig_counters_come_from_a_slice_of_their_own() -> None:
    slices = gpu_slice("n", gpus=2, mig=True)
    assert [bool(s["spec"].get("sharedCounters")) for s in slices] == [True, False]
    inv = read_slices(slices)
    assert inv.counters[("gpu.nvidia.com", "n", counter_set(1))] == {"memory": 80 * GIB, "gpcs": 7}
    whole = inv.by_key[("gpu.nvidia.com", "n", "gpu-1")]
    assert whole.consumes == ((counter_set(1), {"memory": 80 * GIB, "gpcs": 7}),)
    mig = inv.by_key[("gpu.nvidia.com", "n", "gpu-1-mig-1g10gb-0")]
    assert mig.consumes == ((counter_set(1), {"memory": 10 * GIB, "gpcs": 1}),)
    assert len(inv.devices) == 2 * (1 + 7 + 3 + 2 + 1)


def _bump(slices: list[dict[str, Any]], generation: int) -> list[dict[str, Any]]:
    out = copy.deepcopy(slices)
    for s in out:
        s["spec"]["pool"]["generation"] = generation
    return out


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    old = gpu_slice("n", gpus=4)
    new = _bump(gpu_slice("n", gpus=2), 2)
    inv = read_slices(old + new + gpu_slice("m", gpus=1))
    assert sorted(d.name for d in inv.devices if d.pool == "n") == ["gpu-0", "gpu-1"]
    assert [d.name for d in inv.devices if d.pool == "m"] == ["gpu-0"]
    assert inv.incomplete == frozenset()


def test_an_incomplete_pool_gives_what_is_seen() -> None:
    counters, devices = gpu_slice("n", gpus=1, mig=True)
    inv = read_slices([devices])  # the counter slice is not there yet
    assert ("gpu.nvidia.com", "n") in inv.incomplete
    assert len(inv.devices) == 14
    assert inv.counters == {}
    inv = read_slices([counters])
    assert (inv.devices, inv.incomplete) == ((), frozenset({("gpu.nvidia.com", "n")}))


def test_devices_not_bound_to_one_node_are_skipped() -> None:
    (s,) = gpu_slice("n", gpus=1)
    del s["spec"]["nodeName"]
    s["spec"]["allNodes"] = True
    assert read_slices([s]).devices == ()
    (s,) = gpu_slice("n", gpus=2)
    del s["spec"]["nodeName"]
    s["spec"]["perDeviceNodeSelection"] = True
    s["spec"]["devices"][0]["nodeName"] = "n7"
    s["spec"]["devices"][1]["allNodes"] = True
    assert [(d.name, d.node) for d in read_slices([s]).devices] == [("gpu-0", "n7")]


def test_taints_that_block_are_seen() -> None:
    (s,) = gpu_slice("n", gpus=2)
    s["spec"]["devices"][0]["taints"] = [{"key": "gpu.nvidia.com/xid", "effect": "NoSchedule"}]
    s["spec"]["devices"][1]["taints"] = [{"key": "note", "effect": "None"}]
    a, b = read_slices([s]).devices
    assert (a.blocked, b.blocked) == (True, False)


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"gpus": 8},
        {"consumable": True},
        {"mig": True},
        {"mig": True, "gpus": 8, "memory_gib": 141, "product": "NVIDIA H200"},
    ],
)
def test_the_test_slices_are_valid_objects(kw: dict[str, Any]) -> None:
    """Schema-valid (strict), and within the 1.37 validation rules the schema cannot say
    (checked for real against a 1.37.2 kube-apiserver with dryRun=All)."""
    slices = gpu_slice("kwok-node-0", **kw)
    pool_sets = {cs["name"] for s in slices for cs in s["spec"].get("sharedCounters", ())}
    for s in slices:
        kubernetes_validate.validate(s, K8S, strict=True)
        spec = s["spec"]
        assert not (spec.get("devices") and spec.get("sharedCounters"))
        assert spec["pool"]["resourceSliceCount"] == len(slices)
        devices = spec.get("devices", ())
        assert len(devices) <= (64 if any(d.get("consumesCounters") for d in devices) else 128)
        assert len(spec.get("sharedCounters", ())) <= 8
        for d in devices:
            assert len(d["name"]) <= 63 and d["name"].replace("-", "").isalnum()
            assert all(k.isidentifier() and len(k) <= 32 for k in d["attributes"])
            assert len(d["attributes"]) + len(d["capacity"]) <= 32
            assert {c["counterSet"] for c in d.get("consumesCounters", ())} <= pool_sets
    assert len({s["metadata"]["name"] for s in slices}) == len(slices)


def test_the_test_classes_and_claims_are_valid_objects() -> None:
    for obj in (
        gpu_class(),
        gpu_class("mig.nvidia.com", type="mig"),
        gpu_class("gpu.example.com", extended_resource="example.com/gpu"),
        allocated_claim("c", [("gpu.nvidia.com", "n", "gpu-0", {"memory": "8Gi"})]),
    ):
        kubernetes_validate.validate(obj, K8S, strict=True)


@given(
    st.permutations(range(4)),
    st.integers(1, 3),
    st.sampled_from([{}, {"mig": True}, {"consumable": True}]),
)
def test_slice_order_and_stale_generations_do_not_matter(
    order: list[int], stale: int, kw: dict[str, Any]
) -> None:
    """A list or watch returns slices in any order, old generations among them."""
    current = _bump(gpu_slice("n", gpus=2, **kw), 5) + gpu_slice("m", gpus=1)
    old = [s for g in range(1, stale + 1) for s in _bump(gpu_slice("n", gpus=3), g)]
    everything = current + old
    shuffled = [everything[k % len(everything)] for k in order] + everything
    assert read_slices(shuffled) == read_slices(current)


def test_an_unreadable_device_or_counter_set_is_skipped_not_fatal() -> None:
    counters, devices = gpu_slice("n", gpus=2, mig=True)
    devices["spec"]["devices"][0]["capacity"]["memory"]["value"] = "lots"
    counters["spec"]["sharedCounters"][1]["counters"]["gpcs"] = {"value": "7 gpcs"}
    inv = read_slices([counters, devices])
    assert ("gpu.nvidia.com", "n", "gpu-0") not in inv.by_key
    assert len(inv.devices) == 27
    assert list(inv.counters) == [("gpu.nvidia.com", "n", counter_set(0))]
    assert [s.split(":")[0] for s in inv.skipped] == [
        f"gpu.nvidia.com/n counter set {counter_set(1)}",
        "gpu.nvidia.com/n/gpu-0",
    ]
