"""The front doors' "can never run" (`feasibility.check_job`) counts a node's room by the
core's own fit (`placement.fit.capacity` on the node as if empty, issue 38 item 4): MPS
slices, enforcement and a gang's distinct GPUs as placement counts them, so the door
refuses exactly what the core could never place, and a node whose sharing is off only
now (`no_sharing`) still counts."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler import feasibility
from scheduler.model import Enforcement, Node, Queue
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
    # NCCL ranks (pytorch's default) cannot share a GPU: the core never places them so.
    ("nccl-ranks-on-one-gpu", [node("a", 1)], {"workers": 2, "gpu": 0.5},
     "holds at most 1 of them, each on a GPU of its own (distinctGpus"),
    # A node of 2 MPS slices per GPU takes fractions of at most 1/2, one slice each.
    ("slices-take-a-half", [node("m", 2, slices=2)], {"workers": 4, "gpu": 0.5, **GLOO}, None),
    ("slices-refuse-more-than-a-slice", [node("m", 2, slices=2)], {"gpu": 0.75}, "holds at most 0"),
    ("slices-refuse-whole-gpus", [node("m", 2, slices=2)], {"gpu": 1}, "holds at most 0"),
    # `enforcement: required` goes only where fractions are enforced.
    ("advisory-refuses-enforced", [node("a")], {"gpu": 0.5, "enforcement": "required"},
     "holds at most 0"),
    ("mps-takes-enforced", [node("e", enforcement=Enforcement.MPS)],
     {"gpu": 0.5, "enforcement": "required"}, None),
    # Sharing off now is not "never".
    ("no-sharing-now-still-counts", [node("a", 1, no_sharing="reservation saw no GPU")],
     {"gpu": 0.5}, None),
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
