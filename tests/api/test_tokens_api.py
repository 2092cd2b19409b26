"""Tokens made at run time: shown once, kept as digests, usable at once with their role
and queues, revoked at once; admin only. A stale token gets a 401 with a hint, and the
CLI says where its stale token came from."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import ADMIN, VISION, Shoal, build_app, cli_on, job_body
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import text
from typer.testing import CliRunner

from api.services import Wiring
from scheduler.cli import client as cli_client
from scheduler.cli.main import app as cli

T = "/api/v1/tokens"


def test_create_use_list_revoke(app: FastAPI, client: TestClient) -> None:
    made = client.post(
        T, json={"user": "carol", "role": "member", "queues": ["nlp"]}, headers=ADMIN
    )
    assert made.status_code == 201, made.text
    body = made.json()
    secret, tid = body["token"], body["id"]
    carol = {"Authorization": f"Bearer {secret}"}
    # Its role and queues hold: nlp yes, vision no.
    assert client.post("/api/v1/jobs", json=job_body(queue="nlp"), headers=carol).status_code == 201
    assert client.post("/api/v1/jobs", json=job_body(), headers=carol).status_code == 422
    assert client.post(T, json={"user": "x", "queues": ["*"]}, headers=carol).status_code == 403
    listed = client.get(T, headers=ADMIN).json()["data"]
    assert [t["id"] for t in listed] == [tid] and "token" not in listed[0]
    with app.state.database.engine.connect() as conn:  # hashed at rest
        stored = [r[0] for r in conn.execute(text("SELECT digest FROM api_tokens"))]
        dump = "\n".join(str(r) for r in conn.execute(text("SELECT * FROM api_tokens")))
    assert len(stored[0]) == 64 and secret not in dump
    assert client.delete(f"{T}/{tid}", headers=ADMIN).json()["revokedAt"]
    gone = client.get("/api/v1/jobs", headers=carol)
    assert gone.status_code == 401


@pytest.mark.parametrize(
    "body",
    [
        {"user": "w", "role": "worker", "queues": ["*"]},
        {"user": "m", "role": "member"},
        {"user": "", "role": "admin"},
        {"user": "r", "role": "root"},
    ],
)
def test_bad_token_requests_are_422(client: TestClient, body: dict[str, object]) -> None:
    assert client.post(T, json=body, headers=ADMIN).status_code == 422
    assert client.get(T, headers=ADMIN).json()["data"] == []


def test_a_token_for_a_queue_that_does_not_exist_is_422(client: TestClient) -> None:
    """issue 35: `tokens create alice -q visoin` answered 201, a token that opens nothing."""
    r = client.post(T, json={"user": "a", "queues": ["vision", "visoin"]}, headers=ADMIN)
    assert r.status_code == 422, r.text
    assert r.json()["detail"] == [
        {"loc": ["body", "queues", 1], "msg": "queue 'visoin' does not exist", "type": "error"}
    ]
    assert client.get(T, headers=ADMIN).json()["data"] == []
    assert client.post(T, json={"user": "a", "queues": ["*"]}, headers=ADMIN).status_code == 201


def test_only_admins_manage_tokens(client: TestClient) -> None:
    assert client.get(T, headers=VISION).status_code == 403
    assert client.post(T, json={"user": "x", "queues": ["*"]}, headers=VISION).status_code == 403


def test_a_stale_token_gets_a_hint(client: TestClient) -> None:
    r = client.get("/api/v1/jobs", headers={"Authorization": "Bearer stale"})
    assert r.status_code == 401 and "state directory" in r.json()["detail"][0]["msg"]


def test_the_cli_names_the_stale_admin_token_file(
    app: FastAPI, tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pathlib import Path

    state = Path(str(tmp_path))
    (state / "admin-token").write_text("from-an-old-state-dir\n")
    monkeypatch.setenv("SHOAL_STATE_DIR", str(state))
    monkeypatch.delenv("SHOAL_TOKEN", raising=False)
    real = cli_client.Api.__init__

    def via_testclient(
        self: cli_client.Api, url: str | None = None, token: str | None = None
    ) -> None:
        real(self, "http://testserver", token)
        self.http = TestClient(app, base_url="http://testserver", headers=dict(self.http.headers))

    monkeypatch.setattr(cli_client.Api, "__init__", via_testclient)
    result = CliRunner().invoke(cli, ["jobs"])
    assert result.exit_code == 1
    assert "admin-token" in result.output and "stale" in result.output


def test_the_cli_creates_lists_and_revokes(shoal: Shoal) -> None:
    made = shoal("tokens", "create", "--user", "dan", "-q", "vision")
    assert made.exit_code == 0, made.output
    assert "shoal_" in made.output and "not shown again" in made.output
    listed = shoal("tokens", "list")
    assert "dan" in listed.output and "shoal_" not in listed.output
    tid = listed.output.split("\n")[1].split()[0]
    revoked = shoal("tokens", "revoke", tid)
    assert revoked.exit_code == 0 and "revoked" in revoked.output


def test_tokens_create_warns_when_the_server_refuses_the_token(
    tmp_path: Path, migrated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """issue 35: on a server that refuses team tokens (its workers run as its own OS
    user), `shoal tokens create alice -q vision` succeeded in silence, and alice's first
    call was a 403. The API says so in `refused`; the CLI warns on stderr, exit code 0."""
    why = "team tokens are refused on this server: its workers run as its own OS user"
    shutil.copyfile(migrated, tmp_path / "api.db")
    app = build_app(f"sqlite:///{tmp_path / 'api.db'}", Wiring(team_tokens_refused=why))
    with TestClient(app) as c:
        member = c.post(T, json={"user": "a", "queues": ["vision"]}, headers=ADMIN).json()
        assert member["refused"] == why
        admin = c.post(T, json={"user": "b", "role": "admin"}, headers=ADMIN).json()
        assert admin["refused"] is None  # only team tokens are refused
    shoal = cli_on(app, monkeypatch)
    made = shoal("tokens", "create", "alice", "-q", "vision")
    assert made.exit_code == 0, made.output
    secret = made.stdout.splitlines()[1]
    assert secret.startswith("shoal_") and "refuses" not in made.stdout
    warning = " ".join(made.stderr.split())
    assert warning == f"warning: this server refuses it (403): {why}", made.stderr
    metrics = shoal("tokens", "create", "prom", "--role", "metrics")
    assert metrics.exit_code == 0 and metrics.stderr == ""
    app.state.database.close()


def test_tokens_create_is_quiet_where_the_token_works(shoal: Shoal) -> None:
    made = shoal("tokens", "create", "alice", "-q", "vision")
    assert made.exit_code == 0 and made.stderr == "", made.output
