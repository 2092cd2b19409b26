"""Every endpoint x every role: what each may do, and how each refusal looks.

`jid` in a path is a job in queue `vision`. A member of `nlp` gets 404 for it (it may not
learn the job exists), a viewer gets 403 for writes, no token 401.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import ADMIN, NLP, VIEWER, VISION, job_body
from fastapi.testclient import TestClient

from api.services import services_of

NONE: dict[str, str] = {}
BAD = {"Authorization": "Bearer not-a-token"}
ROLES = {"admin": ADMIN, "member": VISION, "other": NLP, "viewer": VIEWER, "none": NONE, "bad": BAD}
Q = "/api/v1/queues"
J = "/api/v1/jobs"

# (method, path, body, {role: status}); roles left out expect 401 (none, bad) by default.
CASES: list[tuple[str, str, Any, dict[str, int]]] = [
    (
        "GET",
        "/healthz",
        None,
        dict(admin=200, member=200, other=200, viewer=200, none=200, bad=200),
    ),
    ("GET", "/readyz", None, dict(admin=200, member=200, other=200, viewer=200, none=200, bad=200)),
    ("GET", "/metrics", None, dict(admin=200, member=200, other=200, viewer=200)),
    ("GET", Q, None, dict(admin=200, member=200, other=200, viewer=200)),
    ("POST", Q, {"name": "new"}, dict(admin=201, member=403, other=403, viewer=403)),
    ("GET", f"{Q}/vision", None, dict(admin=200, member=200, other=404, viewer=200)),
    ("PATCH", f"{Q}/vision", {"weight": 2}, dict(admin=200, member=403, other=403, viewer=403)),
    ("DELETE", f"{Q}/nlp", None, dict(admin=204, member=403, other=403, viewer=403)),
    ("POST", J, job_body(), dict(admin=201, member=201, other=422, viewer=403)),
    ("GET", J, None, dict(admin=200, member=200, other=200, viewer=200)),
    ("GET", f"{J}/jid", None, dict(admin=200, member=200, other=404, viewer=200)),
    ("POST", f"{J}/jid/cancel", None, dict(admin=200, member=200, other=404, viewer=403)),
    ("GET", f"{J}/jid/events", None, dict(admin=200, member=200, other=404, viewer=200)),
    ("GET", f"{J}/jid/explain", None, dict(admin=200, member=200, other=404, viewer=200)),
    ("GET", "/api/v1/nodes", None, dict(admin=200, member=200, other=200, viewer=200)),
    ("GET", "/api/v1/cluster/summary", None, dict(admin=200, member=200, other=200, viewer=200)),
]


def _params() -> list[Any]:
    out = []
    for method, path, body, expected in CASES:
        for role in ROLES:
            status = expected.get(role, 401)
            out.append(pytest.param(method, path, body, role, status, id=f"{method} {path} {role}"))
    return out


@pytest.mark.parametrize(("method", "path", "body", "role", "status"), _params())
def test_role_matrix(
    client: TestClient, method: str, path: str, body: Any, role: str, status: int
) -> None:
    jid = client.post(J, json=job_body(name="seed"), headers=VISION).json()["id"]
    r = client.request(method, path.replace("jid", jid), json=body, headers=ROLES[role])
    assert r.status_code == status, r.text
    if status >= 400:
        detail = r.json()["detail"]
        assert detail and all({"loc", "msg", "type"} <= set(d) for d in detail)
    if status == 401:
        assert r.headers["www-authenticate"] == "Bearer"


def test_other_team_learns_nothing_from_lists(client: TestClient) -> None:
    client.post(J, json=job_body(), headers=VISION)
    assert client.get(J, headers=NLP).json()["data"] == []
    assert [q["name"] for q in client.get(Q, headers=NLP).json()["data"]] == ["nlp"]
    assert client.get(J, params={"queue": "vision"}, headers=NLP).json()["data"] == []
    refused = client.post(J, json=job_body(), headers=NLP)
    assert "does not exist" in refused.json()["detail"][0]["msg"]  # same as a missing queue
    assert len(client.get(J, headers=VIEWER).json()["data"]) == 1


def test_tokens_are_kept_hashed(client: TestClient) -> None:
    tokens = services_of(client.app).tokens  # type: ignore[arg-type]
    assert "admin-token" not in repr(vars(tokens))
    assert tokens.lookup("admin-token").user == "root"
