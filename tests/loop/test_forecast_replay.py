"""The start-time forecast against the real loop (issue 29): on a replay with reclaim,
minimum runtimes and a job that never fits, every forecast made once the last job has
arrived, with the true durations as runtimes, names the very instant each job starts.
Later arrivals are the one thing a forecast cannot know; here there are none left."""

from __future__ import annotations

from pathlib import Path

from scheduler import model
from scheduler.backends.local import cluster
from scheduler.core import forecast
from scheduler.loop.config import CycleReport
from scheduler.sim import replay

from .test_sim_fast import _trace  # the same trace: reclaim, a gang, a job that never fits


def test_forecasts_after_the_last_arrival_are_exact(tmp_path: Path) -> None:
    jobs = _trace(tmp_path)
    order = sorted(jobs, key=lambda j: (j.submit, j.name))  # the replay's ids: this order
    durations = {f"{i:016x}": j.duration for i, j in enumerate(order)}
    last = 1_700_000_000.0 + order[-1].submit  # the replay's clock starts at 1.7e9

    def known(job: model.JobRequest, elapsed: float) -> tuple[float, str]:
        return durations[job.id], "trace"

    estimates: list[tuple[str, float, forecast.Estimate]] = []
    starts: dict[str, list[float]] = {}

    def observe(report: CycleReport) -> None:
        snap = report.snapshot
        # A draining victim's end is only bounded (now + grace): such snapshots are left out.
        if snap and snap.now >= last and not any(r.stopping for r in snap.running):
            estimates.extend((j, snap.now, e) for j, e in forecast.forecast(snap, known).items())
        for jid in report.applied.placed:
            starts.setdefault(jid, []).append(report.now)

    config = model.Config(min_runtime_s=150.0, starvation_s=400.0)
    rep = replay.simulate(jobs, cluster.load_nodes(), config=config, observe=observe)

    assert sum(rep.preemptions.values()) > 0
    waits = {j for j, at, e in estimates if e.start_s is not None and e.start_s > at}
    assert len(waits) >= 5, waits  # not only jobs that fit at once
    huge = next(f"{i:016x}" for i, j in enumerate(order) if j.name == "huge")
    for jid, at, e in estimates:
        if jid == huge:
            assert e.start_s is None and "NoFittingNode" in e.unknown, e
            continue
        actual = min(s for s in starts[jid] if s >= at)
        assert e.start_s == actual, (jid, at, e)
