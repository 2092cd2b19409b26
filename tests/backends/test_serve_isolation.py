"""A real `shoal serve` on a box shared by teams (issue 23): the state directory and what
is in it are the service's alone, an older one included; where workers would run as the
service's own user team tokens are refused with the reason; with a worker user they are
accepted and a team's job runs as that user; run as root with none set, workers run as
its own `shoal-worker` (issue 35), made where absent, and team tokens work."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import pythons, serve
from support.wait import eventually

from scheduler.backends.local import ownuser

pytestmark = pytest.mark.integration  # starts `shoal serve` as a process

TOKENS = "alice-t: {user: alice, role: member, queues: [team-a]}\n"
ID = ["sh", "-c", "echo uid=$(id -u)"]
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="switching a worker's user needs root")


@pytest.fixture
def box() -> Iterator[Path]:
    """A directory others may pass through, as a state directory's parent is on a real box
    (pytest's tmp is 0700 root: there a worker could read nothing, whatever Shoal did)."""
    d = Path(tempfile.mkdtemp(prefix="shoal-box-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def own_user_cleanup() -> Iterator[None]:
    """The service creates `shoal-worker` where absent; one this test made goes after it."""
    try:
        pwd.getpwnam(ownuser.NAME)
        existed = True
    except KeyError:
        existed = False
    yield
    if not existed:
        subprocess.run(["userdel", ownuser.NAME], capture_output=True, check=False)


def _client(s: serve.Serve, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=s.url + "/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60
    )


def _job_log(http: httpx.Client, job_id: str) -> str:
    def done() -> str | None:
        job: dict[str, Any] = http.get(f"/jobs/{job_id}").json()
        if job["phase"] not in ("Succeeded", "Failed"):
            return None
        chunks = http.get(f"/jobs/{job_id}/logs").json()["chunks"]
        return "".join(c["text"] for c in chunks)

    text: str = eventually(done, 90, what=f"{job_id} to end")
    return text


@pytest.mark.usefixtures("own_user_cleanup")
def test_a_shared_user_server_is_private_and_refuses_team_tokens(tmp_path: Path) -> None:
    """Not root, workers run as the service's user. As root they would run as its own
    `shoal-worker` (issue 35), so the service here runs a Python closed to that user, as a
    virtualenv under /root is: it keeps its workers as root and says why."""
    # An older version's state directory: world-readable secrets and logs.
    state = tmp_path / "state"
    old_log = state / "jobs" / "old" / "1" / "worker-0.log"
    old_log.parent.mkdir(parents=True)
    old_log.write_text("old\n")
    (state / "admin-token").write_text("old-admin-token\n")
    for p in (state / "admin-token", old_log):
        p.chmod(0o644)
    state.chmod(0o755)
    env = {"SHOAL_API_TOKENS": TOKENS, "SHOAL_WORKER_USER": ""}
    root = os.geteuid() == 0
    # tmp_path is 0700: a user of its own cannot run an interpreter in there.
    closed = pythons.checkout_python(tmp_path / "py", sys.executable) if root else None
    with serve.serving(tmp_path, env, python=closed) as s, _client(s, s.token) as admin:
        assert admin.post("/queues", json={"name": "team-a", "guaranteed": 1}).status_code == 201
        job = admin.post(
            "/jobs", json={"name": "j", "queue": "team-a", "image": "x", "command": ID}
        ).json()
        assert "uid=" in _job_log(admin, job["id"])
        with _client(s, "alice-t") as alice:
            r = alice.get("/jobs")
        assert r.status_code == 403
        assert "its workers run as its own OS user" in r.text and "workerUser" in r.text
        if root:
            assert f"{ownuser.NAME} cannot run its Python ({closed}" in r.text, r.text
            assert "is 0700: closed to it" in r.text, r.text
        private = [state, *state.rglob("*")]
        assert any(p.name == "shoal.db" for p in private)
        assert any(p.name == "worker-0.log" and p.parent.parent.name == job["id"] for p in private)
        loose = {str(p): oct(p.stat().st_mode) for p in private if p.stat().st_mode & 0o077}
        assert not loose
    assert "team tokens are refused" in s.log.read_text()


@ROOT_ONLY
def test_with_a_worker_user_team_tokens_work_and_jobs_run_as_it(tmp_path: Path) -> None:
    env = {"SHOAL_API_TOKENS": TOKENS, "SHOAL_WORKER_USER": "nobody"}
    with serve.serving(tmp_path, env) as s, _client(s, s.token) as admin:
        assert admin.post("/queues", json={"name": "team-a", "guaranteed": 1}).status_code == 201
        with _client(s, "alice-t") as alice:
            r = alice.post(
                "/jobs", json={"name": "mine", "queue": "team-a", "image": "x", "command": ID}
            )
            assert r.status_code == 201, r.text
            uid = pwd.getpwnam("nobody").pw_uid
            assert f"uid={uid}" in _job_log(alice, r.json()["id"])
    assert stat.S_IMODE(s.state.stat().st_mode) == 0o700
    assert "workers run as nobody" in s.log.read_text()


def test_shared_user_ok_accepts_team_tokens_with_a_warning(tmp_path: Path) -> None:
    env = {"SHOAL_API_TOKENS": TOKENS, "SHOAL_WORKER_USER": "", "SHOAL_SHARED_USER_OK": "1"}
    with serve.serving(tmp_path, env) as s, _client(s, "alice-t") as alice:
        assert alice.get("/jobs").status_code == 200
    assert "WARNING shoal.serve: --shared-user-ok: team tokens accepted" in s.log.read_text()


# The job proves what it may not read: it fails if it can read any of them.
READS = """
import os, sys
print("uid", os.getuid())
for path in sys.argv[1:]:
    try:
        os.listdir(path) if os.path.isdir(path) else open(path).close()
    except PermissionError:
        print("denied", os.path.basename(path))
    else:
        sys.exit(f"read {path}")
"""


@ROOT_ONLY
@pytest.mark.usefixtures("own_user_cleanup")
def test_as_root_by_default_team_jobs_run_as_its_own_user_apart_from_the_state(
    box: Path,
) -> None:
    """issue 35: a default `shoal serve` as root answered team tokens 403 ("its workers
    run as its own OS user (root)"). Now a member's job runs, as `shoal-worker`, with a
    Python that user can run, and cannot read the state directory, its database or the
    admin token."""
    python, why = pythons.open_python(box / "py")
    if python is None:
        pytest.skip(why)
    env = {"SHOAL_API_TOKENS": TOKENS, "SHOAL_WORKER_USER": ""}  # none: its own
    with serve.serving(box, env, python=python) as s, _client(s, s.token) as admin:
        assert admin.post("/queues", json={"name": "team-a", "guaranteed": 1}).status_code == 201
        secrets = [str(s.state / n) for n in ("admin-token", "shoal.db", "worker-key")]
        command = ["python", "-c", READS, *secrets, str(s.state)]
        with _client(s, "alice-t") as alice:
            r = alice.post(
                "/jobs", json={"name": "mine", "queue": "team-a", "image": "x", "command": command}
            )
            assert r.status_code == 201, r.text
            job_id = r.json()["id"]
            log = _job_log(alice, job_id)
            assert alice.get(f"/jobs/{job_id}").json()["phase"] == "Succeeded", log
    worker = pwd.getpwnam(ownuser.NAME)
    assert f"uid {worker.pw_uid}" in log
    for name in ("admin-token", "shoal.db", "worker-key", "state"):
        assert f"denied {name}" in log, log
    assert stat.S_IMODE(s.state.stat().st_mode) == 0o700
    text = s.log.read_text()
    assert "workers run as shoal-worker" in text and "team tokens are refused" not in text
