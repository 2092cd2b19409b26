"""A real `shoal serve` on a box shared by teams (issue 23): the state directory and what
is in it are the service's alone, an older one included; where workers would run as the
service's own user team tokens are refused with the reason; with a worker user they are
accepted and a team's job runs as that user."""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import serve
from support.wait import eventually

pytestmark = pytest.mark.integration  # starts `shoal serve` as a process

TOKENS = "alice-t: {user: alice, role: member, queues: [team-a]}\n"
ID = ["sh", "-c", "echo uid=$(id -u)"]


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


def test_a_shared_user_server_is_private_and_refuses_team_tokens(tmp_path: Path) -> None:
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
    with serve.serving(tmp_path, env) as s, _client(s, s.token) as admin:
        assert admin.post("/queues", json={"name": "team-a", "guaranteed": 1}).status_code == 201
        job = admin.post(
            "/jobs", json={"name": "j", "queue": "team-a", "image": "x", "command": ID}
        ).json()
        assert "uid=" in _job_log(admin, job["id"])
        with _client(s, "alice-t") as alice:
            r = alice.get("/jobs")
        assert r.status_code == 403
        assert "its workers run as its own OS user" in r.text and "workerUser" in r.text
        private = [state, *state.rglob("*")]
        assert any(p.name == "shoal.db" for p in private)
        assert any(p.name == "worker-0.log" and p.parent.parent.name == job["id"] for p in private)
        loose = {str(p): oct(p.stat().st_mode) for p in private if p.stat().st_mode & 0o077}
        assert not loose
    assert "team tokens are refused" in s.log.read_text()


@pytest.mark.skipif(os.geteuid() != 0, reason="switching a worker's user needs root")
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
