"""Smoke test of the inflation benchmark on a small seeded slice of the trace."""

from __future__ import annotations

import itertools

import pytest

from bench import fgd_inflation, trace

pytestmark = pytest.mark.skipif(
    not (trace.DEFAULT_DATA / trace.NODES_CSV).exists(), reason="trace not available"
)


def test_curves_are_monotone_ratios_and_fgd_packs_at_least_as_well() -> None:
    curves = {
        p: fgd_inflation.run(trace.DEFAULT_DATA, p, seed=1, limit_nodes=80)
        for p in ("fgd", "gpu-packing")
    }
    for curve in curves.values():
        assert len(curve) == fgd_inflation.STEPS
        assert all(0.0 <= v <= 1.0 for v in curve)
        assert all(a <= b + 1e-12 for a, b in itertools.pairwise(curve))
    assert curves["fgd"][130] >= curves["gpu-packing"][130] - 0.02


def test_report_table_names_every_policy() -> None:
    curves = {"fgd": [[0.5] * fgd_inflation.STEPS], "binpack": [[0.4] * fgd_inflation.STEPS]}
    text = fgd_inflation.table(curves, 1)
    assert "| fgd |" in text and "| binpack |" in text
