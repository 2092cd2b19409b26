"""Where the local backend's workers would run as the service's own OS user, team tokens
are refused with the reason (admin, metrics and worker tokens still work) unless the
operator accepts it (`--shared-user-ok`); the state directory is the service's alone."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.services import Wiring
from api.settings import Settings
from scheduler import workertoken
from scheduler.backends.local.users import RunAs, WorkerUsers, resolve
from scheduler.cli.statedir import prepare_state, secure
from scheduler.cli.wiring import team_refusal

TOKENS = """
admin-t: {user: root, role: admin}
member-t: {user: alice, role: member, queues: [team-a]}
viewer-t: {user: vera, role: viewer, queues: [team-a]}
metrics-t: {user: prom, role: metrics}
"""
NOBODY = RunAs("nobody", 65534, 65534, "/nonexistent")


def test_the_reason_says_what_the_admin_must_do() -> None:
    plain = WorkerUsers(can_switch=True)
    assert "set workerUser" in (plain.shared_reason() or "")
    not_root = WorkerUsers(default=NOBODY, can_switch=False)
    assert "run it as root" in (not_root.shared_reason() or "")
    assert not_root.for_queue("team-a") is None  # it cannot switch: its own user
    isolated = WorkerUsers(default=NOBODY, queues={"b": NOBODY}, can_switch=True)
    assert isolated.shared_reason() is None and isolated.for_queue("a") == NOBODY
    assert team_refusal(plain, shared_user_ok=False) == plain.shared_reason()
    assert team_refusal(plain, shared_user_ok=True) is None
    assert team_refusal(None, shared_user_ok=False) is None  # not the local backend


def test_cluster_file_users_and_the_flag_over_them(tmp_path: Path) -> None:
    f = tmp_path / "cluster.yaml"
    f.write_text("nodes: [{name: a, gpus: 1}]\nworkerUser: root\nqueueUsers: {b: nobody}\n")
    with pytest.raises(ValueError, match="is root"):
        resolve(f, is_root=True)
    users = resolve(f, "nobody", is_root=True)
    assert users.default is not None and users.default.name == "nobody"
    assert users.queues["b"].uid == NOBODY.uid
    f.write_text("nodes: []\nqueueUsers: [nobody]\n")
    with pytest.raises(ValueError, match="queueUsers must map"):
        resolve(f, is_root=True)


def _client(tmp_path: Path, refused: str | None) -> TestClient:
    app = create_app(
        Settings(
            database_url=f"sqlite:///{tmp_path / 'api.db'}", tokens_yaml=TOKENS, worker_key="k"
        ),
        Wiring(team_tokens_refused=refused),
    )
    return TestClient(app)


def _get(c: TestClient, token: str, path: str = "/api/v1/jobs") -> tuple[int, str]:
    r = c.get(path, headers={"Authorization": f"Bearer {token}"})
    return r.status_code, r.text


def test_team_tokens_get_a_403_with_the_reason(tmp_path: Path) -> None:
    why = WorkerUsers(can_switch=True).shared_reason()
    with _client(tmp_path, why) as c:
        for token in ("member-t", "viewer-t"):
            code, text = _get(c, token)
            assert code == 403 and "workers run as its own OS user" in text, text
        assert _get(c, "admin-t")[0] == 200
        assert _get(c, "metrics-t", "/metrics")[0] == 200
        # A worker token is not turned away as a team token: only for reading (its role).
        code, text = _get(c, workertoken.mint("k", "some-job"))
        assert code == 403 and "own OS user" not in text and "progress" in text, text


def test_the_dashboard_sign_in_says_why_a_team_token_is_refused(tmp_path: Path) -> None:
    with _client(tmp_path, "workers here run as this server's own OS user") as c:
        c.get("/ui/login")  # its CSRF cookie (api/dashboard/csrf.py)
        csrf = c.cookies.get("shoal_csrf")
        form = {"token": "member-t", "csrf": csrf}
        r = c.post("/ui/login", data=form, follow_redirects=False)
        assert r.status_code == 401 and "own OS user" in r.text, r.text
        form = {"token": "no-such-token", "csrf": csrf}
        r = c.post("/ui/login", data=form, follow_redirects=False)
        assert r.status_code == 401 and "unknown or revoked" in r.text


def test_create_app_alone_refuses_no_team_token(tmp_path: Path) -> None:
    with _client(tmp_path, None) as c:
        assert _get(c, "member-t")[0] == 200


def test_an_old_state_directory_is_made_private(tmp_path: Path) -> None:
    state = tmp_path / "state"
    logs = state / "jobs" / "j" / "1"
    logs.mkdir(parents=True)
    for f in (state / "shoal.db", logs / "worker-0.log"):
        f.write_text("x")
        f.chmod(0o644)
    (state / "run.sh").write_text("")
    (state / "run.sh").chmod(0o755)
    state.chmod(0o755)
    secure(state)
    prepare_state(state, "http://127.0.0.1:1")
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert stat.S_IMODE(logs.stat().st_mode) == 0o700
    for name in ("shoal.db", "admin-token", "worker-key", "tokens.yaml"):
        assert stat.S_IMODE((state / name).stat().st_mode) == 0o600, name
    assert stat.S_IMODE((logs / "worker-0.log").stat().st_mode) == 0o600
    assert stat.S_IMODE((state / "run.sh").stat().st_mode) == 0o700  # owner bits kept
    assert os.access(state / "admin-token", os.R_OK)
