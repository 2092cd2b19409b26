"""Issue 25 item 2 in a real browser: a job's live log follows its tail, and keeps the
reader's place once they scroll up (each 2 s refresh used to reset it to the top)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .conftest import WAIT_S, Live, eventually
from .test_dashboard import sign_in

CHATTY = (
    "import time\nfor i in range(3000):\n"
    "    print('line', i, 'x' * 40, flush=True)\n    time.sleep(0.1)"
)
REFRESH_S = 2.0


def _scroll(box: Any) -> dict[str, float]:
    got: dict[str, float] = box.evaluate(
        "el => ({top: el.scrollTop, height: el.scrollHeight, client: el.clientHeight})"
    )
    return got


def _last_line(box: Any) -> int:
    return int(box.inner_text().strip().splitlines()[-1].split()[1])


def test_live_log_follows_the_tail_unless_scrolled_up(
    page: Any, live: Live, artifacts: Path
) -> None:
    job = live.submit("alice-token", "chatty", "team-a", 0.25, script=CHATTY)
    eventually(lambda: live.phase("chatty") == "Running", what="chatty running")
    sign_in(page, live, "alice-token")
    page.goto(f"{live.url}/ui/jobs/{job}")
    box = page.locator("[data-testid=log-0]")
    # Enough lines to overflow the box (22rem): about 60 lines, 6 s of output.
    page.locator("[data-testid=log-0]", has_text="line 80 ").wait_for(timeout=WAIT_S * 1000)
    assert _scroll(box)["height"] > _scroll(box)["client"] + 100

    # At the bottom, it follows: after further refreshes the newest line is in view.
    seen = _last_line(box)
    page.wait_for_timeout(2.5 * REFRESH_S * 1000)
    assert _last_line(box) > seen, "the log grew between refreshes"
    s = _scroll(box)
    assert s["height"] - s["top"] - s["client"] <= 8, s

    # Scrolled up, it stays: two refreshes later the reader's place is kept.
    box.evaluate("el => { el.scrollTop = 120; }")
    seen = _last_line(box)
    page.wait_for_timeout(2.5 * REFRESH_S * 1000)
    assert _last_line(box) > seen, "refreshed meanwhile"
    assert _scroll(box)["top"] == 120, _scroll(box)

    # Back at the bottom, it follows again.
    box.evaluate("el => { el.scrollTop = el.scrollHeight; }")
    page.wait_for_timeout(2.5 * REFRESH_S * 1000)
    s = _scroll(box)
    assert s["height"] - s["top"] - s["client"] <= 8, s
    page.screenshot(path=str(artifacts / "job-log-follow.png"), full_page=True)
