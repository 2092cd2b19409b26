"""Issue 35: every local user reads every process's command line (/proc/<pid>/cmdline),
so none that Shoal starts may carry a secret or another team's job: the local backend's
shims carried the state directory and their job's id (`--exit-file`, `--ledger`,
`--key`), and a database URL on a command line carries its password. Only a process's
own user and root read its environment, where these travel instead."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
from support import pg, serve
from support.wait import eventually

from scheduler.backends import base
from scheduler.backends.local import LocalBackend, records
from scheduler.cli import servesetup
from scheduler.cli.serve import serve as serve_command
from scheduler.model import WorkerPlacement
from scheduler.spec import JobSpec

pytestmark = pytest.mark.integration  # starts local worker processes and `shoal serve`

# Job ids as the store makes them (16 hex digits), one per team's queue.
JOBS = {"a1b2c3d4e5f60718": "vision", "0f9e8d7c6b5a4938": "nlp"}
SHIM_VARS = "import os; print(sorted(k for k in os.environ if k.startswith('SHOAL_SHIM')))"
WAIT = f"{SHIM_VARS}\nimport time; time.sleep(300)"


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def descendants(root: int) -> list[int]:
    """`root`'s live descendants (its shims, their workers, the forecast process)."""
    below: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (parent := ppid(int(entry.name))) is not None:
            below.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in below.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    b = LocalBackend(tmp_path / "state")
    yield b
    b.kill_all()
    b.close()


def test_no_shim_or_worker_argument_names_a_job_or_the_state_directory(
    backend: LocalBackend, tmp_path: Path
) -> None:
    for gpu, (job_id, queue) in enumerate(JOBS.items()):
        spec = JobSpec.model_validate(
            {"name": "j", "queue": queue, "image": "x", "command": ["python", "-c", WAIT]}
        )
        placement = (WorkerPlacement(0, "node-a", (gpu,)),)
        backend.launch(base.LaunchRequest(job_id, spec, 1, placement))
    logs = [p for job_id in JOBS for _, _, p in backend.log_files(job_id)]
    eventually(lambda: all(p.read_text() for p in logs), what="both workers to start")
    shims = [w.pid for rec in backend.records.attempts.values() for w in rec.workers]
    assert len(shims) == 2 and None not in shims
    processes = [pid for shim in shims if shim is not None for pid in [shim, *descendants(shim)]]
    assert len(processes) == 4, processes  # each shim and its worker
    secrets = [*JOBS, str(tmp_path), backend.instance]
    for pid in processes:
        line = cmdline(pid)
        assert not [s for s in secrets if s in line], line
    # What the shim is told is not passed on to the worker.
    assert [p.read_text().strip() for p in logs] == ["[]", "[]"]
    # After a crash the backend still knows its shims, by the key in their environment.
    attempts = backend.records.attempts.values()
    expected = {backend.records.shim_key(r.job_id, 1, 0): r.workers[0].pid for r in attempts}
    assert records.find_shims(backend.instance) == expected


def with_password(url: str, password: str) -> str:
    parts = urlsplit(url)
    user, _, host = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{user or 'postgres'}:{password}@{host}"))


@pytest.mark.postgres
def test_a_served_host_shows_no_password_and_no_job_on_any_command_line(tmp_path: Path) -> None:
    """A real `shoal serve` on PostgreSQL (the test server trusts, so any password will
    do), with a team job in each of two queues and the start-time forecast running."""
    password = "s3cret-in-the-url"
    with pg.schema_url("cmdline") as url:
        env = {
            "SHOAL_DATABASE_URL": with_password(url, password),
            "SHOAL_ETA_INTERVAL_SECONDS": "0.2",  # the forecast's process starts soon
        }
        with (
            serve.serving(tmp_path, env=env) as s,
            httpx.Client(
                base_url=s.url + "/api/v1", headers={"Authorization": f"Bearer {s.token}"}
            ) as http,
        ):
            ids = []
            for queue in set(JOBS.values()):
                http.post("/queues", json={"name": queue, "guaranteed": 2}).raise_for_status()
                job = {"name": "j", "queue": queue, "image": "x", "gpu": 1}
                job["command"] = ["python", "-c", WAIT]
                got = http.post("/jobs", json=job)
                assert got.status_code == 201, got.text
                ids.append(got.json()["id"])
            server = _server_pid()

            def all_up() -> list[int]:
                below = descendants(server)
                lines = [cmdline(p) for p in below]
                forecast = any("multiprocessing" in line for line in lines)
                workers = sum("scheduler.backends.local.shim" in line for line in lines)
                return below if forecast and workers == 2 else []

            processes = eventually(all_up, what="both shims and the forecast process")
            for pid in [server, *processes]:
                line = cmdline(pid)
                assert password not in line, line
                assert not [i for i in ids if i in line], line
                assert str(s.state) not in line, line
        log = s.log.read_text()
        assert password not in log, log  # the URL it prints hides the password
        assert "SHOAL_DATABASE_URL instead" not in log  # from the environment: no warning


def _server_pid() -> int:
    """The `shoal serve` this test started (`support.serve.serving`)."""
    for pid in descendants(os.getpid()):
        try:
            if "scheduler.cli.main serve" in cmdline(pid):
                return pid
        except OSError:
            continue
    raise AssertionError("no shoal serve among this test's processes")


class _Stop(Exception):
    pass


def test_a_password_typed_on_the_command_line_is_warned_of_and_never_printed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    typed = "postgresql+psycopg://shoal:s3cret@db.invalid:5432/shoal"
    assert (
        servesetup.without_password(typed) == "postgresql+psycopg://shoal:***@db.invalid:5432/shoal"
    )
    assert servesetup.password_on_command_line(["serve"], typed) is None  # the environment's
    assert (
        servesetup.password_on_command_line(
            ["serve", "--database-url", "sqlite:///x"], "sqlite:///x"
        )
        is None
    )

    def stop_here(*args: object, **kwargs: object) -> None:
        raise _Stop  # the warning comes before anything is opened

    monkeypatch.setattr("scheduler.cli.serve.roles.check", stop_here)
    for argv in (
        ["shoal", "serve", "--database-url", typed],
        ["shoal", "serve", f"--database-url={typed}"],
    ):
        caplog.clear()
        monkeypatch.setattr(sys, "argv", argv)
        with caplog.at_level(logging.WARNING, "shoal.serve"), pytest.raises(_Stop):
            serve_command(host="127.0.0.1", port=0, state_dir=str(tmp_path), database_url=typed,
                          cluster=None, backend_kind="local", policy="fgd", interval_s=1.0,
                          min_runtime_s=0.0)  # fmt: skip
        assert "SHOAL_DATABASE_URL" in caplog.text and "/proc/<pid>/cmdline" in caplog.text
        assert "s3cret" not in caplog.text
