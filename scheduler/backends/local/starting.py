"""Starting an attempt's workers: each one not started yet gets its environment
(`environment`) and its shim (`processes.spawn`), and its record is saved once it runs.

`backend.LocalBackend` calls `start` under its lock, for a new attempt (`launch`), for one
a crash interrupted (a repeated `launch`), and for the workers an elastic job's grow
added (`grow`). A worker counts as started once its pid, the launch ledger or its exit
file says so, so a resumed start never runs a worker twice: after a restart the workers
a crash left unstarted are not reported (missing, so the loop repeats the call), and the
repeat starts exactly those.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from scheduler.backends import base, workerenv
from scheduler.backends.local import environment, gpus, mps, processes, records, rundir
from scheduler.backends.local.users import RunAs
from scheduler.model import Node
from scheduler.spec import Framework


def start(
    request: base.LaunchRequest,
    rec: records.AttemptRecord,
    *,
    resume: bool,
    book: records.Records,
    run: rundir.RunDir,
    host: gpus.Host | None,
    nodes: Sequence[Node],
    daemon: mps.Daemon | None,
    procs: dict[tuple[str, int], subprocess.Popen[bytes]],
    on_spawn: Callable[[str, int, int], None] | None,
) -> None:
    """Start every worker of `request.placements` the attempt has a record of and has not
    started (nor removed by a shrink), then mark the attempt launched. Each process is
    kept in `procs` (to be reaped), then `on_spawn(job_id, attempt, worker)` is called."""
    try:
        user = RunAs.lookup(rec.user, where=f"attempt {rec.key}") if rec.user else None
    except ValueError as e:  # the user was removed between a crash and this resume
        for w in rec.workers:  # never as the service's user instead: each one fails
            if w.pid is None and not Path(w.exit_file).exists():
                processes.unstartable(w, str(e))
        rec.launched = True
        book.save(rec)
        return
    # Old records (before the run directory) kept these files in the state directory.
    work = Path(rec.preempt_file).parent
    if resume and rundir.is_inside(work, run.root):
        run.attempt_dir(rec.job_id, rec.attempt, user)  # /tmp may have been cleaned
    hostfile = work / "hostfile"  # MPI: the hostfile the env points at (hostfile only)
    if request.spec.framework is Framework.MPI:
        hosts = ["127.0.0.1"] * len(request.placements)
        slots = [workerenv.mpi_slots(p) for p in request.placements]
        rundir.write_for_worker(hostfile, workerenv.hostfile_text(hosts, slots))
    ledger = book.launches() if resume else {}  # read once, here
    by_index = {w.worker: w for w in rec.workers}
    for p in request.placements:
        found = by_index.get(p.worker)
        if found is None or found.stop_deadline is not None:
            continue  # not this attempt's (yet), or a shrink removed it
        w = found
        shim_key = book.shim_key(rec.job_id, rec.attempt, w.worker, w.generation)
        if w.pid is not None or shim_key in ledger or Path(w.exit_file).exists():
            continue  # started before the crash (alive, or already ended)
        env = environment.worker_environment(
            request,
            p,
            rec,
            host=host,
            node=next((n for n in nodes if n.name == p.node), None),
            daemon=daemon,
            hostfile=hostfile,
            stop_file=w.stop_file,
        )
        argv = [*request.spec.command, *request.spec.args]
        proc = processes.spawn(
            argv, w, env, ledger=book.ledger, shim_key=shim_key, user=user, home=work
        )
        if proc is not None:
            procs[(rec.key, w.worker)] = proc
        book.save(rec)
        if on_spawn is not None:
            on_spawn(rec.job_id, rec.attempt, w.worker)
    rec.launched = True
    book.save(rec)
