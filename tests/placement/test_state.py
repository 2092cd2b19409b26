"""Cluster state: build, allocate, release, and checkpoint/rollback restore exactly."""

from __future__ import annotations

import pytest

from scheduler import model as m
from scheduler import placement

from .builders import job, node, running, snapshot, state


def test_build_subtracts_running_jobs() -> None:
    s = state([node("a", cpu=8000, mem=8192)],
              [running(job("x", gpu=0.25, cpu=1000, mem=512), ("a", (1,), 0.25))])  # fmt: skip
    assert s.gpu_free("a") == (1.0, 0.75, 1.0, 1.0)
    assert (s.free_cpu("a"), s.free_memory("a")) == (7000, 7680)
    assert s.gpu_model_of("a") == "A100"
    assert s.holds("x")


def test_build_skips_unknown_nodes() -> None:
    s = state([node("a")], [running(job("x", gpu=1), ("gone", (0,), 1.0))])
    assert s.gpu_free("a") == (1.0,) * 4


def test_four_quarters_fill_a_gpu_exactly() -> None:
    s = state([node("a", gpus=1)])
    for k in range(4):
        got = placement.place_gang(s, job(f"q{k}", gpu=0.25), "binpack")
        assert isinstance(got, tuple)
        s.allocate(f"q{k}", got)
    assert s.gpu_free("a") == (0.0,)
    assert isinstance(placement.place_gang(s, job("q5", gpu=0.25), "binpack"),
                      m.PendingReason)  # fmt: skip


def test_allocate_refuses_overcommit_and_changes_nothing() -> None:
    s = state([node("a", gpus=1)])
    before = snapshot(s)
    bad = (m.WorkerPlacement(0, "a", (0,), 0.75), m.WorkerPlacement(1, "a", (0,), 0.5))
    with pytest.raises(ValueError, match=r"above 1\.0"):
        s.allocate("x", bad, request=job("x", gpu=0.75))
    with pytest.raises(ValueError, match="unknown node"):
        s.allocate("x", (m.WorkerPlacement(0, "zz", (0,), 1.0),), request=job("x"))
    with pytest.raises(ValueError, match="no CPU/memory known"):
        s.allocate("x", (m.WorkerPlacement(0, "a", (0,), 1.0),))
    assert snapshot(s) == before


def test_allocate_twice_is_refused() -> None:
    s = state([node("a")])
    got = placement.place_gang(s, job("x", gpu=1), "fgd")
    assert isinstance(got, tuple)
    s.allocate("x", got)
    with pytest.raises(ValueError, match="already holds"):
        s.allocate("x", got)


def test_release_gives_back_exactly() -> None:
    s = state([node("a")])
    before = snapshot(s)
    got = placement.place_gang(s, job("x", gpu=1 / 3, workers=5), "fgd")
    assert isinstance(got, tuple)
    s.allocate("x", got)
    assert snapshot(s) != before
    s.release("x")
    assert snapshot(s) == before


def test_rollback_restores_state_exactly() -> None:
    s = state([node("a"), node("b", gpus=2)],
              [running(job("r", gpu=0.3), ("b", (0,), 0.3))])  # fmt: skip
    start = snapshot(s)
    mark = s.checkpoint()
    s.release("r")
    got = placement.place_gang(s, job("x", gpu=0.7, workers=3), "spread")
    assert isinstance(got, tuple)
    s.allocate("x", got)
    inner = s.checkpoint()
    middle = snapshot(s)
    s.release("x")
    got2 = placement.place_gang(s, job("y", gpu=2), "binpack")
    assert isinstance(got2, tuple)
    s.allocate("y", got2)
    s.rollback(inner)
    assert snapshot(s) == middle
    s.rollback(mark)
    assert snapshot(s) == start
    assert s.holds("r") and not s.holds("x")


def test_allocate_uses_the_demand_of_the_call_that_made_the_placements() -> None:
    s = state([node("a", cpu=8000)])
    small = placement.place_gang(s, job("small", gpu=1, cpu=1000), "binpack")
    big = placement.place_gang(s, job("big", gpu=1, cpu=6000), "binpack")
    assert small == big and small is not big  # equal placements, different jobs
    assert isinstance(small, tuple)
    s.allocate("small", small)
    assert s.free_cpu("a") == 7000
