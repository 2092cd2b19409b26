"""Issue 15, fault 9: `OPTIONS` answers with an `Allow` naming every method served at the
path (Starlette's own named only the first route's), and a 405 carries the same list."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

API = "/api/v1"


@pytest.mark.parametrize(
    "path,allow",
    [
        (f"{API}/jobs", "GET, POST, OPTIONS"),
        (f"{API}/jobs/some-id", "GET, DELETE, OPTIONS"),
        (f"{API}/jobs/some-id/cancel", "POST, OPTIONS"),
        (f"{API}/queues", "GET, POST, OPTIONS"),
        (f"{API}/queues/vision", "GET, PATCH, DELETE, OPTIONS"),
        ("/healthz", "GET, OPTIONS"),
    ],
)
def test_options_names_every_method(client: TestClient, path: str, allow: str) -> None:
    r = client.options(path)  # no token: it says what exists, reads nothing
    assert r.status_code == 204, r.text
    assert r.headers["allow"] == allow


def test_a_405_names_every_method_too(client: TestClient) -> None:
    r = client.put(f"{API}/jobs")
    assert r.status_code == 405
    assert r.headers["allow"] == "GET, POST, OPTIONS"


def test_options_on_a_path_that_does_not_exist_is_404(client: TestClient) -> None:
    assert client.options(f"{API}/nothing-here").status_code == 404
