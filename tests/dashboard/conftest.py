"""A live `shoal serve` (local backend, SQLite) with two teams' jobs running, and a
headless Chromium (Debian's `chromium`, driven by Python Playwright; its own browser
download is never used). Without chromium the browser tests skip, or fail when
SHOAL_REQUIRE_BROWSER or CI is set. Screenshots go to $SHOAL_TEST_ARTIFACTS (default
tests/artifacts/dashboard)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import serve, wait

ROOT = Path(__file__).parents[2]
TOKENS = """
alice-token: {user: alice, role: member, queues: [team-a]}
bob-token: {user: bob, role: member, queues: [team-b]}
scrape-token: {user: prometheus, role: metrics}
"""
WAIT_S = 120.0  # generous: the machine may be busy


def eventually(check: Callable[[], Any], timeout: float = WAIT_S, what: str = "") -> Any:
    """`support.wait.eventually`, with an HTTP error counting as "not yet"."""
    return wait.eventually(
        check, timeout, every=0.25, what=what, retry_on=(AssertionError, httpx.HTTPError)
    )


@dataclass
class Live:
    url: str
    state: Path
    admin: httpx.Client
    jobs: dict[str, str] = field(default_factory=dict)  # name -> id

    def as_(self, token: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=60
        )

    def submit(
        self,
        token: str,
        name: str,
        queue: str,
        gpu: float,
        workers: int = 1,
        script: str = "import time; time.sleep(900)",
    ) -> str:
        with self.as_(token) as c:
            r = c.post(
                "/api/v1/jobs",
                json={
                    "name": name,
                    "queue": queue,
                    "image": "python:3.11",
                    "workers": workers,
                    "gpu": gpu,
                    "command": [sys.executable, "-u", "-c", script],
                },
            )
        assert r.status_code == 201, r.text
        self.jobs[name] = r.json()["id"]
        return str(r.json()["id"])

    def phase(self, name: str) -> str:
        return str(self.admin.get(f"/api/v1/jobs/{self.jobs[name]}").json()["phase"])


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    tmp = tmp_path_factory.mktemp("dashboard")
    with (
        # Team tokens on a server whose workers run as its own user: one trusted team's
        # box (docs/gpu.md), accepted explicitly, or they would be refused.
        serve.serving(tmp, {"SHOAL_API_TOKENS": TOKENS, "SHOAL_SHARED_USER_OK": "1"}) as s,
        httpx.Client(
            base_url=s.url, headers={"Authorization": f"Bearer {s.token}"}, timeout=60
        ) as admin,
    ):
        for q in (
            {"name": "research", "guaranteed": 8},
            {"name": "team-a", "parent": "research", "guaranteed": 4},
            {"name": "team-b", "parent": "research", "guaranteed": 2, "limit": 6},
        ):
            r = admin.post("/api/v1/queues", json=q)
            assert r.status_code == 201, r.text
        yield Live(s.url, s.state, admin)


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="session")
def artifacts() -> Path:
    out = Path(os.environ.get("SHOAL_TEST_ARTIFACTS") or ROOT / "tests" / "artifacts")
    path = out / "dashboard"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    required = bool(os.environ.get("SHOAL_REQUIRE_BROWSER") or os.environ.get("CI"))
    exe = _chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        exe = None
    if exe is None:
        msg = "no chromium or Python playwright (apt-get install chromium; pip install playwright)"
        if required:
            pytest.fail(msg + " and SHOAL_REQUIRE_BROWSER/CI is set")
        pytest.skip(msg)
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1366, "height": 900})
    context.set_default_timeout(WAIT_S * 1000)
    p = context.new_page()
    yield p
    context.close()
