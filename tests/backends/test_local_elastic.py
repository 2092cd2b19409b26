"""The local backend resizes an elastic attempt in place (`base.Resizable`): `grow` starts
only the workers the attempt lacks and `shrink` stops only the ones named (their own stop
file says `Resized`), each idempotent; and the elastic example (torchrun agents on the
CPU) trains on across a grow and a shrink, resuming from its checkpoint each time."""

from __future__ import annotations

import itertools
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.wait import eventually

from scheduler.backends import base
from scheduler.backends.local import LocalBackend, processes
from scheduler.model import Node, WorkerPlacement
from scheduler.spec import JobSpec

pytestmark = pytest.mark.integration  # starts local worker processes

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "pytorch-elastic"
NODES = [Node("cpu-a", 16000, 65536), Node("cpu-b", 16000, 65536)]
ENDED = (base.WorkerState.SUCCEEDED, base.WorkerState.FAILED)

# A worker that says why it was told to stop (its own stop file), then exits 0.
TELL = (
    "import os, signal, sys, time\n"
    "def term(*a):\n"
    "    print('TERM', open(os.environ['SHOAL_STOP_FILE']).read().strip(), flush=True)\n"
    "    sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, term)\n"
    "print('up', flush=True)\n"
    "time.sleep(120)\n"
)
DEAF = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
# A worker that dies of SIGTERM, as torchrun's agent does: its shim reports exit 143.
SLEEP = "import time; time.sleep(120)"


def placements(n: int) -> tuple[WorkerPlacement, ...]:
    return tuple(WorkerPlacement(i, NODES[i % 2].name) for i in range(n))


def elastic(code: str) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": "el",
            "queue": "q",
            "image": "x",
            "framework": "pytorch",
            "workers": {"min": 2, "max": 4},
            "command": ["python", "-c", code],
        }
    )


def req(s: JobSpec, n: int, job: str = "el") -> base.LaunchRequest:
    return base.LaunchRequest(job, s, 1, placements(n))


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    b = LocalBackend(tmp_path / "state", nodes=NODES, run_dir=tmp_path / "run")
    yield b
    b.kill_all()
    b.close()


def states(b: LocalBackend, job: str = "el") -> dict[int, base.WorkerStatus]:
    return {w.worker: w for w in b.workers() if w.job_id == job}


def running(b: LocalBackend, n: int) -> dict[int, base.WorkerStatus]:
    now = states(b)
    ok = len(now) == n and all(w.state is base.WorkerState.RUNNING for w in now.values())
    return now if ok else {}


def logged(b: LocalBackend, worker: int, text: str) -> bool:
    logs = {w: p for _, w, p in b.log_files("el")}
    return worker in logs and text in logs[worker].read_text()


def pids(b: LocalBackend) -> dict[int, int | None]:
    return {w.worker: w.pid for w in b.records.attempts["el/1"].workers}


def test_the_local_backend_declares_it_can_resize(backend: LocalBackend) -> None:
    assert backend.capabilities().resizable is backend


def test_grow_starts_only_the_new_workers_and_a_repeat_does_nothing(
    backend: LocalBackend, tmp_path: Path
) -> None:
    s = elastic(TELL)
    backend.launch(req(s, 2))
    eventually(lambda: running(backend, 2), what="two workers")
    before = pids(backend)
    backend.grow(req(s, 3))
    eventually(lambda: running(backend, 3), what="three workers")
    grown = pids(backend)
    assert {w: grown[w] for w in (0, 1)} == before and grown[2] is not None
    backend.grow(req(s, 3))  # a repeat
    assert pids(backend) == grown
    eventually(lambda: logged(backend, 2, "up"), what="worker 2 to start")
    # The shim appends its ledger line beside the worker it starts: wait for it, then
    # each of the three processes is there exactly once.
    eventually(lambda: len(backend.records.launches()) == 3, what="worker 2's ledger line")
    assert sorted(backend.records.launches().values()) == [1, 1, 1]
    backend.close()  # a restarted service knows the grown worker: a repeat starts none
    again = LocalBackend(tmp_path / "state", nodes=NODES, run_dir=tmp_path / "run")
    try:
        again.grow(req(s, 3))
        assert pids(again) == grown and len(running(again, 3)) == 3
        assert sorted(again.records.launches().values()) == [1, 1, 1]
    finally:
        again.kill_all()
        again.close()


class Crash(Exception):
    pass


def test_a_grow_a_crash_interrupted_is_finished_by_a_repeat(tmp_path: Path) -> None:
    def crash_after_2(job: str, attempt: int, worker: int) -> None:
        if worker == 2:
            raise Crash  # the service dies between starting worker 2 and worker 3

    kw: dict[str, Any] = {"nodes": NODES, "run_dir": tmp_path / "run"}
    b = LocalBackend(tmp_path / "state", on_spawn=crash_after_2, **kw)
    s = elastic(TELL)
    b.launch(req(s, 2))
    with pytest.raises(Crash):
        b.grow(req(s, 4))
    b.close()
    again = LocalBackend(tmp_path / "state", **kw)  # restarted
    try:
        # Worker 3 never started: not reported (missing), so the loop repeats the grow.
        assert sorted(eventually(lambda: running(again, 3))) == [0, 1, 2]
        again.grow(req(s, 4))
        assert sorted(eventually(lambda: running(again, 4))) == [0, 1, 2, 3]
        ledger = eventually(lambda: len(again.records.launches()) == 4 and again.records)
        assert sorted(ledger.launches().values()) == [1, 1, 1, 1]
    finally:
        again.kill_all()
        again.close()


def test_a_crash_right_after_a_shrinks_sigterm_leaves_a_removed_worker_not_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35: the service dies just after `shrink` sent SIGTERM to a removed worker.
    Its record must already say the worker was removed (`Resized`): else the restarted
    service reports the exit 143 as a plain failure, and a grow back into that index
    starts nothing, so the loop fails the job ("worker 3: exit code 143")."""
    # No watcher tick: it would save the records the crash left in memory.
    kw: dict[str, Any] = {"nodes": NODES, "run_dir": tmp_path / "run", "watch_interval_s": 3600}
    b = LocalBackend(tmp_path / "state", **kw)
    s = elastic(SLEEP)
    b.launch(req(s, 4))
    eventually(lambda: running(b, 4), what="four workers")
    eventually(lambda: len(b.records.launches()) == 4, what="the shims to be up")
    before = pids(b)
    send = processes.send

    def dies_after_sigterm(pid: int, sig: signal.Signals, *, group: bool) -> None:
        send(pid, sig, group=group)
        if sig == signal.SIGTERM:
            raise Crash  # the crash point: the signal sent, nothing after it done

    monkeypatch.setattr(processes, "send", dies_after_sigterm)
    with pytest.raises(Crash):
        b.shrink("el", 1, [3], 30)
    monkeypatch.undo()
    b.close()
    again = LocalBackend(tmp_path / "state", **kw)  # restarted
    try:
        gone = eventually(lambda: states(again)[3].state in ENDED and states(again)[3])
        assert gone.exit_code == 143
        assert gone.message == "Resized: exit code 143", gone.message  # removed, not failed
        again.grow(req(s, 4))  # the index again: a new process of the next generation
        eventually(lambda: running(again, 4), what="worker 3 back")
        assert again.records.attempts["el/1"].workers[3].generation == 1
        after = pids(again)
        assert [after[w] for w in range(3)] == [before[w] for w in range(3)]
        assert after[3] not in (None, before[3])
    finally:
        again.kill_all()
        again.close()


def test_shrink_stops_only_those_workers_and_a_repeat_does_nothing(
    backend: LocalBackend,
) -> None:
    s = elastic(TELL)
    backend.launch(req(s, 3))
    eventually(lambda: all(logged(backend, w, "up") for w in range(3)), what="the workers")
    backend.shrink("el", 1, [2], 30)
    rec = backend.records.attempts["el/1"]
    deadline = rec.workers[2].stop_deadline
    backend.shrink("el", 1, [2], 1)  # a repeat keeps the first one's deadline
    assert rec.workers[2].stop_deadline == deadline
    gone = eventually(lambda: states(backend)[2].state in ENDED and states(backend)[2])
    # Told why (its own stop file), it exited 0; it is still listed, as a removed worker.
    assert gone.exit_code == 0 and gone.message.startswith("Resized")
    assert logged(backend, 2, "TERM Resized")
    now = states(backend)
    assert [now[w].state for w in (0, 1)] == [base.WorkerState.RUNNING] * 2
    assert not any(Path(w.stop_file).exists() for w in rec.workers[:2])  # nobody else told
    backend.shrink("el", 1, [2], 30)  # after it ended: nothing
    assert rec.workers[2].stop_deadline == deadline
    # A whole-job stop reaches the rest with its own reason.
    backend.stop("el", 5, reason=base.StopReason.CANCELLED)
    eventually(lambda: all(w.state in ENDED for w in states(backend).values()))
    assert logged(backend, 0, "TERM Cancelled") and logged(backend, 1, "TERM Cancelled")


def test_a_grow_adds_back_a_removed_worker_once_it_has_ended(backend: LocalBackend) -> None:
    backend.launch(req(elastic(DEAF), 3))
    eventually(lambda: running(backend, 3), what="three workers")
    eventually(lambda: len(backend.records.launches()) == 3, what="the shims to be up")
    backend.shrink("el", 1, [2], 60)  # it ignores SIGTERM: it drains for the grace period
    with pytest.raises(base.BackendError) as refused:
        backend.grow(req(elastic(DEAF), 3))
    assert refused.value.transient
    backend.shrink("el", 1, [2], 0)  # a repeat: the grace period is still the first one
    assert states(backend)[2].state is base.WorkerState.RUNNING
    backend.stop("el", 0)  # the whole job: killed at once
    eventually(lambda: all(w.state in ENDED for w in states(backend).values()))
    s = elastic(TELL)
    backend.launch(base.LaunchRequest("el", s, 2, placements(3)))  # a fresh attempt
    new = base.LaunchRequest("el", s, 2, placements(3))
    eventually(lambda: logged(backend, 2, "up"), what="attempt 2's worker 2")
    backend.shrink("el", 2, [2], 30)
    eventually(lambda: states_of(backend, 2)[2].state in ENDED, what="worker 2 to end")
    backend.grow(new)  # the index again: a new process, of the next generation
    backend.grow(new)
    back = backend.records.attempts["el/2"].workers[2]
    assert back.generation == 1 and back.stop_deadline is None and back.pid is not None
    ws = eventually(lambda: states_of(backend, 2), what="attempt 2's workers")
    assert len(ws) == 3 and ws[2].state is base.WorkerState.RUNNING
    # Each process once in the ledger, the new one under its generation's key.
    keys = ["2:0", "2:1", "2:2", "2:2.1"]

    def ledger() -> dict[str, int]:
        now = backend.records.launches()
        return now if sorted(k.split(":el:")[1] for k in now if ":el:2:" in k) == keys else {}

    assert all(n == 1 for n in eventually(ledger, what="the new shim").values())


def states_of(b: LocalBackend, attempt: int) -> dict[int, base.WorkerStatus]:
    return {w.worker: w for w in b.workers() if w.job_id == "el" and w.attempt == attempt}


# -- the elastic example, for real ------------------------------------------------------

EVERY = 5  # the example's checkpoint interval here


def progress(b: LocalBackend, job: str) -> list[dict[str, Any]]:
    """Rank 0's SHOAL_PROGRESS lines from every worker's log (rank 0 is whichever agent
    the rendezvous made it), in the order they were printed."""
    out = []
    for _, _, path in b.log_files(job):
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith("SHOAL_PROGRESS "):
                try:
                    out.append(json.loads(line.removeprefix("SHOAL_PROGRESS ")))
                except ValueError:
                    continue  # a line a kill cut short
    return sorted(out, key=lambda p: p["t"])


def runs(seq: list[int]) -> list[int]:
    """`seq` with each run of equal values as one."""
    return [v for i, v in enumerate(seq) if i == 0 or seq[i - 1] != v]


@pytest.mark.slow
def test_the_elastic_example_trains_on_across_a_grow_and_a_shrink(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)  # the service's working directory: the job's paths are relative
    doc = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    steps = 200
    doc["env"].update(
        STEPS=str(steps),
        CHECKPOINT_EVERY=str(EVERY),
        STEP_SECONDS="0.1",
        CHECKPOINT_DIR=str(tmp_path / "checkpoints"),
    )
    s = JobSpec.model_validate(doc)
    assert s.elastic and s.command == ["torchrun"]
    b = LocalBackend(tmp_path / "state", nodes=NODES, run_dir=tmp_path / "run")

    def at(world: int, after: int = 0, count: int = 1) -> list[dict[str, Any]]:
        seen = progress(b, "ex")
        later = [p for p in seen[after:] if p["world"] == world]
        return seen if len(later) >= count else []

    try:
        b.launch(base.LaunchRequest("ex", s, 1, placements(2)))
        seen = eventually(lambda: at(2, count=5), 240, 0.2, "steps at world size 2")
        t0 = time.monotonic()
        b.grow(base.LaunchRequest("ex", s, 1, placements(3)))
        seen = eventually(lambda: at(3, len(seen)), 240, 0.2, "a step at world size 3")
        grow_s = time.monotonic() - t0
        seen = eventually(lambda: at(3, 0, 5), 120, 0.2, "steps at world size 3")
        t1 = time.monotonic()
        b.shrink("ex", 1, [2], 10)
        seen = eventually(lambda: at(2, len(seen)), 240, 0.2, "a step at world size 2 again")
        shrink_s = time.monotonic() - t1
        print(f"\nelastic example: grow to 3 in {grow_s:.1f}s, shrink to 2 in {shrink_s:.1f}s")

        def ended() -> dict[int, base.WorkerStatus]:
            now = {w.worker: w for w in b.workers() if w.job_id == "ex"}
            return now if len(now) == 3 and all(w.state in ENDED for w in now.values()) else {}

        final = eventually(ended, 300, 0.5, "the job's workers to end")
        removed = b.records.attempts["ex/1"].workers[2]
        assert Path(removed.stop_file).read_text().strip() == "Resized"
    finally:
        b.kill_all()
        b.close()
    assert [final[w].exit_code for w in (0, 1)] == [0, 0], [final[w].message for w in (0, 1)]
    assert final[2].message.startswith("Resized"), final[2].message
    seen = progress(b, "ex")
    parts = [
        (p["world"], p["step"])
        for i, p in enumerate(seen)
        if i == 0 or seen[i - 1]["world"] != p["world"]
    ]
    print(f"(world, first step) at each size: {parts}, last {seen[-1]['step']}")
    assert runs([p["world"] for p in seen]) == [2, 3, 2]
    assert seen[-1]["step"] == steps
    back = [a["step"] - b_["step"] for a, b_ in itertools.pairwise(seen)]
    assert max(back) < EVERY, "a restart went back further than its last checkpoint"
    last_resize = max(i for i, p in enumerate(seen) if i and seen[i - 1]["world"] != p["world"])
    assert max(p["loss"] for p in seen[last_resize:]) < seen[0]["loss"]
