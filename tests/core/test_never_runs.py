"""The front doors' "can never run" (`feasibility.check_job`) counts a node's room with
the core's own fit (`placement.fit.capacity` on the node as if empty, issue 38 item 4),
so fractions and GPU memory are counted as placement counts them; what an admin or the
job can change is not a refusal but a pending reason (docs/core.md): workers that need
distinct GPUs, fractions that must be enforced, a node's MPS slices, sharing that is off
only now."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler import feasibility
from scheduler.model import Node, Queue
from scheduler.spec import JobSpec

A100 = "A100"
GLOO = {"distinctGpus": False}  # workers may share a GPU


def node(name: str, gpus: int = 2, **kw: Any) -> Node:
    return Node(name, 64_000, 512_000, gpu_count=gpus, gpu_model=A100, gpu_memory_mib=81920, **kw)


def refused(nodes: list[Node], **spec: Any) -> list[str]:
    body = {"name": "j", "queue": "q", "image": "i", **spec}
    problems = feasibility.check_job(JobSpec(**body), queues={"q": Queue("q")}, nodes=nodes)
    return [p.msg for p in problems]


CASES = [
    # (id, nodes, spec, refused: the message's words, or None when admitted)
    ("two-halves-per-gpu", [node("a", 1)], {"workers": 2, "gpu": 0.5, **GLOO}, None),
    ("three-halves-on-one-gpu", [node("a", 1)], {"workers": 3, "gpu": 0.5, **GLOO},
     "holds at most 2"),
    ("gpu-memory-per-gpu", [node("a", 1)], {"workers": 2, "gpu": None, "gpuMemory": "50000Mi"},
     "holds at most 1"),
    ("gpu-memory-two-per-gpu", [node("a", 1)], {"workers": 2, "gpu": None, "gpuMemory": "40000Mi",
     **GLOO}, None),
    # Admitted, to wait with the reason (docs/core.md): NCCL ranks that would share the
    # one GPU (DistinctGpus), a fraction larger than an MPS slice, an enforced fraction
    # where none is enforced yet, sharing off only now.
    ("nccl-ranks-on-one-gpu", [node("a", 1)], {"workers": 2, "gpu": 0.5}, None),
    ("slices-larger-fraction", [node("m", 2, slices=2)], {"gpu": 0.75}, None),
    ("advisory-enforced", [node("a")], {"gpu": 0.5, "enforcement": "required"}, None),
    ("no-sharing-now", [node("a", 1, no_sharing="reservation saw no GPU")], {"gpu": 0.5}, None),
    ("whole-gpus-add-up-across-nodes", [node("a"), node("b")], {"workers": 2, "gpu": 2}, None),
    ("whole-gpus-past-the-cluster", [node("a"), node("b")], {"workers": 3, "gpu": 2},
     "holds at most 2"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("nodes", "spec", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_the_door_counts_room_as_the_core_does(
    nodes: list[Node], spec: dict[str, Any], words: str | None
) -> None:
    got = refused(nodes, **spec)
    if words is None:
        assert got == []
    else:
        assert len(got) == 1 and words in got[0], got
