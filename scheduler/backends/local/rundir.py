"""The worker run directory: the files a worker is told of, kept outside the state directory.

`<tmp>/shoal-run-<instance>/` belongs to the service (0711: anyone may pass through, nobody
may list it) and holds one directory per attempt, `<job>.<attempt>/`, owned by the user
the attempt's workers run as (`users`) and 0700. In it: SHOAL_STOP_FILE, SHOAL_PREEMPT_FILE
and the MPI hostfile, the only paths a worker's environment names. What only the service
reads stays in the state directory (0700): records, exit files and logs, which a worker
writes through the file descriptor its shim was given, never by path.

A directory its worker owns is the worker's to fill: the service writes there through a
fresh random name (`mkstemp`: O_EXCL, so never through a link the worker planted) and a
rename, which replaces whatever the worker left at the final name instead of following it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import quote

from scheduler.backends import base
from scheduler.backends.local import records
from scheduler.backends.local.users import RunAs
from scheduler.model import WorkerPlacement


class RunDir:
    """The run directory of one state directory (its `instance`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._ready = False

    def ensure(self) -> None:
        """Make the root (at the first launch, or when `shoal serve` starts: a backend
        that never launches leaves nothing in /tmp). RuntimeError when it is not ours."""
        if self._ready:
            return
        self.root.mkdir(mode=0o711, parents=True, exist_ok=True)
        st = os.lstat(self.root)
        # /tmp is everyone's: a directory of this name someone else made (or a link) is
        # theirs to read and swap, so the service will not use it.
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise RuntimeError(
                f"{self.root} exists and is not this service's directory (owner uid "
                f"{st.st_uid}); remove it, or set TMPDIR elsewhere"
            )
        os.chmod(self.root, 0o711)
        self._ready = True

    @classmethod
    def for_instance(cls, instance: str) -> RunDir:
        return cls(Path(tempfile.gettempdir()) / f"shoal-run-{instance}")

    def _name(self, job_id: str, attempt: int) -> str:
        return f"{quote(job_id, safe='')}.{attempt}"

    def attempt_dir(self, job_id: str, attempt: int, user: RunAs | None) -> Path:
        """The attempt's directory, made (again) if missing, owned by `user` when given."""
        self.ensure()
        d = self.root / self._name(job_id, attempt)
        d.mkdir(mode=0o700, exist_ok=True)
        if user is not None:
            os.chown(d, user.uid, user.gid)
        os.chmod(d, 0o700)
        return d

    def new_attempt(
        self, request: base.LaunchRequest, log_dir: Path, user: RunAs | None, *, port: int
    ) -> records.AttemptRecord:
        """The record of a new attempt, its directories made: logs and exit files in
        `log_dir` (the state directory's), the files its workers are told of here."""
        log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        work = self.attempt_dir(request.job_id, request.attempt, user)
        return records.AttemptRecord(
            job_id=request.job_id,
            attempt=request.attempt,
            queue=request.spec.queue,
            port=port,
            preempt_file=str(work / "preempted"),
            stop_file=str(work / "stop-reason"),
            user=user.name if user is not None else "",
            workers=[
                worker_record(p, log_dir, work if request.spec.elastic else None)
                for p in request.placements
            ],
        )

    def remove(self, job_id: str, attempt: int | None = None) -> None:
        """Remove one attempt's directory, or every attempt's of `job_id`."""
        prefix = quote(job_id, safe="") + "."
        if attempt is not None:
            targets = [self.root / self._name(job_id, attempt)]
        elif self.root.is_dir():
            targets = [
                d
                for d in self.root.iterdir()
                if d.name.startswith(prefix) and d.name[len(prefix) :].isdigit()
            ]
        else:
            targets = []
        for d in targets:
            shutil.rmtree(d, ignore_errors=True)  # fd-based: no link is followed

    def sweep(self, attempts: Iterable[records.AttemptRecord]) -> None:
        """Remove the directories of launched attempts whose workers have all ended (no
        worker needs them), then the root if nothing is left (a clean stop leaves none)."""
        for rec in attempts:
            if rec.launched and all(_ended(w) for w in rec.workers):
                self.remove(rec.job_id, rec.attempt)
        with contextlib.suppress(OSError):  # attempts still have directories here
            self.root.rmdir()


def worker_record(
    p: WorkerPlacement, log_dir: Path, work: Path | None, generation: int = 0
) -> records.WorkerRecord:
    """A worker's record: its log and exit file in `log_dir`; with `work` (an elastic
    attempt's directory here) a stop file of its own, so a shrink tells only the workers
    it removes."""
    exit_name = f"worker-{p.worker}.{generation}.exit" if generation else f"worker-{p.worker}.exit"
    return records.WorkerRecord(
        worker=p.worker,
        node=p.node,
        gpus=list(p.gpus),
        fraction=p.fraction,
        log=str(log_dir / f"worker-{p.worker}.log"),
        exit_file=str(log_dir / exit_name),
        stop_file=str(work / f"stop-reason-{p.worker}") if work is not None else "",
        generation=generation,
    )


def _ended(w: records.WorkerRecord) -> bool:
    # Its exit file is written once the user's process is gone; the shim that wrote it
    # may live a moment longer, and needs nothing from the run directory by then.
    return not records.alive(w) or Path(w.exit_file).exists()


def is_inside(path: str | Path, root: Path) -> bool:
    return Path(path).is_relative_to(root)


def write_for_worker(path: str | Path, text: str) -> None:
    """Write `text` to `path` in a directory a worker may own (see the module doc); the
    file is 0644, readable only by whoever can enter that 0700 directory."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".shoal-")
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
