"""MPI is "hostfile only" on every backend: the local backend writes the hostfile its
workers' OMPI_MCA_orte_default_hostfile points at (one line, 127.0.0.1, a slot per GPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.wait import eventually

from scheduler.backends import base, workerenv
from scheduler.backends.local import LocalBackend
from scheduler.model import WorkerPlacement
from scheduler.spec import JobSpec

pytestmark = pytest.mark.integration  # starts local worker processes


def test_the_local_backend_writes_the_mpi_hostfile(tmp_path: Path) -> None:
    b = LocalBackend(tmp_path)
    try:
        code = (
            "import os, json; p = os.environ['OMPI_MCA_orte_default_hostfile']; "
            "print(json.dumps([p, open(p).read()]))"
        )
        spec = JobSpec.model_validate(
            {
                "name": "mpi",
                "queue": "q",
                "framework": "mpi",
                "image": "x",
                "command": ["python", "-c", code],
                "workers": 2,
                "gpu": 2,
            }
        )
        pl = (WorkerPlacement(0, "node-a", (0, 1)), WorkerPlacement(1, "node-a", (2, 3)))
        b.launch(base.LaunchRequest("mpi1", spec, 1, pl))
        eventually(
            lambda: b.workers() and all(w.state is base.WorkerState.SUCCEEDED for w in b.workers()),
            what="both workers exited 0",
        )
        for _, _, log in b.log_files("mpi1"):
            path, text = json.loads(log.read_text().strip().splitlines()[-1])
            assert Path(path).is_file() and text == "127.0.0.1 slots=4\n"
    finally:
        b.kill_all()
        b.close()


def test_hostfile_lines_sum_slots_per_host() -> None:
    hosts = ["a.svc", "b.svc", "a.svc"]
    assert workerenv.hostfile_text(hosts, [2, 1, 2]) == "a.svc slots=4\nb.svc slots=1\n"
