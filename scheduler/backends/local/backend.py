"""The `local` backend: simulated nodes from a YAML file, every worker a real process.

Used by `shoal serve` on a laptop. A worker gets exactly the environment its pod would
(`base.worker_env`, all hosts 127.0.0.1 and one free rendezvous port per attempt) plus
the few host variables a process needs to run at all (PATH, HOME, LANG, TMPDIR). There
are no images here: `image` is recorded but ignored, `python`/`python3` as argv[0] mean
the service's own interpreter, and the working directory is the service's.

Each worker runs under `shim` (see there), in its own session, with stdout and stderr
in `<state>/jobs/<job>/<attempt>/worker-<i>.log`. Attempts are recorded in `records`
before anything starts, so `launch` of a known attempt is a no-op even across restarts.
A launch a crash interrupted is resumed, not failed: after a restart the workers it had
not started are not reported (missing, so the loop finishes the launch), and a repeated
`launch` of that attempt starts exactly those (a worker counts as started once the
launch ledger, the process table or its exit file shows it).
`stop` writes its reason (`base.StopReason`: Preempted, Cancelled, MaxRuntimeExceeded...)
to the attempt's `SHOAL_STOP_FILE` and, for a preemption only, `SHOAL_PREEMPTED=1` to its
`SHOAL_PREEMPT_FILE`; sends SIGTERM, and SIGKILLs the process group once the grace period
is over (checked by `workers()` and by the watcher thread, so `stop` itself never
blocks). A repeated stop keeps the first one's reason and deadline, as a pod that is
already terminating keeps its grace period.

On a real GPU host (`host`: the GPUs NVML found, made by `host.local_backend`) a worker
sees only its GPUs: CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES name their UUIDs
(empty for a CPU-only worker, so it sees none). With an MPS daemon (`use_mps`) the
nodes report `enforcement: mps` and each fractional worker gets its MPS limits
(`mps.worker_env`); `close` stops the daemon unless fractional workers still use it.
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
from scheduler.backends.local import cluster, gpus, mps, processes, records
from scheduler.model import Enforcement, Node, WorkerPlacement
from scheduler.spec import Framework

log = logging.getLogger("shoal.local")


class LocalBackend:
    """`base.ClusterBackend` with local processes; thread-safe."""

    # Its workers are processes of this host under this state directory: another replica
    # (another state directory, another host) can neither see nor stop them, so it must
    # never take them for lost and launch them again (`scheduler.loop.lifecycle`).
    replicas_see_workers = False

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
    ) -> None:
        """`on_spawn(job_id, attempt, worker)` is called after each worker is started and
        recorded (the crash-safety tests' crash point in the middle of a gang launch)."""
        self.state_dir = Path(state_dir)
        self._host = host
        if host is not None:
            self._nodes = host.nodes
        else:
            self._nodes = tuple(nodes) if nodes is not None else cluster.load_nodes(cluster_file)
        self.mps: mps.Daemon | None = None
        self.mps_unavailable = ""  # why no MPS daemon runs on this GPU host
        self._lock = threading.RLock()
        self.records = records.Records(self.state_dir / "local")
        self._procs: dict[tuple[str, int], subprocess.Popen[bytes]] = {}
        self._on_spawn = on_spawn
        self._recover()
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

    def nodes(self) -> Sequence[Node]:
        return self._nodes

    def launch(self, request: base.LaunchRequest) -> None:
        key = records.attempt_key(request.job_id, request.attempt)
        with self._lock:
            known = self.records.attempts.get(key)
            if known is not None:
                # Idempotent: launched before. One a crash interrupted is finished, unless
                # it was stopped meanwhile.
                if not known.launched and known.stop_deadline is None and not known.killed:
                    self._start(request, known, resume=True)
                return
            d = self.state_dir / "jobs" / request.job_id / str(request.attempt)
            d.mkdir(parents=True, exist_ok=True)
            taken = {a.port for a in self.records.attempts.values()}
            rec = records.AttemptRecord(
                job_id=request.job_id,
                attempt=request.attempt,
                queue=request.spec.queue,
                port=processes.free_port(taken),
                preempt_file=str(d / "preempted"),
                stop_file=str(d / "stop-reason"),
                workers=[
                    records.WorkerRecord(
                        worker=p.worker,
                        node=p.node,
                        gpus=list(p.gpus),
                        fraction=p.fraction,
                        log=str(d / f"worker-{p.worker}.log"),
                        exit_file=str(d / f"worker-{p.worker}.exit"),
                    )
                    for p in request.placements
                ],
            )
            # Recorded before the first process starts: a crash from here on leaves a
            # record, so a restarted service adopts or reports the workers, never reruns.
            self.records.attempts[key] = rec
            self.records.save(rec)
            self._start(request, rec, resume=False)

    def _start(
        self, request: base.LaunchRequest, rec: records.AttemptRecord, *, resume: bool
    ) -> None:
        """Start every worker of the attempt not started yet, then mark it launched."""
        d = Path(rec.preempt_file).parent
        hosts = ["127.0.0.1"] * len(request.placements)
        hostfile = d / "hostfile"  # MPI: the hostfile the env points at (hostfile only)
        if request.spec.framework is Framework.MPI:
            slots = [base.mpi_slots(p) for p in request.placements]
            hostfile.write_text(base.hostfile_text(hosts, slots))
        started = self.records.launches() if resume else {}  # the ledger: read once, here
        for p, w in zip(request.placements, rec.workers, strict=True):
            shim_key = self.records.shim_key(rec.job_id, rec.attempt, w.worker)
            if w.pid is not None or shim_key in started or Path(w.exit_file).exists():
                continue  # started before the crash (alive, or already ended)
            visible = self._host.visible(p.node, p.gpus) if self._host is not None else None
            env = base.worker_env(
                request.spec,
                p,
                hosts,
                job_id=request.job_id,
                attempt=request.attempt,
                gpu_ids=visible
                if visible is not None
                else [f"local-{p.node}-gpu{g}" for g in p.gpus],
                enforcement=self.enforcement(p.node),
                port=rec.port,
            )
            env.update(request.extra_env)
            if visible is not None:
                env.update(self._device_env(p, visible))
            env["SHOAL_PREEMPT_FILE"] = rec.preempt_file
            env["SHOAL_STOP_FILE"] = rec.stop_file
            if request.spec.framework is Framework.MPI:
                env["OMPI_MCA_orte_default_hostfile"] = str(hostfile)
            argv = [*request.spec.command, *request.spec.args]
            proc = processes.spawn(argv, w, env, ledger=self.records.ledger, shim_key=shim_key)
            if proc is not None:
                self._procs[(rec.key, w.worker)] = proc
            self.records.save(rec)
            if self._on_spawn is not None:
                self._on_spawn(rec.job_id, rec.attempt, w.worker)
        rec.launched = True
        self.records.save(rec)

    def stop(
        self, job_id: str, grace_period_s: float, *, reason: str = base.StopReason.STOPPED
    ) -> None:
        with self._lock:
            now = time.time()
            for rec in self.records.attempts.values():
                if rec.job_id != job_id or rec.killed:
                    continue
                if not any(records.alive(w) for w in rec.workers):
                    rec.killed = True
                    continue
                if rec.stop_deadline is None:
                    # The reason first, so a worker woken by SIGTERM finds it.
                    rec.stop_reason = str(reason)
                    if rec.stop_file:
                        processes.write_atomic(rec.stop_file, f"{reason}\n")
                    if reason == base.StopReason.PREEMPTED:
                        processes.write_atomic(rec.preempt_file, "SHOAL_PREEMPTED=1\n")
                    rec.stop_deadline = now + max(0.0, grace_period_s)
                # A repeat (the orphan sweep of a job that already ended) keeps the first
                # stop's deadline: the grace period is the worker's to use.
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
                sharing = [
                    f"{r.job_id}/{w.worker}"
                    for r in self.records.attempts.values()
                    for w in r.workers
                    if w.gpus and w.fraction < 1 and records.alive(w)
                ]
            if sharing:
                log.info("MPS daemon left running for %d fractional workers", len(sharing))
            else:
                self.mps.stop()

    # -- extras for the loop, the logs route and the tests -----------------------------

    def forget(self, job_id: str) -> None:
        """Drop the records of a finished job whose processes are all gone."""
        with self._lock:
            for key, rec in list(self.records.attempts.items()):
                if rec.job_id == job_id and not any(records.alive(w) for w in rec.workers):
                    del self.records.attempts[key]
            self.records.save()

    def kept_jobs(self) -> set[str]:
        """Ids of the jobs this state directory keeps files (logs, exit files) for."""
        root = self.state_dir / "jobs"
        return {d.name for d in root.iterdir() if d.is_dir()} if root.is_dir() else set()

    def drop_files(self, job_id: str) -> bool:
        """Remove a deleted job's files and records, unless one of its workers still
        runs (then the next call tries again). True when they are gone."""
        with self._lock:
            mine = [r for r in self.records.attempts.values() if r.job_id == job_id]
            if any(records.alive(w) for r in mine for w in r.workers):
                return False
        self.forget(job_id)
        shutil.rmtree(self.state_dir / "jobs" / job_id, ignore_errors=True)
        return True

    def log_files(self, job_id: str) -> list[tuple[int, int, Path]]:
        """(attempt, worker, path) of every worker log of a job, oldest attempt first."""
        root = self.state_dir / "jobs" / job_id
        out = []
        if root.is_dir():
            for d in root.iterdir():
                if d.name.isdigit():
                    for f in d.glob("worker-*.log"):
                        out.append((int(d.name), int(f.stem.split("-")[1]), f))
        return sorted(out)

    def kill_all(self) -> None:
        """SIGKILL every worker this state directory knows of (tests, `serve --clean`)."""
        with self._lock:
            for rec in self.records.attempts.values():
                for w in rec.workers:
                    if records.alive(w) and w.pid is not None:
                        processes.send(w.pid, signal.SIGKILL, group=True)
            self._reap()

    # -- internals ---------------------------------------------------------------------

    def _device_env(self, p: WorkerPlacement, visible: list[str]) -> dict[str, str]:
        """A real host's device variables: only its GPUs (none for a CPU-only worker),
        and, for a fraction on an MPS node, the limits MPS holds it to. Set after the
        user's `env`, so a job cannot widen them."""
        env = {"CUDA_VISIBLE_DEVICES": ",".join(visible)}
        if not visible:
            env["NVIDIA_VISIBLE_DEVICES"] = "void"
        if self.mps is not None and visible and p.fraction < 1:
            node = next(n for n in self._nodes if n.name == p.node)
            env.update(mps.worker_env(self.mps, p.fraction, node.gpu_memory_mib))
        return env

    def _recover(self) -> None:
        """After a restart: adopt shims started by an interrupted launch. The attempt stays
        unlaunched: its workers never started are not reported, and a repeated `launch`
        starts them (see the module doc)."""
        pending = [r for r in self.records.attempts.values() if not r.launched]
        if not pending:
            return
        found = records.find_shims(self.records.instance)
        for rec in pending:
            for w in rec.workers:
                pid = found.get(self.records.shim_key(rec.job_id, rec.attempt, w.worker))
                if w.pid is None and pid is not None:
                    w.pid, w.start_ticks = pid, records.start_ticks(pid)
        self.records.save()

    def _reap(self) -> None:
        for k, proc in list(self._procs.items()):
            if proc.poll() is not None:
                del self._procs[k]

    def _escalate(self) -> bool:
        """Tell stopping workers (SIGTERM), then SIGKILL them once the grace period ends.
        A shim not yet in the ledger has no handler yet; it is told on a later call."""
        now, changed = time.time(), False
        ledger: dict[str, int] | None = None
        for rec in self.records.attempts.values():
            if rec.stop_deadline is None or rec.killed:
                continue
            for w in rec.workers:
                if w.told or w.pid is None or not records.alive(w):
                    continue
                if ledger is None:
                    ledger = self.records.launches()
                if self.records.shim_key(rec.job_id, rec.attempt, w.worker) in ledger:
                    processes.send(w.pid, signal.SIGTERM, group=False)
                    w.told = changed = True
        for rec in self.records.attempts.values():
            if rec.stop_deadline is not None and not rec.killed and now >= rec.stop_deadline:
                for w in rec.workers:
                    if records.alive(w) and w.pid is not None:
                        processes.send(w.pid, signal.SIGKILL, group=True)
                rec.killed = changed = True
        return changed

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
