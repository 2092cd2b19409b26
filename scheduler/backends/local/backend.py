"""The `local` backend: simulated nodes from a YAML file, every worker a real process.

Used by `shoal serve` on a laptop. A worker gets exactly the environment its pod would
(`workerenv.worker_env`, all hosts 127.0.0.1 and one free rendezvous port per attempt) plus
the few host variables a process needs to run at all (PATH, HOME, LANG, TMPDIR). There
are no images here: `image` is recorded but ignored, `python`/`python3` as argv[0] mean
the service's own interpreter, and the working directory is the service's.

Each worker runs under `shim` (see there), in its own session, with stdout and stderr
in `<state>/jobs/<job>/<attempt>/worker-<i>.log`, as the OS user `users` names for its
queue (the service's own where none is set or it is not root). The files a worker is
told of (SHOAL_STOP_FILE, SHOAL_PREEMPT_FILE, the MPI hostfile) are in its attempt's
directory under the run directory (`rundir`), never in the state directory. Attempts
are recorded in `records` before anything starts, so `launch` of a known attempt is a
no-op even across restarts. A launch a crash interrupted is resumed, not failed: after a
restart the workers it had not started are not reported (missing, so the loop finishes
the launch), and a repeated `launch` of that attempt starts exactly those (`starting`).
`stop` (`stopping`) writes its reason to the stop files, sends SIGTERM, and SIGKILLs the
process group once the grace period is over (checked by `workers()` and by the watcher
thread, so `stop` itself never blocks). An elastic job is resized in place (`resizing`):
`grow` starts the workers its attempt lacks, `shrink` stops some of them as `stop` would.

On a real GPU host (`host`: the GPUs NVML found, made by `host.local_backend`) a worker
sees only its GPUs (`environment`); with an MPS daemon (`use_mps`) the nodes report
`enforcement: mps`, and `close` stops the daemon unless fractional workers still use it.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from scheduler.backends import base
from scheduler.backends.local import (
    cluster,
    elsewhere,
    gpus,
    mps,
    processes,
    records,
    resizing,
    rundir,
    starting,
    statedir,
    stopping,
    volumes,
)
from scheduler.backends.local.users import WorkerUsers
from scheduler.model import Enforcement, Node
from scheduler.spec import JobSpec

log = logging.getLogger("shoal.local")


class LocalBackend:
    """`base.ClusterBackend` with local processes; thread-safe."""

    def __init__(
        self,
        state_dir: str | Path,
        *,
        cluster_file: str | Path | None = None,
        nodes: Sequence[Node] | None = None,
        on_change: Callable[[], None] | None = None,
        watch_interval_s: float = 0.1,
        on_spawn: Callable[[str, int, int], None] | None = None,
        host: gpus.Host | None = None,
        users: WorkerUsers | None = None,
        run_dir: str | Path | None = None,
        allowed_host_paths: Sequence[str] | None = None,
    ) -> None:
        """`on_spawn(job_id, attempt, worker)` is called after each worker is started and
        recorded (the crash-safety tests' crash point in the middle of a gang launch).
        `run_dir`: the workers' run directory (default `<tmp>/shoal-run-<instance>`).
        `allowed_host_paths`: where a job's hostPath volumes may be (`volumes`); default:
        the cluster file's `allowedHostPaths`."""
        self.state_dir = Path(state_dir)
        self.allowed_host_paths = tuple(
            allowed_host_paths
            if allowed_host_paths is not None
            else volumes.allowed_from_file(cluster_file)
        )
        self.users = users or WorkerUsers()
        self._host = host
        if host is not None:
            self._nodes = host.nodes
        else:
            self._nodes = tuple(nodes) if nodes is not None else cluster.load_nodes(cluster_file)
        self.mps: mps.Daemon | None = None
        self.mps_unavailable = ""  # why no MPS daemon runs on this GPU host
        self._lock = threading.RLock()
        self.records = records.Records(self.state_dir / "local")
        self.run = (
            rundir.RunDir(Path(run_dir))
            if run_dir is not None
            else rundir.RunDir.for_instance(self.records.instance)
        )
        self._procs: dict[tuple[str, int], subprocess.Popen[bytes]] = {}
        self._on_spawn = on_spawn
        self.records.adopt_interrupted()
        self._on_change = on_change
        self._closed = threading.Event()
        self._watcher = threading.Thread(
            target=self._watch, args=(watch_interval_s,), name="local-watch", daemon=True
        )
        self._watcher.start()

    @property
    def instance(self) -> str:
        """This state directory's id: recorded with every launch (the `Launched` event)."""
        return self.records.instance

    def adopt(self, state: str, instance: str, job_id: str, attempt: int) -> bool:
        """Take over an attempt another replica launched on this host (`elsewhere`)."""
        with self._lock:
            return elsewhere.adopt(self.records, state, instance, job_id, attempt)

    def use_mps(self, daemon: mps.Daemon) -> None:
        """Enforce fractions with `daemon` (before the first cycle): the nodes say `mps`."""
        self.mps = daemon
        self._nodes = tuple(
            dataclasses.replace(n, enforcement=Enforcement.MPS) if n.gpu_count else n
            for n in self._nodes
        )

    def enforcement(self, node: str) -> Enforcement:
        found = next((n for n in self._nodes if n.name == node), None)
        return found.enforcement if found is not None else Enforcement.ADVISORY

    def excluded_nodes(self) -> dict[str, str]:
        """GPUs of this host not offered, with why (the dashboard lists them)."""
        return dict(self._host.excluded) if self._host is not None else {}

    # -- the interface -------------------------------------------------------------

    def capabilities(self) -> base.Capabilities:
        # Its workers are processes of this host under this state directory: another
        # replica can neither see nor stop them (`base.LocalWorkers`).
        return base.Capabilities(
            resizable=self,
            files=self,
            local_workers=self,
            records=self,
            excluded_nodes=self,
            logs=self,
            spec_refusals=self,
        )

    def nodes(self) -> Sequence[Node]:
        return self._nodes

    def spec_refusals(self, spec: JobSpec) -> list[tuple[tuple[str | int, ...], str]]:
        """What of `spec` its processes cannot be given (`volumes.refusals`)."""
        return volumes.refusals(spec, self.allowed_host_paths)

    def launch(self, request: base.LaunchRequest) -> None:
        if refused := self.spec_refusals(request.spec):  # a job stored past the API's check
            loc, why = refused[0]
            raise base.BackendError(f"{'.'.join(map(str, loc))}: {why}")
        key = records.attempt_key(request.job_id, request.attempt)
        with self._lock:
            known = self.records.attempts.get(key)
            if known is not None:
                # Idempotent: launched before. One a crash interrupted is finished, unless
                # it was stopped meanwhile.
                if not known.launched and known.stop_deadline is None and not known.killed:
                    self._start(request, known, resume=True)
                return
            taken = {a.port for a in self.records.attempts.values()}
            rec = self.run.new_attempt(
                request,
                self.state_dir / "jobs" / request.job_id / str(request.attempt),
                self.users.for_queue(request.spec.queue),
                port=processes.free_port(taken),
            )
            # Recorded before the first process starts: a crash from here on leaves a
            # record, so a restarted service adopts or reports the workers, never reruns.
            self.records.attempts[key] = rec
            self.records.save(rec)
            self._start(request, rec, resume=False)

    def _start(
        self, request: base.LaunchRequest, rec: records.AttemptRecord, resume: bool = True
    ) -> None:
        starting.start(
            request,
            rec,
            resume=resume,
            book=self.records,
            run=self.run,
            host=self._host,
            nodes=self._nodes,
            daemon=self.mps,
            procs=self._procs,
            on_spawn=self._on_spawn,
        )

    def grow(self, request: base.LaunchRequest) -> None:
        with self._lock:
            resizing.grow(self.records, request, launch=self.launch, start=self._start)

    def shrink(
        self, job_id: str, attempt: int, workers: Sequence[int], grace_period_s: float
    ) -> None:
        with self._lock:
            if resizing.shrink(self.records, job_id, attempt, workers, grace_period_s):
                # Saved before the SIGTERM: a crash after it must leave the record saying
                # these workers were removed, or a restart reads their exit (143) as a
                # failure and a grow back into their index starts nothing.
                self.records.save()
                self._escalate()
                self.records.save()

    def stop(
        self, job_id: str, grace_period_s: float, *, reason: str = base.StopReason.STOPPED
    ) -> None:
        with self._lock:
            stopping.request(
                self.records.attempts.values(), job_id, grace_period_s, reason, time.time()
            )
            self.records.save()  # before any signal, as in `shrink`
            self._escalate()
            self.records.save()

    def workers(self) -> Sequence[base.WorkerStatus]:
        with self._lock:
            self._reap()
            if self._escalate():
                self.records.save()
            return [
                processes.status(rec, w)
                for rec in self.records.attempts.values()
                for w in rec.workers
                if rec.launched or w.pid is not None or Path(w.exit_file).exists()
            ]

    def close(self) -> None:
        """Stops the watcher; running workers keep running (a restart adopts them). The MPS
        daemon is stopped unless fractional workers still run (a restart adopts it too)."""
        self._closed.set()
        self._watcher.join(timeout=2)
        if self.mps is not None:
            with self._lock:
                sharing = mps.clients(self.records.attempts.values())
            if sharing:
                log.info("MPS daemon left running for %d fractional workers", sharing)
            else:
                self.mps.stop()
        with self._lock:
            self.run.sweep(self.records.attempts.values())

    # -- extras for the loop, the logs route and the tests -----------------------------

    def forget(self, job_id: str) -> None:
        """Drop the records of a finished job whose processes are all gone."""
        with self._lock:
            for key, rec in list(self.records.attempts.items()):
                if rec.job_id == job_id and not any(records.alive(w) for w in rec.workers):
                    del self.records.attempts[key]
                    self.run.remove(job_id, rec.attempt)
            self.records.save()

    def kept_jobs(self) -> set[str]:
        """Ids of the jobs this state directory keeps files (logs, exit files) for."""
        return statedir.kept_jobs(self.state_dir)

    def drop_files(self, job_id: str) -> bool:
        """Remove a deleted job's files and records, unless one of its workers still
        runs (then the next call tries again). True when they are gone."""
        with self._lock:
            mine = [r for r in self.records.attempts.values() if r.job_id == job_id]
            if any(records.alive(w) for r in mine for w in r.workers):
                return False
        self.forget(job_id)
        shutil.rmtree(self.state_dir / "jobs" / job_id, ignore_errors=True)
        self.run.remove(job_id)
        return True

    def log_files(self, job_id: str) -> list[tuple[int, int, Path]]:
        """(attempt, worker, path) of every worker log of a job, oldest attempt first."""
        return statedir.log_files(self.state_dir, job_id)

    def kill_all(self) -> None:
        """SIGKILL every worker this state directory knows of (tests, `serve --clean`);
        their run directories go too (no worker is left to need them)."""
        with self._lock:
            for rec in self.records.attempts.values():
                for w in rec.workers:
                    if records.alive(w) and w.pid is not None:
                        processes.send(w.pid, signal.SIGKILL, group=True)
                self.run.remove(rec.job_id, rec.attempt)
            self._reap()

    # -- internals ---------------------------------------------------------------------

    def _reap(self) -> None:
        for k, proc in list(self._procs.items()):
            if proc.poll() is not None:
                del self._procs[k]

    def _escalate(self) -> bool:
        return stopping.escalate(self.records.attempts.values(), self.records, time.time())

    def _watch(self, interval: float) -> None:
        last: list[tuple[str, int, int, str]] = []
        while not self._closed.wait(interval):
            try:
                now = [(s.job_id, s.attempt, s.worker, s.state.value) for s in self.workers()]
            except Exception:  # a transient /proc or file race; try again next tick
                continue
            if now != last:
                last = now
                if self._on_change is not None:
                    self._on_change()
