"""How many of Shoal's modules one job meets, from `POST /api/v1/jobs` to a running worker
on the local backend (issue 38's count): `sys.setprofile` (and `threading.setprofile`)
records every Python function called in this process, and the modules under `api/` and
`scheduler/` that those functions live in are counted. A first job warms everything up
(imports, the app's first request, the backend's first launch); the second is the one
counted, in the steady state. The worker's own process (`scheduler/worker/launcher.py`,
the local shim) is not traced and is named apart.

    .venv/bin/python -m bench.job_modules [--list]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from scheduler.backends.local import LocalBackend
from scheduler.loop.service import Loop, LoopConfig
from scheduler.spec import Phase
from scheduler.spec.queue import QueueSpec
from scheduler.store.queues import create_queue
from scheduler.store.rows import get_job

ROOT = Path(__file__).resolve().parent.parent
TOKENS = "admin-token: {user: root, role: admin}"
JOB = {"name": "", "queue": "q", "image": "x", "gpu": 1,
       "command": ["python", "-c", "import time; time.sleep(30)"]}  # fmt: skip


def _ours(filename: str) -> str | None:
    path = Path(filename)
    for top in ("api", "scheduler"):
        if path.is_relative_to(ROOT / top):
            return str(path.relative_to(ROOT))
    return None


def _one_job(client: TestClient, loop: Loop, name: str) -> str:
    """Submit a job and cycle until it runs; its id."""
    r = client.post("/api/v1/jobs", json={**JOB, "name": name},
                    headers={"Authorization": "Bearer admin-token"})  # fmt: skip
    assert r.status_code == 201, r.text
    job_id = str(r.json()["id"])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        loop.run_once()
        with loop.database.session() as s:  # type: ignore[union-attr]
            if get_job(session=s, job_id=job_id).phase == Phase.RUNNING.value:
                return job_id
        time.sleep(0.1)
    raise SystemExit(f"job {job_id} did not start within 120 s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="print the modules, in order met")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(Settings(database_url=f"sqlite:///{tmp}/s.db", tokens_yaml=TOKENS))
        database = app.state.database
        with database.session() as s:
            create_queue(session=s, spec=QueueSpec(name="q", guaranteed=2))
        backend = LocalBackend(Path(tmp) / "state")
        loop = Loop(database, backend, config=LoopConfig(holder="bench", lease_ttl_s=60))
        met: dict[str, None] = {}

        def seen(frame: FrameType, event: str, arg: Any) -> None:
            if event == "call" and (mod := _ours(frame.f_code.co_filename)) is not None:
                met.setdefault(mod, None)

        # Outside `with`: each request gets a thread of its own, which the profile sees.
        client = TestClient(app)
        try:
            _one_job(client, loop, "warm-up")
            threading.setprofile(seen)
            sys.setprofile(seen)
            try:
                _one_job(client, loop, "counted")
            finally:
                sys.setprofile(None)
                threading.setprofile(None)
        finally:
            backend.kill_all()
            backend.close()
            database.close()
    print(f"{len(met)} modules under api/ and scheduler/ met by one job (REST to Running, "
          "local backend), plus the worker's own process")  # fmt: skip
    rooms: dict[str, int] = {}
    for mod in met:
        room = "/".join(mod.split("/")[:2]) if mod.count("/") > 1 else mod.split("/")[0]
        rooms[room] = rooms.get(room, 0) + 1
    print(", ".join(f"{room} {n}" for room, n in sorted(rooms.items(), key=lambda x: -x[1])))
    if a.list:
        for i, mod in enumerate(met, 1):
            print(f"{i:3} {mod}")


if __name__ == "__main__":
    main()
