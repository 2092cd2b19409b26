"""Smoke tests of the inflation benchmark: protocols, curves, variants, report."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from bench import fgd_inflation, trace, variants

pytestmark = pytest.mark.skipif(
    not (trace.DEFAULT_DATA / trace.NODES_CSV).exists(), reason="trace not available"
)


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


def test_variants_have_the_asked_proportions_and_the_default_volume() -> None:
    pods = trace.load_pods(trace.DEFAULT_DATA)
    nodes = trace.load_nodes(trace.DEFAULT_DATA)
    volume = sum(p.gpus for p in pods)
    share = variants.build("gpushare80", pods, nodes)
    assert _share(share, lambda p: p.gpus < 1, False) == pytest.approx(0.8, abs=0.01)
    multi = variants.build("multigpu50", pods, nodes)
    assert _share(multi, lambda p: p.gpus > 1, True) == pytest.approx(0.5, abs=0.02)
    for v in (share, multi):
        assert volume <= sum(p.gpus for p in v) <= volume + 8
    spec = variants.build("gpuspec33", pods, nodes)
    assert _share(spec, lambda p: bool(p.task.gpu_types), False) == pytest.approx(0.33, abs=0.01)
    largest = Counter[str]()
    for n in nodes:
        largest[n.gpu_model] = max(largest[n.gpu_model], n.gpu_count)
    assert all(max(largest[t] for t in p.task.gpu_types) >= p.gpus
               for p in spec if p.task.gpu_types)  # fmt: skip
    assert variants.build("gpushare80", pods, nodes) == share  # a fixed list, like a file
    with pytest.raises(ValueError, match="unknown pod list"):
        variants.build("sharing", pods, nodes)


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
