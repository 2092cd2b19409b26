"""The check after every allocation Shoal writes (`dra.overbooked`): is a device of the
claim just written held by another claim too? Cases as data: whole devices, admin
access, devices shared by capacity within and beyond it, and a whole GPU against MIG
slices that draw on its counters."""

from __future__ import annotations

from typing import Any

import pytest
from support.draslices import allocated_claim, gpu_slice

from scheduler.backends.kubernetes.dra import overbooked, read_slices

D = "gpu.nvidia.com"
MINE = "jobs/mine"


def claims(*given: tuple[str, list[Any]]) -> dict[str, Any]:
    """namespace/name -> an allocated claim, from (name, results) pairs."""
    return {f"jobs/{name}": allocated_claim(name, results) for name, results in given}


def admin(claim: dict[str, Any]) -> dict[str, Any]:
    for r in claim["status"]["allocation"]["devices"]["results"]:
        r["adminAccess"] = True
    return claim


CASES = [
    pytest.param(
        {},
        claims(("mine", [(D, "n", "gpu-0")]), ("theirs", [(D, "n", "gpu-1")])),
        [],
        id="different-devices",
    ),
    pytest.param(
        {},
        claims(("mine", [(D, "n", "gpu-0"), (D, "n", "gpu-1")]), ("theirs", [(D, "n", "gpu-1")])),
        ["gpu.nvidia.com/n/gpu-1 is also in ResourceClaim jobs/theirs"],
        id="a-whole-device-in-two-claims",
    ),
    pytest.param(
        {},
        claims(
            ("mine", [(D, "n", "gpu-0")]), ("a", [(D, "n", "gpu-0")]), ("b", [(D, "n", "gpu-0")])
        ),
        ["gpu.nvidia.com/n/gpu-0 is also in ResourceClaim jobs/a, jobs/b"],
        id="in-three-claims",
    ),
    pytest.param(
        {},
        {
            **claims(("mine", [(D, "n", "gpu-0")])),
            "jobs/monitor": admin(allocated_claim("monitor", [(D, "n", "gpu-0")])),
        },
        [],
        id="admin-access-never-counts",
    ),
    pytest.param(
        {"consumable": True},
        claims(
            ("mine", [(D, "n", "gpu-0", {"memory": "40Gi"})]),
            ("theirs", [(D, "n", "gpu-0", {"memory": "40Gi"})]),
        ),
        [],
        id="shares-within-capacity",
    ),
    pytest.param(
        {"consumable": True},
        claims(
            ("mine", [(D, "n", "gpu-0", {"memory": "60Gi"})]),
            ("theirs", [(D, "n", "gpu-0", {"memory": "40Gi"})]),
        ),
        [
            "gpu.nvidia.com/n/gpu-0 is shared beyond its capacity (107374182400 of "
            "85899345920 gpu.nvidia.com/memory) with ResourceClaim jobs/theirs"
        ],
        id="shares-beyond-capacity",
    ),
    pytest.param(
        {"mig": True},
        claims(("mine", [(D, "n", "gpu-0")]), ("theirs", [(D, "n", "gpu-0-mig-1g10gb-0")])),
        [
            "gpu.nvidia.com/n/gpu-0: counters gpcs, memory of set gpu-0-counters are "
            "overdrawn with ResourceClaim jobs/theirs"
        ],
        id="a-whole-gpu-and-a-mig-slice-of-it",
    ),
    pytest.param(
        {"mig": True},
        claims(
            ("mine", [(D, "n", "gpu-0-mig-3g40gb-0")]),
            ("theirs", [(D, "n", "gpu-0-mig-3g40gb-1")]),
        ),
        [],
        id="two-mig-slices-that-fit-together",
    ),
    pytest.param(
        {},
        claims(("mine", [(D, "gone", "gpu-9")]), ("theirs", [(D, "gone", "gpu-9")])),
        ["gpu.nvidia.com/gone/gpu-9 is also in ResourceClaim jobs/theirs"],
        id="a-device-no-slice-lists",
    ),
    pytest.param({}, claims(("theirs", [(D, "n", "gpu-0")])), [], id="mine-is-gone"),
]


@pytest.mark.parametrize(("slices", "given", "expected"), CASES)
def test_overbooked(slices: dict[str, Any], given: dict[str, Any], expected: list[str]) -> None:
    inventory = read_slices(gpu_slice("n", gpus=2, **slices))
    assert overbooked(given, inventory, MINE) == expected
