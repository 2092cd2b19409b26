"""Crash safety: SIGKILL the scheduler at every crash point of a busy schedule, restart
it, and check that no job is lost, no worker starts twice, no GPU is over-allocated and
no job holds GPUs for workers that never started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.backends.local import records
from scheduler.spec import JobSpec, Phase
from scheduler.spec.queue import QueueSpec
from scheduler.store.db import open_database
from scheduler.store.events import list_events
from scheduler.store.jobs import list_jobs
from scheduler.store.queues import create_queue
from scheduler.store.submission import submit_job

pytestmark = pytest.mark.integration  # starts the loop as a process, killed at each point

RUNNER = Path(__file__).with_name("crash_runner.py")
ROOT = Path(__file__).parents[2]


def _sleep(seconds: float, code: int = 0) -> list[str]:
    return ["python", "-c", f"import time, sys; time.sleep({seconds}); sys.exit({code})"]


# Queue a (guarantee 2) borrows most of the cluster first; queue b (guarantee 6) arrives
# at cycle 3 and takes its guarantee back by preemption. One job of a fails, is retried
# once (backoffLimit 1) and then Failed.
FIRST = [
    ("j0", "a", 2, 0.5, _sleep(1.0), 0),
    ("j1", "a", 4, 0.25, _sleep(1.0), 0),
    ("j4", "a", 1, 1.0, _sleep(0.1, code=3), 1),
    ("j6", "a", 4, 1.0, _sleep(1.0), 0),
]
LATE = [
    ("j2", "b", 1, 4.0, _sleep(0.3), 0),
    ("j3", "b", 2, 2.0, _sleep(0.2), 0),
    ("j5", "b", 3, 1.0, _sleep(0.2), 0),
]
FAILS = "j4"


def _spec(name: str, q: str, n: int, gpu: float, cmd: list[str], backoff: int) -> JobSpec:
    return JobSpec(
        name=name,
        queue=q,
        image="x",
        workers=n,
        gpu=gpu,
        command=cmd,
        backoff_limit=backoff,
        cpu="100m",
        memory="64Mi",
        termination_grace_period_seconds=1,
        distinct_gpus=False,  # sleeps, not NCCL ranks: the fractions stack as planned
    )


def _setup(tmp: Path) -> str:
    tmp.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{tmp / 'shoal.db'}"
    db = open_database(url)
    with db.session() as s:
        for name, g in (("a", 2), ("b", 6)):
            create_queue(session=s, spec=QueueSpec.model_validate({"name": name, "guaranteed": g}))
        for job in FIRST:
            submit_job(session=s, spec=_spec(*job), submitter="test")
    db.close()
    late = [_spec(*job).model_dump(mode="json", by_alias=True, exclude_none=True) for job in LATE]
    (tmp / "late.json").write_text(json.dumps(late))
    return url


def _run(url: str, state: Path, env: dict[str, str]) -> int:
    late = str(state.parent / "late.json")
    # The workers' run directories (`<TMPDIR>/shoal-run-*`) go under the test's own
    # directory: a service killed on purpose never removes them.
    tmp = state.parent / "tmp"
    tmp.mkdir(exist_ok=True)
    full = {**os.environ, **env, "PYTHONPATH": str(ROOT), "SHOAL_TEST_LATE": late}
    full["TMPDIR"] = str(tmp)
    return subprocess.run(
        [sys.executable, str(RUNNER), url, str(state)], env=full, cwd=ROOT, timeout=120
    ).returncode


def _check(url: str, state: Path) -> int:
    """Asserts the end state; returns how many preemptions the schedule went through."""
    db = open_database(url)
    with db.session() as s:
        rows = list_jobs(session=s, limit=100).items
        phases = {r.name: Phase(r.phase) for r in rows}
        preemptions = sum(
            1 for r in rows for e in list_events(session=s, job_id=r.id) if e.kind == "Preempted"
        )
    db.close()
    names = sorted(j[0] for j in FIRST + LATE)
    assert sorted(phases) == names, phases  # no job lost, none submitted twice
    assert phases.pop(FAILS) is Phase.FAILED
    assert set(phases.values()) == {Phase.SUCCEEDED}, phases
    rec = records.Records(state / "local")
    twice = {k: n for k, n in rec.launches().items() if n > 1}
    assert not twice, f"workers launched twice: {twice}"
    breaches = state / "breaches.txt"
    assert not breaches.exists(), breaches.read_text()
    # Every worker process is gone (nothing orphaned holds a GPU).
    assert not records.find_shims(rec.instance)
    return preemptions


def _points(tmp: Path) -> list[str]:
    url = _setup(tmp)
    log = tmp / "points.log"
    assert _run(url, tmp / "state", {"SHOAL_FAULT_LOG": str(log)}) == 0
    assert _check(url, tmp / "state") >= 1  # the schedule does go through a reclaim
    return [line.split()[1] for line in log.read_text().splitlines()]


def _crash_at(tmp: Path, n: int) -> None:
    url = _setup(tmp)
    state = tmp / "state"
    rc = _run(url, state, {"SHOAL_FAULT_AT": str(n)})
    assert rc == -9, f"no crash at point {n} (rc {rc})"
    assert _run(url, state, {}) == 0  # the restarted scheduler finishes the schedule
    _check(url, state)


def test_clean_run_reaches_every_kind_of_crash_point(tmp_path: Path) -> None:
    kinds = set(_points(tmp_path))
    assert {"place:recorded", "place:launched", "preempt:recorded", "preempt:stopped"} <= kinds


@pytest.mark.parametrize("n", [2, 9, 11, 14])
def test_crash_and_restart(tmp_path: Path, n: int) -> None:
    _crash_at(tmp_path, n)


@pytest.mark.slow
def test_crash_at_every_point(tmp_path: Path) -> None:
    # How many points a run passes depends on timing (backoffs, grace periods), so crash at
    # each point in turn until a run passes none and finishes by itself.
    total = len(_points(tmp_path / "clean"))
    for n in range(1, 2 * total + 1):
        tmp = tmp_path / f"crash-{n}"
        url = _setup(tmp)
        rc = _run(url, tmp / "state", {"SHOAL_FAULT_AT": str(n)})
        if rc == 0:
            assert n > total // 2, f"a run with a crash at point {n} of ~{total} never reached it"
            _check(url, tmp / "state")
            return
        assert rc == -9, f"point {n}: rc {rc}"
        assert _run(url, tmp / "state", {}) == 0  # the restarted scheduler finishes the schedule
        _check(url, tmp / "state")
    raise AssertionError(f"runs still crashing after {2 * total} points (clean run: {total})")


def test_a_crash_mid_gang_launch_is_resumed_not_failed(tmp_path: Path) -> None:
    """Issue 15, fault 3: SIGKILL between two workers of one gang's launch. The restarted
    scheduler starts the workers not started yet (each worker of the attempt exactly
    once) and the job succeeds: no failed attempt, no retry used up."""
    points = _points(tmp_path / "clean")
    # 1-based, as SHOAL_FAULT_AT counts: a worker started with another of its gang to go.
    n = next(
        i + 1
        for i in range(len(points) - 1)
        if points[i] == points[i + 1] == "launch:worker-started"
    )
    tmp = tmp_path / "crash"
    url = _setup(tmp)
    state = tmp / "state"
    assert _run(url, state, {"SHOAL_FAULT_AT": str(n)}) == -9
    before = records.Records(state / "local")
    (half,) = [r for r in before.attempts.values() if not r.launched]
    assert any(w.pid is None for w in half.workers) and any(w.pid for w in half.workers)
    assert _run(url, state, {}) == 0
    _check(url, state)  # every job ends as it should; no worker started twice
    counts = records.Records(state / "local").launches()
    for w in half.workers:
        assert counts.get(before.shim_key(half.job_id, half.attempt, w.worker)) == 1, w.worker
    db = open_database(url)
    with db.session() as s:
        kinds = [e.kind for e in list_events(session=s, job_id=half.job_id)]
    db.close()
    assert "AttemptFailed" not in kinds and "AttemptInterrupted" not in kinds, kinds
