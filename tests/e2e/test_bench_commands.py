"""docs/benchmarks.md's commands, run as written but small (issue 35: a command quoted in
the docs that no test runs is a defect). Each benchmark runs with the docs' flags at sizes
that take seconds, so that a renamed flag or a broken module fails here, not in the hands
of whoever reproduces a figure. The figures themselves are not checked: they need the
docs' sizes. tests/test_docs_commands.py maps each docs line to one of these."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data" / "alibaba-gpu-2023"
TRACE = str(DATA / "openb_pod_list_default.csv")

pytestmark = [pytest.mark.slow, pytest.mark.integration]  # each starts a Python process
needs_trace = pytest.mark.skipif(not DATA.exists(), reason=f"no Alibaba trace at {DATA}")

SMALL = {
    "cycle_scale": ["--nodes", "20", "--pending", "10", "--repeat", "1"],
    "cycle_scale --loop": [
        "--nodes", "20", "--pending", "10", "--skip-core", "--loop", "--state", "{tmp}/cs",
        "--warm", "1", "--cycles", "2", "--churn", "0.01", "--gc-threshold", "50000",
    ],
    # not `--cpu-share 1`: it ends in BrokenProcessPool today (left to the estimator's owners)
    "eta_overhead": ["--nodes", "10", "--pending", "5", "--cycles", "3"],
    "eta_overhead --on-thread": ["--nodes", "10", "--pending", "5", "--cycles", "3", "--on-thread"],
    "eta_accuracy x": ["x", "--scale", "10", "--pending", "5", "--max-steps", "2"],
    "kube_reads": ["--nodes", "20", "--pods", "50", "--repeat", "1"],
    "inventory_write": [],
    "reserve_rss": [],
    "job_modules": ["--list"],
    "cycle_curve": [
        "--nodes", "20,40", "--repeat", "1", "--starving", "3",
        "--plot", "{tmp}/c.png", "--json", "{tmp}/c.json",
    ],
    "api_fuzz": ["--requests", "30", "--databases", "sqlite"],
    "api_load": [
        "--rates", "0", "--duration", "2", "--databases", "sqlite", "--json", "{tmp}/l.json",
    ],
}  # fmt: skip
SMALL_ON_TRACE = {
    "fgd_inflation": [
        "--data", str(DATA), "--seeds", "1", "--policies", "fgd-learned", "--jobs", "1",
        "--out", "{tmp}/fi", "--plot", "{tmp}/fi.png",
    ],
    "fgd_drops": ["gpushare80", "fgd-learned", "42"],
    "core_speed": ["--data", str(DATA), "--nodes", "10", "--jobs", "10", "--skip-cycle"],
    "sim_speed": [TRACE, "--limit", "20", "--max-duration", "600", "--arrival-scale", "0.02"],
    "sim_store": [TRACE, "--limit", "20", "--max-duration", "600", "--arrival-scale", "0.02"],
    "eta_accuracy": [
        TRACE, "--limit", "30", "--max-duration", "600", "--arrival-scale", "0.02",
        "--every", "10", "--max-steps", "2",
    ],
    "elastic_reclaim": [TRACE, "--limit", "30", "--nodes", "2", "--json"],
}  # fmt: skip


def run(argv: list[str], tmp: Path) -> None:
    argv = [a.replace("{tmp}", str(tmp)) for a in argv]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "Traceback" not in said, f"{' '.join(argv)}\n{said}"


@pytest.mark.parametrize("name", SMALL)
def test_a_benchmark_runs_small(name: str, tmp_path: Path) -> None:
    run([sys.executable, "-m", f"bench.{name.split()[0]}", *SMALL[name]], tmp_path)


@needs_trace
@pytest.mark.parametrize("name", SMALL_ON_TRACE)
def test_a_benchmark_on_the_trace_runs_small(name: str, tmp_path: Path) -> None:
    run([sys.executable, "-m", f"bench.{name}", *SMALL_ON_TRACE[name]], tmp_path)


@needs_trace
def test_simulate_on_the_trace_runs_as_loop_md_writes_it(tmp_path: Path) -> None:
    """docs/loop.md and docs/benchmarks.md: `shoal simulate TRACE --limit 300 ...`."""
    shoal = str(Path(sys.executable).parent / "shoal")
    run([shoal, "simulate", TRACE, "--limit", "300", "--max-duration", "7200",
         "--arrival-scale", "0.02"], tmp_path)  # fmt: skip


def test_submit_to_running_runs_small(tmp_path: Path) -> None:
    run([sys.executable, "tests/e2e/bench_submit_to_running.py", "1"], tmp_path)


@pytest.mark.parametrize("target", ["lint", "typecheck", "test-fast", "chart-check"])
def test_a_make_target_runs(target: str) -> None:
    """README's `make lint|typecheck|test-fast|chart-check`. The two that run pytest only
    collect here (PYTEST_ADDOPTS=--collect-only): CI's pytest runs those tests already;
    this checks the target, its set-up and its selection."""
    env = {**os.environ, "PYTEST_ADDOPTS": "--collect-only -q"}
    done = subprocess.run(
        ["make", target], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "Traceback" not in said, said
