"""Teams on one box (issue 23): a worker runs as the OS user its queue is given and can
read neither the admin token nor the state directory, though it still gets its stop
files; nothing in any worker's environment points into the state directory; the files
a worker is told of live in its attempt's directory under the run directory."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.builders import launch_request
from support.wait import eventually

from scheduler.backends import base
from scheduler.backends.local.backend import LocalBackend
from scheduler.backends.local.rundir import RunDir
from scheduler.backends.local.users import RunAs, WorkerUsers
from scheduler.cli.statedir import prepare_state, secure

pytestmark = pytest.mark.integration  # starts local worker processes

SH = shutil.which("sh") or "/bin/sh"


@pytest.fixture
def box() -> Iterator[Path]:
    """A directory others may pass through, as a state directory's parent is on a real
    box (pytest's own tmp is 0700 root: a worker of another user could read nothing
    there, whatever Shoal did)."""
    d = Path(tempfile.mkdtemp(prefix="shoal-box-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _launch(b: LocalBackend, name: str, script: str, framework: str = "pytorch") -> str:
    req = launch_request(name, gpu=None, node_of=lambda i: "node-a", framework=framework)
    spec = req.spec.model_copy(update={"command": [SH, "-c", script], "args": []})
    b.launch(base.LaunchRequest(req.job_id, spec, 1, req.placements, req.extra_env))
    return req.job_id


def _log(b: LocalBackend, job: str) -> str:
    files = b.log_files(job)
    return files[0][2].read_text() if files else ""


@pytest.mark.skipif(os.geteuid() != 0, reason="switching a worker's user needs root")
def test_a_worker_runs_as_its_user_and_cannot_read_the_state(box: Path) -> None:
    nobody = RunAs.lookup("nobody", where="test")
    state = box / "state"
    prepare_state(state, "http://127.0.0.1:1")
    secure(state)
    control = box / "control"  # readable by anyone: proves a "denied" below is the state's
    control.write_text("x")
    control.chmod(0o644)
    users = WorkerUsers(default=nobody, can_switch=True)
    b = LocalBackend(state, users=users, run_dir=box / "run")
    try:
        script = (
            'echo "uid=$(id -u)"; echo "home=$HOME"\n'
            f"cat {control} >/dev/null 2>&1 && echo control=read || echo control=denied\n"
            f"cat {state}/admin-token >/dev/null 2>&1 && echo token=read || echo token=denied\n"
            f"ls {state} >/dev/null 2>&1 && echo state=listed || echo state=denied\n"
            'trap \'echo "reason=$(cat "$SHOAL_STOP_FILE")"; exit 0\' TERM\n'
            "echo ready; while :; do sleep 0.1; done\n"
        )
        job = _launch(b, "as-nobody", script)
        eventually(lambda: "ready" in _log(b, job), 30, what="the worker to start")
        out = _log(b, job)
        assert f"uid={nobody.uid}" in out
        assert "control=read" in out
        assert "token=denied" in out and "state=denied" in out
        rec = b.records.attempts[f"{job}/1"]
        work = Path(rec.stop_file).parent
        assert rec.user == "nobody" and work.parent == box / "run"
        st = work.stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (nobody.uid, 0o700)
        assert stat.S_IMODE((box / "run").stat().st_mode) == 0o711
        home = nobody.home if os.path.isdir(nobody.home) else str(work)
        assert f"home={home}" in out
        log = b.log_files(job)[0][2].stat()
        assert (log.st_uid, stat.S_IMODE(log.st_mode)) == (0, 0o600)  # written via its fd
        # The service writes into the worker's own directory; the worker reads it.
        b.stop(job, 30, reason=base.StopReason.PREEMPTED)
        eventually(lambda: "reason=Preempted" in _log(b, job), 30, what="the stop reason")
    finally:
        b.kill_all()
        b.close()


def test_no_path_of_the_state_directory_in_a_workers_environment(tmp_path: Path) -> None:
    state = tmp_path / "state"
    b = LocalBackend(state, run_dir=tmp_path / "run")
    try:
        dump = 'env; echo "hostfile=$(cat "$OMPI_MCA_orte_default_hostfile")"'
        job = _launch(b, "mpi-env", dump, framework="mpi")
        eventually(lambda: "hostfile=127.0.0.1" in _log(b, job), 30, what="the worker's env")
        env = dict(line.split("=", 1) for line in _log(b, job).splitlines() if "=" in line[1:])
        for key in ("SHOAL_STOP_FILE", "SHOAL_PREEMPT_FILE", "OMPI_MCA_orte_default_hostfile"):
            assert Path(env[key]).parent.parent == tmp_path / "run", key
        assert not {k: v for k, v in env.items() if str(state) in v}
    finally:
        b.kill_all()
        b.close()


def test_finished_attempts_leave_no_run_directory(tmp_path: Path) -> None:
    b = LocalBackend(tmp_path / "state", run_dir=tmp_path / "run")
    job = _launch(b, "short", "echo done")
    eventually(
        lambda: [w.state for w in b.workers()] == [base.WorkerState.SUCCEEDED], 30, what="exit"
    )
    assert (tmp_path / "run" / f"{job}.1").is_dir()
    b.close()
    assert not (tmp_path / "run").exists()  # its last attempt ended: the root goes too


def test_an_old_record_with_its_files_in_the_state_directory_still_stops(tmp_path: Path) -> None:
    state = tmp_path / "state"
    b = LocalBackend(state, run_dir=tmp_path / "run")
    script = 'trap \'echo "reason=$(cat "$SHOAL_STOP_FILE")"; exit 0\' TERM; echo ready; '
    script += "while :; do sleep 0.1; done"
    try:
        job = _launch(b, "old", script)
        rec = b.records.attempts[f"{job}/1"]
        # As an older version recorded it: the stop file in the state directory.
        rec.stop_file = str(state / "jobs" / job / "1" / "stop-reason")
        b.records.save(rec)
        eventually(lambda: "ready" in _log(b, job), 30, what="the worker to start")
        b.stop(job, 30, reason=base.StopReason.CANCELLED)
        eventually(lambda: Path(rec.stop_file).exists(), 30, what="the stop file")
        assert Path(rec.stop_file).read_text() == "Cancelled\n"
    finally:
        b.kill_all()
        b.close()


def test_a_user_that_does_not_exist_or_is_root_is_refused() -> None:
    with pytest.raises(ValueError, match="no OS user 'no-such-user-x'"):
        RunAs.lookup("no-such-user-x", where="--worker-user")
    with pytest.raises(ValueError, match="is root"):
        RunAs.lookup("root", where="--worker-user")


def test_a_run_directory_that_is_not_the_services_is_refused(tmp_path: Path) -> None:
    mine = tmp_path / "elsewhere"
    mine.mkdir()
    (tmp_path / "link").symlink_to(mine)  # planted in /tmp by another user, say
    with pytest.raises(RuntimeError, match="not this service's directory"):
        RunDir(tmp_path / "link").ensure()
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chown(theirs, 65534, 65534)
        with pytest.raises(RuntimeError, match="not this service's directory"):
            RunDir(theirs).ensure()
    RunDir(tmp_path / "ours").ensure()
    assert stat.S_IMODE((tmp_path / "ours").stat().st_mode) == 0o711
