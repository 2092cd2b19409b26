"""Where the local backend's workers would run as the service's own OS user, team tokens
are refused with the reason (admin, metrics and worker tokens still work) unless the
operator accepts it (`--shared-user-ok`); as root with no worker user set, the service
takes its own (`ownuser`), or says why it could not; the state directory is the
service's alone."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.services import Wiring
from api.settings import Settings
from scheduler import workertoken
from scheduler.backends.local import ownuser
from scheduler.backends.local.users import NoOwnUser, RunAs, WorkerUsers, resolve
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
    # Not root and nothing set: root would take a user of its own (was "set workerUser",
    # which alone changes nothing there).
    assert "run it as root" in (WorkerUsers(can_switch=False).shared_reason() or "")
    no_own = WorkerUsers(can_switch=True, no_own=NoOwnUser("why-x", "fix-y"))
    why = no_own.shared_reason() or ""
    assert "It gives them no user of its own: why-x." in why
    assert "must fix-y, or set workerUser" in why and "--shared-user-ok" in why
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


def _never() -> RunAs:
    raise AssertionError("its own worker user is only for root with none set")


def test_as_root_with_no_worker_user_it_takes_its_own(tmp_path: Path) -> None:
    """issue 35: a root server with no workerUser kept its workers as root and refused
    team tokens; now it gives them its own user (`own`), unless one is set or it is not
    root, and where that fails it says why in the refusal."""
    mine = resolve(None, is_root=True, own=lambda: NOBODY)
    assert (mine.default, mine.own, mine.shared_reason()) == (NOBODY, True, None)
    assert mine.for_queue("team-a") == NOBODY
    f = tmp_path / "cluster.yaml"
    f.write_text("nodes: []\nworkerUser: nobody\n")
    chosen = resolve(f, is_root=True, own=_never)
    assert chosen.default == NOBODY and not chosen.own
    assert resolve(None, "nobody", is_root=True, own=_never).default == NOBODY
    not_root = resolve(None, is_root=False, own=_never)
    assert not_root.default is None and "run it as root" in (not_root.shared_reason() or "")
    failed = resolve(None, is_root=True, own=lambda: NoOwnUser("no useradd", "create it"))
    assert failed.default is None and failed.for_queue("team-a") is None
    assert "no user of its own: no useradd." in (team_refusal(failed, shared_user_ok=False) or "")
    # A bad file entry stops the service before any user is made.
    f.write_text("nodes: []\nqueueUsers: {b: no-such-user-x}\n")
    with pytest.raises(ValueError, match="no-such-user-x"):
        resolve(f, is_root=True, own=_never)


def test_without_useradd_it_says_so() -> None:
    got = ownuser.own_worker_user("shoal-no-such-user-x", useradd="/nonexistent/useradd")
    assert isinstance(got, NoOwnUser)
    assert got.why == (
        "it could not create the OS user shoal-no-such-user-x "
        "(/nonexistent/useradd: No such file or directory)"
    )
    assert got.fix == "create it (useradd --system shoal-no-such-user-x)"
    cmd = ownuser.useradd_command("shoal-worker")
    assert cmd[:4] == ["useradd", "--system", "--user-group", "--no-create-home"]
    assert cmd[-1] == "shoal-worker" and "--shell" in cmd


def test_the_directory_that_keeps_a_user_out_is_named(tmp_path: Path) -> None:
    (tmp_path / "open" / "bin").mkdir(parents=True)
    (tmp_path / "shut" / "bin").mkdir(parents=True)
    (tmp_path / "shut").chmod(0o600)  # not even its owner may enter
    me = os.getuid()
    assert ownuser.closed_directory([str(tmp_path / "open/bin/python")], me, set()) is None
    shut = ownuser.closed_directory([str(tmp_path / "shut/bin/python")], me, set())
    assert shut == f"{tmp_path / 'shut'} is 0600: closed to it"
    (tmp_path / "shut").chmod(0o700)


@pytest.mark.skipif(os.geteuid() != 0, reason="trying another user's access needs root")
def test_a_python_closed_to_the_user_is_found_by_trying(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A virtualenv under /root (0700), here one under pytest's 0700 tmp: the worker user
    cannot even start it, and the answer names the directory that keeps it out."""
    closed = tmp_path / "venv" / "bin"
    closed.mkdir(parents=True)
    (closed / "python").symlink_to(os.path.realpath(sys.executable))
    monkeypatch.setattr(sys, "executable", str(closed / "python"))
    why = ownuser.cannot_run_python(NOBODY) or ""
    assert why.startswith(f"nobody cannot run its Python ({closed / 'python'}, that is "), why
    assert "Permission denied" in why and "is 0700: closed to it" in why, why


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
