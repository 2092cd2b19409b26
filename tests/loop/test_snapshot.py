"""The one snapshot builder's rules (`scheduler.loop.snapshot.build`), which the loop and
explain, the dashboard and /metrics share: what runs and what is pending."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduler import model
from scheduler.loop import snapshot
from scheduler.spec import JobSpec, Phase
from scheduler.store.live import LiveJob

CONFIG = model.Config(policy=model.Policy.BINPACK)
QUEUES = (model.Queue("q"),)
NODES = (model.Node("n1", 8000, 8192, 2, "T4", 16_384),)
SPEC = JobSpec.model_validate({"name": "j", "queue": "q", "image": "x", "gpu": 1})
AT = datetime(2026, 1, 1, tzinfo=UTC)


def live(job_id: str, phase: Phase, *, cancel: bool = False) -> LiveJob:
    holds = phase in (Phase.SCHEDULED, Phase.RUNNING)
    placements = (model.WorkerPlacement(0, "n1", (0,), 1.0),) if holds else ()
    return LiveJob(
        job_id, 1, phase, SPEC, model.JobRequest(job_id, "q", gpu=1.0), placements,
        1 if holds else 0, 0, cancel, AT if holds else None, None,
    )  # fmt: skip


def build(jobs: list[LiveJob], **kw: object) -> model.Snapshot:
    return snapshot.build(
        nodes=NODES,
        queues=QUEUES,
        live=jobs,
        now=5.0,
        config=CONFIG,
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("jobs", "kw", "pending"),
    [
        pytest.param([live("a", Phase.PENDING)], {}, ["a"], id="pending"),
        pytest.param([live("a", Phase.PENDING, cancel=True)], {}, [], id="cancel asked"),
        pytest.param([live("a", Phase.PREEMPTED)], {}, [], id="preempted: not yet requeued"),
        pytest.param([live("a", Phase.PENDING)], {"held_back": {"a"}}, [], id="in a backoff"),
        pytest.param([live("a", Phase.PENDING)], {"draining": {"a"}}, [], id="attempt draining"),
        pytest.param(
            [],
            {"foreign_pending": (model.JobRequest("f", "q"), model.JobRequest("g", "nope"))},
            ["f", "g"],
            id="foreign pods, an unknown queue's too (the core says why it waits)",
        ),
    ],
)
def test_what_is_pending(jobs: list[LiveJob], kw: dict[str, object], pending: list[str]) -> None:
    assert [j.id for j in build(jobs, **kw).pending] == pending


def test_what_runs_and_the_cycles_facts() -> None:
    stopping = model.RunningJob(model.JobRequest("old", "q"), (), 5.0, stopping=True)
    foreign = model.RunningJob(model.JobRequest("pod", "q"), ())
    snap = build(
        [live("r", Phase.RUNNING), live("p", Phase.PENDING)],
        stopping=(stopping,),
        foreign_running=(foreign,),
    )
    assert [(r.job.id, r.stopping) for r in snap.running] == [
        ("r", False),
        ("old", True),
        ("pod", False),
    ]
    assert snap.running[0].started_at == AT.timestamp()
    assert (snap.now, snap.config, snap.nodes, snap.queues) == (5.0, CONFIG, NODES, QUEUES)


def test_a_disruption_budgets_hold_marks_running_and_stopping_entries() -> None:
    """The backend's `disruption_blocked` reaches the core on the entries of those jobs
    (the core prefers other victims; a preemptor says what a stop waits for)."""
    stopping = model.RunningJob(model.JobRequest("old", "q"), (), 5.0, stopping=True)
    foreign = model.RunningJob(model.JobRequest("pod:default/nb", "q"), ())
    snap = build(
        [live("r", Phase.RUNNING), live("s", Phase.RUNNING)],
        stopping=(stopping,),
        foreign_running=(foreign,),
        disruption_blocked={
            "r": "jobs/keep: allows no disruption now",
            "old": "jobs/b: 429",
            "pod:default/nb": "default/nb: allows no disruption now",
        },
    )
    assert [(r.job.id, r.disruption_blocked) for r in snap.running] == [
        ("r", "jobs/keep: allows no disruption now"),
        ("s", ""),
        ("old", "jobs/b: 429"),
        ("pod:default/nb", "default/nb: allows no disruption now"),
    ]
