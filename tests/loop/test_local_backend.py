"""The local backend: the pod's environment, idempotent launch across restarts, stop
with SIGTERM + SHOAL_PREEMPTED then SIGKILL after the grace period, logs, exit codes."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.wait import eventually

from scheduler.backends import base, workerenv
from scheduler.backends.local import LocalBackend
from scheduler.model import WorkerPlacement
from scheduler.spec import JobSpec

pytestmark = pytest.mark.integration  # starts local worker processes

PL = (WorkerPlacement(0, "node-a", (1,), 0.5), WorkerPlacement(1, "node-a", (1,), 0.5))


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    b = LocalBackend(tmp_path)
    yield b
    b.kill_all()
    b.close()


def spec(code: str, **kw: object) -> JobSpec:
    return JobSpec.model_validate(
        {"name": "j", "queue": "q", "image": "x", "command": ["python", "-c", code], **kw}
    )


def settle(b: LocalBackend, timeout: float = 60) -> list[base.WorkerStatus]:
    def stopped() -> list[base.WorkerStatus]:
        ws = list(b.workers())
        return ws if ws and all(w.state is not base.WorkerState.RUNNING for w in ws) else []

    done: list[base.WorkerStatus] = eventually(stopped, timeout, what="the workers to stop")
    return done


def test_workers_get_the_pod_environment(backend: LocalBackend) -> None:
    dump = "import os, json; print(json.dumps(dict(os.environ)))"
    s = spec(dump, workers=2, gpu=0.5, env={"RANK": "99", "FOO": "bar"})
    backend.launch(base.LaunchRequest("job1", s, 1, PL, {"SHOAL_API_URL": "http://x"}))
    settle(backend)
    envs = [json.loads(p.read_text()) for _, _, p in backend.log_files("job1")]
    port = backend.records.attempts["job1/1"].port
    for rank, env in enumerate(envs):
        expected = workerenv.worker_env(
            s,
            PL[rank],
            ["127.0.0.1"] * 2,
            job_id="job1",
            attempt=1,
            gpu_ids=["local-node-a-gpu1"],
            port=port,
        )
        assert {k: env[k] for k in expected} == expected  # RANK cannot be spoofed
        assert env["FOO"] == "bar" and env["SHOAL_API_URL"] == "http://x"
        assert env["SHOAL_GPU_FRACTION"] == "0.5000" and env["SHOAL_PREEMPT_FILE"]


def test_launch_is_idempotent_across_a_restart(tmp_path: Path) -> None:
    b = LocalBackend(tmp_path)
    req = base.LaunchRequest("job2", spec("print('hi')", workers=2, gpu=0.5), 1, PL)
    b.launch(req)
    b.launch(req)
    b.close()
    again = LocalBackend(tmp_path)  # a restarted service
    again.launch(req)
    ws = settle(again)
    assert [w.state for w in ws] == [base.WorkerState.SUCCEEDED] * 2
    assert sorted(again.records.launches().values()) == [1, 1]
    again.close()


def test_exit_codes_become_worker_states(backend: LocalBackend) -> None:
    backend.launch(base.LaunchRequest("job3", spec("import sys; sys.exit(7)"), 1, PL[:1]))
    (w,) = settle(backend)
    assert w.state is base.WorkerState.FAILED and w.exit_code == 7


def test_stop_signals_then_kills_after_the_grace_period(backend: LocalBackend) -> None:
    stubborn = (
        "import signal, time, os\n"
        "f = os.environ['SHOAL_PREEMPT_FILE']\n"
        "say = lambda *a: print('TERM', open(f).read().strip(), flush=True)\n"
        "signal.signal(signal.SIGTERM, say)\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    backend.launch(base.LaunchRequest("job4", spec(stubborn), 1, PL[:1]))
    log = backend.log_files("job4")[0][2]
    eventually(lambda: "up" in log.read_text(), what="the worker to start")
    t0 = time.time()
    backend.stop("job4", 1.0, reason=base.StopReason.PREEMPTED)
    (w,) = settle(backend)
    # The grace period was honoured, then the worker was killed (not waited out: it
    # sleeps 60 s); the upper bound is generous for a loaded machine.
    assert 0.9 <= time.time() - t0 < 45
    assert w.state is base.WorkerState.FAILED
    assert "TERM SHOAL_PREEMPTED=1" in log.read_text()


TELL = (
    "import signal, time, os, sys\n"
    "def term(*a):\n"
    "    why = open(os.environ['SHOAL_STOP_FILE']).read().strip()\n"
    "    pre = os.path.exists(os.environ['SHOAL_PREEMPT_FILE'])\n"
    "    print('TERM', why, 'preempted' if pre else 'not-preempted', flush=True)\n"
    "    sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, term)\n"
    "print('up', flush=True)\n"
    "time.sleep(60)\n"
)


@pytest.mark.parametrize(
    ("reason", "seen"),
    [
        (base.StopReason.CANCELLED, "TERM Cancelled not-preempted"),
        (base.StopReason.MAX_RUNTIME, "TERM MaxRuntimeExceeded not-preempted"),
        (base.StopReason.PREEMPTED, "TERM Preempted preempted"),
    ],
)
def test_a_worker_tells_a_cancel_from_a_preemption(
    backend: LocalBackend, reason: base.StopReason, seen: str
) -> None:
    backend.launch(base.LaunchRequest("job5", spec(TELL), 1, PL[:1]))
    log = backend.log_files("job5")[0][2]
    eventually(lambda: "up" in log.read_text(), what="the worker to start")
    backend.stop("job5", 30.0, reason=reason)
    backend.stop("job5", 0.0)  # a repeat keeps the first stop's reason and deadline
    (w,) = settle(backend)
    assert w.state is base.WorkerState.SUCCEEDED  # it exited on its own, not killed
    assert seen in log.read_text()


def test_a_worker_that_cannot_start_fails_with_the_true_reason(backend: LocalBackend) -> None:
    # Validation refuses these at submission; a spec stored before it may still hold one.
    bad = spec("print('hi')").model_copy(update={"env": {"A=B": "1"}})
    backend.launch(base.LaunchRequest("job6", bad, 1, PL[:1]))  # does not raise
    (w,) = settle(backend)
    assert w.state is base.WorkerState.FAILED and w.exit_code == 127
    assert "cannot start the worker" in w.message and "service stopped" not in w.message
    assert "cannot start the worker" in backend.log_files("job6")[0][2].read_text()


def test_a_stop_right_after_the_launch_still_reaches_the_worker(backend: LocalBackend) -> None:
    """A stop sent while the shim is still starting (a cancel or maxRuntime right after the
    launch) used to kill the shim before it had set its SIGTERM forwarder: the worker was
    never told and its exit code never recorded. The shim sets its handlers before its
    ledger line, and the backend signals only shims listed there."""
    backend.launch(
        base.LaunchRequest(
            "early", spec("import time; time.sleep(120)"), 1, (WorkerPlacement(0, "node-a", (0,)),)
        )
    )
    backend.stop("early", 3.0, reason=base.StopReason.CANCELLED)  # at once: no process is up yet
    (w,) = settle(backend)
    assert w.exit_code == 143, w  # told (SIGTERM's default action), its exit recorded
