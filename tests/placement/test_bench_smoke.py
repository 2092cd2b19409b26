"""Smoke tests of the inflation benchmark: protocols, curves, variants, report."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import pytest

from bench import baselines, fgd_inflation, trace, variants
from scheduler import model as m
from scheduler import placement
from scheduler.placement import Demand

pytestmark = [
    pytest.mark.skipif(
        not (trace.DEFAULT_DATA / trace.NODES_CSV).exists(), reason="trace not available"
    ),
    pytest.mark.slow,  # replays the Alibaba trace's curves
]


@pytest.mark.parametrize("protocol", ["openb", "shoal"])
def test_curves_are_monotone_ratios_and_fgd_packs_at_least_as_well(protocol: str) -> None:
    curves = {
        p: fgd_inflation.run(trace.DEFAULT_DATA, p, seed=1, limit_nodes=80, protocol=protocol)
        for p in ("fgd", "gpu-packing")
    }
    for curve in curves.values():
        assert len(curve) == fgd_inflation.STEPS
        assert all(0.0 <= v <= 1.0 for v in curve)
        if protocol == "shoal":  # openb's points are means over a window
            assert all(a <= b + 1e-12 for a, b in itertools.pairwise(curve))
    assert curves["fgd"][130] >= curves["gpu-packing"][130] - 0.02


def test_openb_order_sends_every_task_once_before_any_repeat() -> None:
    pods = trace.load_pods(trace.DEFAULT_DATA)
    capacity = sum(n.gpu_count for n in trace.load_nodes(trace.DEFAULT_DATA))
    order = fgd_inflation.openb_order(pods, capacity, 42)
    assert Counter(p.name for p in order[: len(pods)]) == Counter(p.name for p in pods)
    total = sum(p.gpus for p in order)
    assert fgd_inflation.TUNE * capacity - 8 <= total <= fgd_inflation.TUNE * capacity
    assert order != fgd_inflation.openb_order(pods, capacity, 43)


def test_discrete_curve_averages_the_window_of_each_percent() -> None:
    events = [(0.004, 0.004), (0.006, 0.005), (0.014, 0.01), (0.03, 0.02)]
    curve = fgd_inflation.discrete_curve(events)
    assert curve[0] == pytest.approx(0.004)
    assert curve[1] == pytest.approx((0.005 + 0.01) / 2)
    assert curve[3] == pytest.approx(0.02)


def _share(pods: list[trace.Pod], special: object, by_request: bool) -> float:
    assert callable(special)
    gpu = [p for p in pods if p.gpus > 0]
    hot = [p for p in gpu if special(p)]
    if by_request:
        return sum(p.gpus for p in hot) / sum(p.gpus for p in gpu)
    return len(hot) / len(gpu)


def test_variants_are_built_as_the_published_ones_are() -> None:
    pods = trace.load_pods(trace.DEFAULT_DATA)
    nodes = trace.load_nodes(trace.DEFAULT_DATA)
    gpu = [p for p in pods if p.gpus > 0]
    cpu = [p for p in pods if p.gpus <= 0]
    share = variants.build("gpushare80", pods, nodes)  # by GPU requests, as many GPU tasks
    assert _share(share, lambda p: p.gpus < 1, True) == pytest.approx(0.8, abs=0.01)
    assert sum(p.gpus > 0 for p in share) == len(gpu)
    assert [p.task for p in share[: len(cpu)]] == [p.task for p in cpu]
    assert all(p.gpus < 1 for p in variants.build("gpushare100", pods, nodes) if p.gpus > 0)
    multi = variants.build("multigpu50", pods, nodes)  # the default list, then more
    assert multi[: len(pods)] == pods
    assert _share(multi, lambda p: p.gpus > 1, True) == pytest.approx(0.5, abs=0.01)
    assert len({p.name for p in multi}) == len(multi)
    spec = variants.build("gpuspec33", pods, nodes)
    assert _share(spec, lambda p: bool(p.task.gpu_types), False) == pytest.approx(0.33, abs=0.01)
    largest = Counter[str]()
    for n in nodes:
        largest[n.gpu_model] = max(largest[n.gpu_model], n.gpu_count)
    assert all(max(largest[t] for t in p.task.gpu_types) >= p.gpus
               for p in spec if p.task.gpu_types)  # fmt: skip
    kinds = Counter(p.task.gpu_types for p in spec if p.task.gpu_types and p.gpus < 1)
    assert kinds.most_common(1)[0][0] == ("T4",)  # sharing tasks ask for T4 most
    heavy = variants.build("cpu250", pods, nodes)
    assert sum(p.gpus <= 0 for p in heavy) == variants.cpu_tasks(250) == 2356
    assert [p.task for p in heavy if p.gpus > 0] == [p.task for p in gpu]
    assert variants.build("gpushare80", pods, nodes) == share  # a fixed list, like a file
    with pytest.raises(ValueError, match="unknown pod list"):
        variants.build("sharing", pods, nodes)


def test_a_pod_list_file_without_gpu_spec_loads(tmp_path: Path) -> None:
    path = tmp_path / "openb_pod_list_multigpu50.csv"
    rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli", "openb-pod-0000,12000,16384,1,1000",
            "openb-pod-0001,6000,12288,1,460"]  # fmt: skip
    path.write_text("\n".join(rows) + "\n")
    nodes = trace.load_nodes(trace.DEFAULT_DATA)
    pods = variants.load(str(path), trace.DEFAULT_DATA, nodes)
    assert [p.gpus for p in pods] == [1.0, 0.46]
    assert all(p.task.gpu_types == () for p in pods)
    assert variants.label(str(path)) == "multigpu50"


def test_report_table_names_every_list_and_policy() -> None:
    flat = [[0.5] * fgd_inflation.STEPS]
    results = {"default": {"fgd-learned": flat, "binpack": flat},
               "gpushare80": {"fgd-learned": flat, "binpack": flat}}  # fmt: skip
    reference = {"default": [[0.6] * fgd_inflation.STEPS]}
    text = fgd_inflation.table(results, 1, "openb", reference)
    assert "| default | 50.00 ± 0.00 | 50.00 ± 0.00 | 50.00 ± 0.00 |" not in text
    assert "| default | 40.00 ± 0.00 | 50.00 ± 0.00 | 50.00 ± 0.00 |" in text
    assert "| gpushare80 | n/a |" in text
    assert "1.25 x the paper's FGD" in text
    text = fgd_inflation.table(results, 1, "openb", {}, published={"gpushare80": 62.5})
    assert "| default | n/a |" in text  # the default list's curves only when given
    assert "| gpushare80 | 62.50 (its list) |" in text
    assert "`fgd-learned` 0.80" in text


def test_the_default_curves_apply_only_to_the_default_list(tmp_path: Path) -> None:
    path = tmp_path / "openb_pod_list_default.csv"
    path.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\nx,1000,1024,1,1000\n")
    paths = {"default": str(path)}
    curves, _ = fgd_inflation._references(trace.DEFAULT_DATA, paths, "openb")
    assert curves == {}
    both = {"default": "default", "gpushare80": "gpushare80"}
    curves, figures = fgd_inflation._references(trace.DEFAULT_DATA, both, "openb")
    assert list(curves) == ["default"] and figures["gpushare80"] == pytest.approx(10.92)


def test_paper_fgd_breaks_ties_by_a_random_order_of_the_nodes_fixed_for_the_run() -> None:
    nodes = [m.Node(f"n{i}", 64_000, 262_144, 2, "T4") for i in range(8)]
    mix = baselines.typical_mix([Demand(4000, 1024, 1.0)])
    firsts = []
    for seed in (1, 1):
        s = placement.ClusterState.build(nodes, ())
        scorer = baselines.PaperFgd(mix, seed)
        job = m.JobRequest("j", "q", gpu=1.0, cpu_milli=4000, memory_mib=1024)
        got = placement.place_gang(s, job, scorer, explain=False)
        assert isinstance(got, tuple)
        firsts.append(got[0].node)
        assert scorer.rank[s.index[got[0].node]] == 0  # every idle node ties: rank 0 wins
    assert firsts[0] == firsts[1]
