"""/metrics on the live server: the scrape token reads every queue (parents rolled up)
and the loop's figures; a team's token reads only its own queues' series."""

from __future__ import annotations

import re

from .conftest import Live, eventually


def series(text: str, name: str) -> dict[str, float]:
    """queue label -> value of `name` (only series with a queue label)."""
    out = {}
    for m in re.finditer(rf'^{name}{{[^}}]*queue="([^"]+)"[^}}]*}} (\S+)$', text, re.M):
        out[m.group(1)] = float(m.group(2))
    return out


def test_scrape_token_reads_everything_and_teams_only_their_own(live: Live) -> None:
    a = live.submit("alice-token", "m-a", "team-a", 1)
    live.submit("bob-token", "m-b", "team-b", 0.5, workers=2)
    eventually(lambda: live.phase("m-a") == "Running" and live.phase("m-b") == "Running")
    with live.as_("scrape-token") as scrape, live.as_("alice-token") as alice:

        def scraped() -> str | None:
            text = scrape.get("/metrics").text
            return text if "shoal_admission_wait_time_seconds_count" in text else None

        text = eventually(scraped, what="the loop's figures in /metrics")
        alloc = series(text, "shoal_queue_allocated_gpus")
        assert alloc["team-a"] >= 1 and alloc["team-b"] >= 1
        assert alloc["research"] == alloc["team-a"] + alloc["team-b"]  # rolled up
        assert series(text, "shoal_queue_deserved_gpus") == {
            "research": 8.0,
            "team-a": 4.0,
            "team-b": 2.0,
        }
        assert series(text, "shoal_queue_limit_gpus") == {"team-b": 6.0}
        assert "team-a" in series(text, "shoal_queue_fair_share_gpus")
        assert "team-b" in series(text, "shoal_admission_wait_time_seconds_count")
        for name in (
            "shoal_scheduling_cycle_duration_seconds_count",
            'shoal_scheduling_step_duration_seconds_count{step="schedule"}',
            "shoal_leader 1.0",
            "shoal_pending_workloads",
            "shoal_queue_borrowed_gpus",
            "shoal_queue_lent_gpus",
        ):
            assert name in text, name
        # The scrape credential reads nothing else: a 403 saying so (issue 25 item 10).
        assert scrape.get(f"/api/v1/jobs/{a}").status_code == 403
        assert scrape.get("/api/v1/jobs").status_code == 403

        mine = alice.get("/metrics")
        assert mine.status_code == 200
        queues = set(re.findall(r'queue="([^"]+)"', mine.text))
        assert queues == {"team-a"}, queues
        assert "team-b" not in mine.text and "research" not in mine.text
        assert "shoal_queue_allocated_gpus" in mine.text and "shoal_gpus{" in mine.text
        assert "shoal_jobs{" not in mine.text  # cluster-wide job counts are not a team's
        assert live.admin.get("/metrics").text.count('queue="team-b"') > 0
