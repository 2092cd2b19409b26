"""Properties over random clusters and job sequences: nothing over-allocated, failures
and trials leave the state unchanged, choices are deterministic, and the fast FGD
fragmentation equals the paper's definition computed the slow way."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.builders import observe, state

from scheduler import model as m
from scheduler import placement
from scheduler.placement import Demand, WorkloadMix, fit
from scheduler.placement.state import UNIT, units

from . import strategies as sts

POLICIES = st.sampled_from(["binpack", "spread", "fgd"])


def _run(nodes: list[m.Node], jobs: tuple[m.JobRequest, ...], policy: str) -> list[object]:
    s = state(nodes)
    s.mix = WorkloadMix.from_jobs(jobs)
    out: list[object] = []
    for j in jobs:
        before = observe(s)
        got = placement.place_gang(s, j, policy)
        assert observe(s) == before  # place_gang never mutates
        out.append(got)
        if isinstance(got, tuple):
            assert len(got) == j.workers
            assert len({p.worker for p in got}) == j.workers
            for p in got:
                assert (p.fraction < 1) <= (len(p.gpus) == 1)  # a fraction: one GPU
            s.allocate(j.id, got)
        _check(s)
    return out


def _check(s: placement.ClusterState) -> None:
    for n in s.nodes:
        assert 0 <= s.free_cpu(n.name) <= n.cpu_milli
        assert 0 <= s.free_memory(n.name) <= n.memory_mib
        free = s.gpu_free(n.name)
        assert len(free) == n.gpu_count
        assert all(-m.EPS <= f <= 1 + m.EPS for f in free)  # no GPU share above 1


@settings(max_examples=60, deadline=None)
@given(sts.clusters, sts.job_lists, POLICIES)
def test_no_overallocation_and_determinism(
    nodes: list[m.Node], jobs: tuple[m.JobRequest, ...], policy: str
) -> None:
    assert _run(nodes, jobs, policy) == _run(nodes, jobs, policy)


@settings(max_examples=40, deadline=None)
@given(sts.clusters, sts.job_lists, POLICIES, st.data())
def test_rollback_and_release_restore(
    nodes: list[m.Node], jobs: tuple[m.JobRequest, ...], policy: str, data: st.DataObject
) -> None:
    s = state(nodes)
    start = observe(s)
    mark = s.checkpoint()
    placed = []
    for j in jobs:
        got = placement.place_gang(s, j, policy)
        if isinstance(got, tuple):
            s.allocate(j.id, got)
            placed.append(j.id)
    middle = observe(s)
    inner = s.checkpoint()
    for job_id in data.draw(st.permutations(placed)):
        s.release(job_id)
    assert observe(s) == start  # releasing everything gives back everything
    s.rollback(inner)
    assert observe(s) == middle
    s.rollback(mark)
    assert observe(s) == start


def _reference(weights: dict[Demand, float], node: m.Node, cpu: int, mem: int,
               free: list[int]) -> float:  # fmt: skip
    """F_n(M) straight from the paper's definition, one task type at a time."""
    total = sum(weights.values())
    out = 0.0
    for t, w in weights.items():
        n = fit.need(t, node.gpu_model, node.gpu_memory_mib)
        runs = (
            n is not None and n.gpus > 0 and t.cpu_milli <= cpu and t.memory_mib <= mem
            and sum(1 for v in free if v >= n.share) >= n.gpus
        )  # fmt: skip
        lost = sum(v for v in free if n is not None and v < n.share) if runs else sum(free)
        out += w / total * lost
    return out


@settings(max_examples=200, deadline=None)
@given(sts.mixes, sts.shares, st.sampled_from([0, 2000, 8000, 20_000]),
       st.sampled_from([0, 2048, 100_000]), st.sampled_from(["T4", "A100"]))  # fmt: skip
def test_fragmentation_matches_the_definition(
    weights: dict[Demand, float], free: list[float], cpu: int, mem: int, model: str
) -> None:
    node = m.Node("n", 64_000, 262_144, len(free), model, 16_384)
    free_units = sorted((units(f) for f in free), reverse=True)
    got = WorkloadMix(weights).fragmentation(model, 16_384, cpu, mem, tuple(free_units))
    want = _reference(weights, node, cpu, mem, free_units)
    assert abs(got - want) <= 1e-6 * UNIT


@settings(max_examples=100, deadline=None)
@given(sts.mixes, sts.shares, st.sampled_from([0, 2000, 8000, 20_000, 64_000]),
       st.sampled_from([0, 2048, 100_000]))  # fmt: skip
def test_stranded_share_matches_its_definition(
    weights: dict[Demand, float], free: list[float], cpu: int, mem: int
) -> None:
    free_units = tuple(sorted((units(f) for f in free), reverse=True))
    mix = WorkloadMix(weights)
    total = sum(weights.values())
    gpus = cpus = mems = 0.0
    for t, w in weights.items():
        n = fit.need(t, "T4", 16_384)
        if n is not None and n.gpus > 0:
            gpus += w / total * n.gpus * n.share
            cpus += w / total * t.cpu_milli
            mems += w / total * t.memory_mib
    room = float(sum(free_units))
    if gpus and cpus:
        room = min(room, cpu / (cpus / gpus))
    if gpus and mems:
        room = min(room, mem / (mems / gpus))
    want = sum(free_units) - room
    assert 0 <= mix.stranded("T4", 16_384, cpu, mem, free_units) == pytest.approx(want, abs=1e-3)
    got = mix.score("T4", 16_384, cpu, mem, free_units)
    frag = mix.fragmentation("T4", 16_384, cpu, mem, free_units)
    assert got == pytest.approx(frag + want, abs=1e-3)
