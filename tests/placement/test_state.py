"""Cluster state: build, allocate, release, and checkpoint/rollback restore exactly."""

from __future__ import annotations

import pytest
from support.builders import a100, observe, request, running, state

from scheduler import model as m
from scheduler import placement


def test_build_subtracts_running_jobs() -> None:
    s = state([a100("a", cpu=8000, mem=8192)],
              [running(request("x", gpu=0.25, cpu=1000, mem=512), ("a", (1,), 0.25))])  # fmt: skip
    assert s.gpu_free("a") == (1.0, 0.75, 1.0, 1.0)
    assert (s.free_cpu("a"), s.free_memory("a")) == (7000, 7680)
    assert s.gpu_model_of("a") == "A100"
    assert s.holds(m.RunKey("x", 0))  # a running entry is owned by its (job, attempt)


def test_build_skips_unknown_nodes() -> None:
    s = state([a100("a")], [running(request("x", gpu=1), ("gone", (0,), 1.0))])
    assert s.gpu_free("a") == (1.0,) * 4


def test_four_quarters_fill_a_gpu_exactly() -> None:
    s = state([a100("a", gpus=1)])
    for k in range(4):
        got = placement.place_gang(s, request(f"q{k}", gpu=0.25), "binpack")
        assert isinstance(got, tuple)
        s.allocate(f"q{k}", got)
    assert s.gpu_free("a") == (0.0,)
    assert isinstance(placement.place_gang(s, request("q5", gpu=0.25), "binpack"),
                      m.PendingReason)  # fmt: skip


def test_allocate_refuses_overcommit_and_changes_nothing() -> None:
    s = state([a100("a", gpus=1)])
    before = observe(s)
    bad = (m.WorkerPlacement(0, "a", (0,), 0.75), m.WorkerPlacement(1, "a", (0,), 0.5))
    with pytest.raises(ValueError, match=r"above 1\.0"):
        s.allocate("x", bad, request=request("x", gpu=0.75))
    with pytest.raises(ValueError, match="unknown node"):
        s.allocate("x", (m.WorkerPlacement(0, "zz", (0,), 1.0),), request=request("x"))
    with pytest.raises(ValueError, match="no CPU/memory known"):
        s.allocate("x", (m.WorkerPlacement(0, "a", (0,), 1.0),))
    assert observe(s) == before


def test_allocate_twice_is_refused() -> None:
    s = state([a100("a")])
    got = placement.place_gang(s, request("x", gpu=1), "fgd")
    assert isinstance(got, tuple)
    s.allocate("x", got)
    with pytest.raises(ValueError, match="already holds"):
        s.allocate("x", got)


def test_release_gives_back_exactly() -> None:
    s = state([a100("a")])
    before = observe(s)
    got = placement.place_gang(s, request("x", gpu=1 / 3, workers=5), "fgd")
    assert isinstance(got, tuple)
    s.allocate("x", got)
    assert observe(s) != before
    s.release("x")
    assert observe(s) == before


def test_rollback_restores_state_exactly() -> None:
    s = state([a100("a"), a100("b", gpus=2)],
              [running(request("r", gpu=0.3), ("b", (0,), 0.3))])  # fmt: skip
    start = observe(s)
    mark = s.checkpoint()
    s.release(m.RunKey("r", 0))
    got = placement.place_gang(s, request("x", gpu=0.7, workers=3), "spread")
    assert isinstance(got, tuple)
    s.allocate("x", got)
    inner = s.checkpoint()
    middle = observe(s)
    s.release("x")
    got2 = placement.place_gang(s, request("y", gpu=2), "binpack")
    assert isinstance(got2, tuple)
    s.allocate("y", got2)
    s.rollback(inner)
    assert observe(s) == middle
    s.rollback(mark)
    assert observe(s) == start
    assert s.holds(m.RunKey("r", 0)) and not s.holds("x")


def test_allocate_uses_the_demand_of_the_call_that_made_the_placements() -> None:
    s = state([a100("a", cpu=8000)])
    small = placement.place_gang(s, request("small", gpu=1, cpu=1000), "binpack")
    big = placement.place_gang(s, request("big", gpu=1, cpu=6000), "binpack")
    assert small == big and small is not big  # equal placements, different jobs
    assert isinstance(small, tuple)
    s.allocate("small", small)
    assert s.free_cpu("a") == 7000


def test_a_node_that_shrank_under_a_running_worker_does_not_break_the_build() -> None:
    """A worker sits on GPU 6 of a node now offering 4 (other pods took GPUs since): the
    state counts it on a GPU the node still offers (the invariant check reports it), and
    never raises."""
    from scheduler.core import cycle, invariants

    node = m.Node("n", 64_000, 262_144, 4, "A100", 40_960)
    run = m.RunningJob(m.JobRequest("j", "q", gpu=1.0), (m.WorkerPlacement(0, "n", (6,)),))
    built = placement.ClusterState.build([node], [run])
    assert sorted(built.gpu_free("n")) == [0.0, 1.0, 1.0, 1.0]  # still held, not lost
    snap = m.Snapshot((node,), (m.Queue("q"),), running=(run,))
    assert "unknown-gpu" in {v.kind for v in invariants.check(snap)}
    assert cycle.schedule(snap).violations  # a cycle runs and reports it
