"""Issue 25 item 2: the what-if page docs/dashboard.md promised: upload a trace, replay it
with `shoal simulate` on this cluster's nodes, see the utilisation plot (inline SVG)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from scheduler.model import Node
from scheduler.store.cluster import save_inventory

from .conftest import WAIT_S, Live
from .test_dashboard import sign_in

TOKENS = "ann-token: {user: ann, role: member, queues: [vision]}\n"
TRACE = b"""name,queue,submit,duration,workers,gpu
a1,vision,0,3600,2,1
a2,vision,600,1800,1,0.5
b1,nlp,300,7200,4,1
c1,vision,2000,3600,8,1
"""


CSRF: dict[str, str] = {}  # the form's hidden field, as the page gives it


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'w.db'}", tokens_yaml=TOKENS))
    with app.state.database.session() as s:  # one node of 8: the 8-worker job fits alone
        save_inventory(session=s, nodes=(Node("big", 64_000, 512_000, 8, "H100", 81920),))
    with TestClient(app) as c:
        c.cookies.set("shoal_token", "ann-token")
        c.get("/ui/whatif")  # its CSRF cookie (api/dashboard/csrf.py), sent back in CSRF
        CSRF["csrf"] = c.cookies.get("shoal_csrf") or ""
        yield c
    app.state.database.close()


def test_upload_a_trace_and_see_its_replay(client: TestClient) -> None:
    form = client.get("/ui/whatif")
    assert form.status_code == 200 and 'type="file" name="trace"' in form.text
    r = client.post(
        "/ui/whatif",
        files={"trace": ("mine.csv", TRACE, "text/csv")},
        data={"jobs": "50", "policy": "binpack", **CSRF},
    )
    assert r.status_code == 200, r.text
    assert 'data-testid="whatif-result"' in r.text
    points = re.search(r'data-series="utilisation" points="([^"]+)"', r.text)
    assert points is not None and len(points.group(1).split()) >= 4
    out = re.search(r'data-testid="whatif-output">(.*?)</pre>', r.text, re.S)
    assert out is not None
    assert "replaying 4 GPU jobs from trace.csv on 1 nodes (8 GPUs), policy binpack" in out.group(1)
    assert "placed 4" in out.group(1)  # on this cluster's node, where the 8-GPU job fits


def test_bad_uploads_are_refused_saying_why(client: TestClient) -> None:
    cases = [
        ({"trace": ("e.csv", b"", "text/csv")}, {}, "trace: choose"),
        ({"trace": ("big.csv", b"x" * (257 * 1024), "text/csv")}, {}, "at most 256 KiB"),
        ({"trace": ("t.csv", TRACE, "text/csv")}, {"jobs": "100000"}, "jobs: a number"),
        ({"trace": ("t.csv", TRACE, "text/csv")}, {"policy": "rm -rf"}, "policy: one of"),
        ({"trace": ("t.csv", b"name,queue\nx,y\n", "text/csv")}, {}, "could not be replayed"),
    ]
    for files, data, why in cases:
        r = client.post("/ui/whatif", files=files, data={**data, **CSRF})
        assert r.status_code == 422, (why, r.status_code)
        assert why in r.text, (why, r.text[-600:])


def test_needs_sign_in(client: TestClient) -> None:
    client.cookies.clear()
    r = client.post("/ui/whatif", files={"trace": ("t.csv", TRACE)}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/login"


def test_whatif_in_the_browser(page: Any, live: Live, artifacts: Path, tmp_path: Path) -> None:
    """The form as a reader uses it: pick a file, press Replay, see the plot (the page's
    CSP allows no inline script, and the form posts without htmx)."""
    trace = tmp_path / "mine.csv"
    trace.write_bytes(TRACE)
    sign_in(page, live, "alice-token")
    page.click("nav >> text=What if")
    page.set_input_files("[data-testid=whatif-trace]", str(trace))
    page.click("[data-testid=whatif-run]")
    result = page.locator("[data-testid=whatif-result]")
    result.wait_for(timeout=WAIT_S * 1000)
    assert "placed 4" in page.locator("[data-testid=whatif-output]").inner_text()
    assert page.locator("polyline[data-series=utilisation]").count() == 1
    page.wait_for_timeout(2500)  # a poll of the page's live part leaves the result be
    assert result.is_visible()
    page.screenshot(path=str(artifacts / "whatif.png"), full_page=True)
    page.click("nav >> text=Queues")
    page.wait_for_selector("[data-testid=history]")
    page.screenshot(path=str(artifacts / "queues-history.png"), full_page=True)
