"""The simulator's fast path (idle ticks skipped up to the next time-dependent change)
against running every tick: the same decisions at the same virtual times."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scheduler import model
from scheduler.backends.local import cluster
from scheduler.cli.main import app
from scheduler.sim import replay, trace


def _trace(tmp_path: Path) -> list[trace.TraceJob]:
    """Queue `a` borrows the whole 8-GPU cluster; `b` comes back for its guarantee and
    must wait for the minimum runtime before reclaiming; fractional jobs and a gang
    share what is left; one job never fits (it starves, with a reservation)."""
    rows = [f"{{name: a{i}, queue: a, submit: 0, duration: 1500, gpu: 1}}" for i in range(8)]
    rows += [
        f"{{name: b{i}, queue: b, submit: {30 + 7 * i}, duration: 400, gpu: 1}}" for i in range(4)
    ]
    rows += [
        f"{{name: f{i}, queue: {'ab'[i % 2]}, submit: {200 + 45 * i}, duration: 700, gpu: 0.4}}"
        for i in range(6)
    ]
    rows += ["{name: gang, queue: b, submit: 500, duration: 300, gpu: 1, workers: 2}"]
    rows += ["{name: huge, queue: a, submit: 90, duration: 100, gpu: 8, workers: 2}"]
    f = tmp_path / "t.yaml"
    f.write_text("jobs:\n" + "".join(f"  - {r}\n" for r in rows))
    return trace.load(f)


def test_fast_path_makes_the_decisions_of_every_tick(tmp_path: Path) -> None:
    jobs = _trace(tmp_path)
    config = model.Config(min_runtime_s=150.0, starvation_s=400.0)
    fast = replay.simulate(jobs, cluster.load_nodes(), config=config)
    slow = replay.simulate(jobs, cluster.load_nodes(), config=config, every_tick=True)

    # The trace exercises what time alone changes: preemption after the minimum runtime.
    assert sum(slow.preemptions.values()) > 0
    assert fast.skipped_ticks > 0 and fast.cycles < slow.cycles
    assert fast.cycles + fast.skipped_ticks == slow.cycles

    assert fast.decisions == slow.decisions  # places (with GPUs), preemptions, ends; times
    assert (fast.placed, fast.finished, fast.never_placed) == (
        slow.placed,
        slow.finished,
        slow.never_placed,
    )
    assert fast.end == slow.end
    assert fast.preemptions == slow.preemptions
    assert fast.delays == slow.delays
    assert fast.invariant_reports == slow.invariant_reports
    assert math.isclose(fast.mean_utilisation(), slow.mean_utilisation(), rel_tol=1e-9)
    assert fast.violation_s.keys() == slow.violation_s.keys()
    for q, s in slow.violation_s.items():
        assert math.isclose(fast.violation_s[q], s, rel_tol=1e-9, abs_tol=1e-6)
    for q, u in slow.mean_usage().items():
        assert math.isclose(fast.mean_usage()[q], u, rel_tol=1e-9, abs_tol=1e-9)


def test_a_replay_is_repeatable(tmp_path: Path) -> None:
    jobs = _trace(tmp_path)
    one = replay.simulate(jobs, cluster.load_nodes())
    two = replay.simulate(jobs, cluster.load_nodes())
    assert one.decisions == two.decisions and one.decisions


def test_simulate_prints_a_summary_and_writes_the_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    jobs = tmp_path / "t.yaml"
    jobs.write_text(
        "jobs:\n"
        + "".join(
            f"  - {{name: j{i}, queue: {'ab'[i % 2]}, submit: {i * 20}, duration: 900, gpu: 1}}\n"
            for i in range(12)
        )
    )
    png = tmp_path / "out.png"
    result = CliRunner().invoke(app, ["simulate", str(jobs), "--plot", str(png)])
    assert result.exit_code == 0, result.output
    assert "idle ticks skipped" in result.output and "HELD" in result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
