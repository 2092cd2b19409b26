"""The dashboard in a real browser against a live `shoal serve` with two teams' jobs:
sign-in, cluster, queues, jobs (filters), a job's page with explain and live logs, live
updates without reloads, and that team A sees nothing of team B."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import WAIT_S, Live, eventually

HELLO = (
    "import time\nfor i in range(900):\n"
    "    print('hello from a, step', i, flush=True)\n    time.sleep(1)"
)


@pytest.fixture(scope="module")
def running(live: Live) -> Live:
    """team-a: a 2 x 0.5 GPU job printing lines and a job too big to fit;
    team-b: one whole-GPU job (the secret) and a 0.25 share."""
    live.submit("alice-token", "a-train", "team-a", 0.5, workers=2, script=HELLO)
    live.submit("alice-token", "a-huge", "team-a", 4, workers=2)
    live.submit("bob-token", "b-secret", "team-b", 1)
    live.submit("bob-token", "b-share", "team-b", 0.25)
    for name in ("a-train", "b-secret", "b-share"):
        eventually(lambda n=name: live.phase(n) == "Running", what=f"{name} running")
    return live


def sign_in(page: Any, live: Live, token: str) -> None:
    page.goto(f"{live.url}/ui/login")
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r".*/ui/cluster$"))


def test_sign_in_refuses_a_bad_token_and_pages_need_it(page: Any, live: Live) -> None:
    page.goto(f"{live.url}/ui/jobs")
    assert page.url.endswith("/ui/login")  # no cookie: to the sign-in form
    page.fill("#token", "not-a-token")
    page.click("button[type=submit]")
    assert "unknown or revoked" in page.locator("[role=alert]").inner_text()
    page.fill("#token", "scrape-token")  # a scrape credential is for /metrics only
    page.click("button[type=submit]")
    assert "cannot sign in" in page.locator("[role=alert]").inner_text()
    with httpx.Client(base_url=live.url, timeout=60) as anon:
        assert anon.get("/ui/cluster", follow_redirects=False).status_code == 303


def test_cookie_is_httponly_and_strict(page: Any, running: Live) -> None:
    sign_in(page, running, "alice-token")
    (cookie,) = [c for c in page.context.cookies() if c["name"] == "shoal_token"]
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/ui"
    assert page.evaluate("document.cookie") == ""  # not readable by scripts


def test_team_a_flows_and_sees_nothing_of_team_b(page: Any, running: Live, artifacts: Path) -> None:
    sign_in(page, running, "alice-token")
    # Cluster: every node and GPU; team-a's shares drawn to scale, team-b's anonymous.
    page.wait_for_selector("[data-testid=node-node-a]")
    assert page.locator("[data-testid^=node-]").count() == 2
    assert page.locator("svg.gpubar").count() == 8
    mine = page.locator("rect[data-queue=team-a]")
    assert mine.count() == 2
    assert all(float(mine.nth(i).get_attribute("width")) == 50.0 for i in range(2))
    others = page.locator("rect[data-queue='']")
    assert others.count() == 2  # b-secret's whole GPU and b-share's quarter, unnamed
    assert sorted(float(others.nth(i).get_attribute("width")) for i in range(2)) == [25, 100]
    page.screenshot(path=str(artifacts / "cluster-team-a.png"), full_page=True)
    body = page.content()
    assert "team-b" not in body and "b-secret" not in body and "b-share" not in body

    # Queues: only team-a, with its numbers (2 x 0.5 GPUs allocated).
    page.click("nav >> text=Queues")
    page.wait_for_selector("[data-testid=queue-team-a]")
    assert page.locator("[data-testid^=queue-]").count() == 1
    assert page.locator("[data-testid=allocated-team-a]").inner_text() == "1"
    assert "team-b" not in page.content() and "research" not in page.content()

    # Jobs: filter by phase; the pending job shows its reason.
    page.click("nav >> text=Jobs")
    page.wait_for_selector("[data-testid=job-a-train]")
    assert page.locator("[data-testid=job-b-secret]").count() == 0
    page.select_option("[data-testid=filter-phase]", "Pending")
    page.click("form.filters button")
    page.wait_for_url(re.compile(r".*phase=Pending.*"))
    page.wait_for_selector("[data-testid=job-a-huge]")
    assert page.locator("[data-testid=job-a-train]").count() == 0
    reason = page.locator("[data-testid=job-a-huge] td.reason").inner_text()
    assert reason.strip(), "a pending job shows its reason"
    page.screenshot(path=str(artifacts / "jobs-pending.png"), full_page=True)

    # A job's page: placements, explain with numbers, events, live logs.
    page.goto(f"{running.url}/ui/jobs")
    page.click("[data-testid=job-a-train] a")
    page.wait_for_selector("[data-testid=explain]")
    assert page.locator("[data-testid=phase]").inner_text() == "Running"
    explain = page.locator("[data-testid=explain]").inner_text()
    assert "Decision: running" in explain and "team-a" in explain
    # A locator, not wait_for_function: that evaluates a string, which the dashboard's
    # Content-Security-Policy (no 'unsafe-eval') refuses once it has to poll.
    page.locator("[data-testid=logs]", has_text="hello from a").wait_for(timeout=WAIT_S * 1000)
    page.screenshot(path=str(artifacts / "job-a-train.png"), full_page=True)
    assert "team-b" not in page.content()

    # The pending job's explain: why not, node by node.
    page.goto(f"{running.url}/ui/jobs/{running.jobs['a-huge']}")
    page.wait_for_selector("[data-testid=explain]")
    explain = page.locator("[data-testid=explain]").inner_text()
    assert "Decision: pending" in explain and "node-a" in explain

    # Team B's job by direct URL: not found, page and logs alike.
    secret = running.jobs["b-secret"]
    for path in (f"/ui/jobs/{secret}", f"/ui/jobs/{secret}/logs"):
        response = page.goto(running.url + path)
        assert response.status == 404
        assert "b-secret" not in page.content() and "team-b" not in page.content()
    response = page.goto(f"{running.url}/ui/jobs?queue=team-b")
    assert response.status == 200
    assert page.locator("[data-testid^=job-]").count() == 0


def test_pages_update_in_place(page: Any, running: Live) -> None:
    sign_in(page, running, "alice-token")
    page.goto(f"{running.url}/ui/jobs")
    page.wait_for_selector("[data-testid=job-a-train]")
    page.evaluate("window.__stayed = true")  # lost if the page reloads
    running.submit("alice-token", "a-late", "team-a", 0.25)
    page.wait_for_selector("[data-testid=job-a-late]", timeout=WAIT_S * 1000)
    assert page.evaluate("window.__stayed") is True
    running_phase = re.compile(r"^\s*Running\s*$")
    page.locator("[data-testid=job-a-late] .phase", has_text=running_phase).wait_for(
        timeout=WAIT_S * 1000
    )
    assert page.evaluate("window.__stayed") is True


def test_admin_sees_every_queue_with_parents_aggregated(
    page: Any, running: Live, artifacts: Path
) -> None:
    sign_in(page, running, running.admin.headers["Authorization"].removeprefix("Bearer "))
    page.goto(f"{running.url}/ui/queues")
    page.wait_for_selector("[data-testid=queue-research]")
    alloc = {
        q: float(page.locator(f"[data-testid=allocated-{q}]").inner_text())
        for q in ("research", "team-a", "team-b")
    }
    assert alloc["team-b"] == 1.25
    assert alloc["research"] == pytest.approx(alloc["team-a"] + alloc["team-b"])
    page.screenshot(path=str(artifacts / "queues-admin.png"), full_page=True)
    page.goto(f"{running.url}/ui/cluster")
    page.wait_for_selector("rect[data-queue=team-b]")
    page.screenshot(path=str(artifacts / "cluster-admin.png"), full_page=True)
