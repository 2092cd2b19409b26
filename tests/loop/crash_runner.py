"""A headless scheduler process for the crash-safety tests: runs the loop with the local
backend on a SQLite file until no job is live (or it is killed by SHOAL_FAULT_AT).

After every cycle it checks what must always hold and appends any breach to
`<state>/breaches.txt`: no GPU holds more than 1.0 of live workers; every job that holds
a placement has its attempt recorded by the backend (launched).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

from scheduler import model
from scheduler.backends.base import WorkerState
from scheduler.backends.local import LocalBackend
from scheduler.loop import faults
from scheduler.loop.service import Loop, LoopConfig
from scheduler.spec import JobSpec
from scheduler.store.db import open_database
from scheduler.store.live import live_jobs
from scheduler.store.submission import submit_job


def main() -> int:
    db_url, state = sys.argv[1], Path(sys.argv[2])
    db = open_database(db_url)
    backend = LocalBackend(
        state,
        watch_interval_s=0.05,
        # A crash point between the workers of a gang launch (after each one started).
        on_spawn=lambda job, attempt, worker: faults.point("launch:worker-started"),
    )
    loop = Loop(
        db,
        backend,
        config=LoopConfig(
            holder="crash-runner", lease_ttl_s=10.0, core=model.Config(min_runtime_s=0.0)
        ),
    )
    breaches = state / "breaches.txt"
    late = os.environ.get("SHOAL_TEST_LATE")
    deadline = time.time() + 90
    while time.time() < deadline:
        loop.run_once()
        if late and loop.cycles == 3:
            # Arrives while the first jobs run; the key makes a restart's resubmit a replay.
            with db.session() as s:
                for raw in json.loads(Path(late).read_text()):
                    spec = JobSpec.model_validate(raw)
                    submit_job(
                        session=s, spec=spec, submitter="test", idempotency_key=f"late-{spec.name}"
                    )
        held: dict[tuple[str, int], float] = defaultdict(float)
        for w in backend.workers():
            if w.state is WorkerState.RUNNING:
                for g in w.gpus:
                    held[(w.node, g)] += w.fraction
        for gpu, share in held.items():
            if share > 1 + 1e-6:
                with breaches.open("a") as f:
                    f.write(f"over-allocated {gpu}: {share}\n")
        with db.session() as s:
            live = live_jobs(session=s)
        for lj in live:
            if lj.running() is not None and (lj.id, lj.attempt) not in {
                (r.job_id, r.attempt) for r in backend.records.attempts.values()
            }:
                with breaches.open("a") as f:
                    f.write(f"{lj.id} holds attempt {lj.attempt} that was never launched\n")
        alive = any(w.state is WorkerState.RUNNING for w in backend.workers())
        if not live and not alive and (not late or loop.cycles > 3):
            return 0
        time.sleep(0.05)
    return 3


if __name__ == "__main__":
    sys.exit(main())
