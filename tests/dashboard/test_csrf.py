"""Issue 25 item 10: the dashboard's forms carry a CSRF token (a double-submit cookie,
api/dashboard/csrf.py): a sign-in, sign-out or what-if POST without the token of its
page, or from a browser without the cookie (another site's form), is refused and signs
nobody in or out (runs nothing)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings

TOKENS = "ann-token: {user: ann, role: member, queues: [vision]}\n"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'c.db'}", tokens_yaml=TOKENS))
    with TestClient(app) as c:
        yield c
    app.state.database.close()


def _form_token(html: str, action: str) -> str:
    form = re.search(rf'<form[^>]* action="{action}".*?</form>', html, re.S)
    assert form is not None, html[-800:]
    found = re.search(r'name="csrf" value="([^"]+)"', form.group(0))
    assert found is not None, form.group(0)
    return found.group(1)


def test_the_sign_in_form_carries_the_token_of_its_cookie(client: TestClient) -> None:
    page = client.get("/ui/login")
    assert page.status_code == 200
    token = _form_token(page.text, "/ui/login")
    assert client.cookies.get("shoal_csrf") == token
    set_cookie = page.headers["set-cookie"].lower()
    assert "httponly" in set_cookie and "samesite=strict" in set_cookie and "path=/ui" in set_cookie
    r = client.post("/ui/login", data={"token": "ann-token", "csrf": token}, follow_redirects=False)
    assert r.status_code == 303 and client.cookies.get("shoal_token") == "ann-token"


@pytest.mark.parametrize("how", ["no field", "wrong field", "no cookie"])
def test_a_sign_in_without_its_csrf_token_is_refused(client: TestClient, how: str) -> None:
    token = _form_token(client.get("/ui/login").text, "/ui/login")
    data = {"token": "ann-token"}
    if how == "wrong field":
        data["csrf"] = token[::-1]
    if how == "no cookie":  # another site's form: the browser sends no SameSite=Strict cookie
        data["csrf"] = token
        client.cookies.clear()
    r = client.post("/ui/login", data=data, follow_redirects=False)
    assert r.status_code == 403, r.text
    assert "CSRF" in r.text
    assert client.cookies.get("shoal_token") is None


def test_sign_out_needs_the_token_too(client: TestClient) -> None:
    token = _form_token(client.get("/ui/login").text, "/ui/login")
    client.post("/ui/login", data={"token": "ann-token", "csrf": token})
    page = client.get("/ui/cluster")
    assert page.status_code == 200
    out = _form_token(page.text, "/ui/logout")
    r = client.post("/ui/logout", data={}, follow_redirects=False)
    assert r.status_code == 403 and "CSRF" in r.text
    assert client.get("/ui/cluster", follow_redirects=False).status_code == 200  # still in
    r = client.post("/ui/logout", data={"csrf": out}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/login"


def test_a_what_if_upload_needs_the_token(client: TestClient) -> None:
    token = _form_token(client.get("/ui/login").text, "/ui/login")
    client.post("/ui/login", data={"token": "ann-token", "csrf": token})
    page = client.get("/ui/whatif")
    assert _form_token(page.text, "/ui/whatif") == token
    trace = ("t.csv", b"name,queue,submit,duration,workers,gpu\na,vision,0,60,1,1\n", "text/csv")
    r = client.post("/ui/whatif", files={"trace": trace}, data={"jobs": "5"})
    assert r.status_code == 403 and "CSRF" in r.text
