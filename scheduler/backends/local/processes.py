"""The local backend's process side: starting a worker under `shim`, signalling it, and
reading what became of it (its exit file, its process). The bookkeeping (the records,
the lock, the watcher) is `backend`'s.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from scheduler.backends import base
from scheduler.backends.local import records, shimenv
from scheduler.backends.local.users import RunAs

HOST_VARS = ("HOME", "LANG", "LC_ALL", "TMPDIR", "TZ")


def free_port(taken: set[int]) -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        # TF workers use port+1+i, so keep a little room between jobs.
        if all(abs(port - t) > 64 for t in taken):
            return port
    raise RuntimeError("no free local port")


def spawn(
    command: list[str],
    w: records.WorkerRecord,
    env: dict[str, str],
    *,
    ledger: Path,
    shim_key: str,
    user: RunAs | None = None,
    home: Path | None = None,
) -> subprocess.Popen[bytes] | None:
    """Start one worker (`command`: the spec's command + args) under `shim`, in its own
    session, and note its pid in `w`. None when it cannot start: then its exit file says
    127 and its log why (that worker's failure, never the cycle's). With `user`, the shim
    (still this process's user: it writes the exit file) runs the worker as that user,
    whose HOME is its own, or `home` (its attempt's directory) where it has none."""
    argv = list(command)
    if argv and argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin")
    env.update({k: os.environ[k] for k in HOST_VARS if k in os.environ})
    if user is not None:
        env["USER"] = env["LOGNAME"] = user.name
        env["HOME"] = user.home if os.path.isdir(user.home) or home is None else str(home)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if not argv:
        unstartable(w, "the job has no command")
        return None
    shim = [sys.executable, "-m", "scheduler.backends.local.shim", "--"]
    # Its files and key in its environment: any local user reads its arguments.
    told = shimenv.environment(
        exit_file=w.exit_file,
        ledger=str(ledger),
        key=shim_key,
        user=None if user is None else user.name,
    )
    try:
        # 0600 whatever the umask: a log is its team's, read through the API only.
        with open(os.open(w.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab") as log:
            proc = subprocess.Popen(
                shim + argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env | told,
                start_new_session=True,  # survives the service; its own process group
            )
    except (OSError, ValueError) as exc:
        # A value no process can take (validation refuses these at submission; a
        # spec stored by an older version may still hold one): this worker's failure,
        # with the true reason, never the cycle's.
        unstartable(w, f"cannot start the worker: {exc}")
        return None
    w.pid = proc.pid
    w.start_ticks = records.start_ticks(proc.pid)
    return proc


def unstartable(w: records.WorkerRecord, why: str) -> None:
    w.error = why
    with open(os.open(w.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "a") as log:
        log.write(f"shoal: {why}\n")
    write_atomic(w.exit_file, "127\n")


def status(rec: records.AttemptRecord, w: records.WorkerRecord) -> base.WorkerStatus:
    """What became of a worker: its exit file, else whether its process is alive."""
    exit_path = Path(w.exit_file)
    code: int | None = None
    if exit_path.exists():
        try:
            code = int(exit_path.read_text().strip() or "1")
        except ValueError:
            code = 1
    if code is not None:
        state = base.WorkerState.SUCCEEDED if code == 0 else base.WorkerState.FAILED
        message = "" if code == 0 else (w.error or f"exit code {code}")
    elif records.alive(w):
        state, message = base.WorkerState.RUNNING, ""
    elif w.pid is None:
        state, message = (
            base.WorkerState.FAILED,
            "never started: the service stopped during launch",
        )
    else:
        state, message = base.WorkerState.FAILED, "worker process vanished (killed)"
    if w.stop_reason and state is not base.WorkerState.RUNNING:
        message = f"{w.stop_reason}: {message or 'exit code 0'}"  # a shrink removed it
    return base.WorkerStatus(
        job_id=rec.job_id,
        attempt=rec.attempt,
        worker=w.worker,
        state=state,
        exit_code=code,
        message=message,
        node=w.node,
        gpus=tuple(w.gpus),
        fraction=w.fraction,
        queue=rec.queue,
        removed=bool(w.stop_reason),
    )


def write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp"
    Path(tmp).write_text(text)
    os.replace(tmp, path)


def send(pid: int, sig: signal.Signals, *, group: bool) -> None:
    try:
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
