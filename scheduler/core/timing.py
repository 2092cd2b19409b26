"""When the core's decisions about one snapshot could next change as time alone passes.

`schedule` compares `Snapshot.now` with the snapshot's own times in three places only:
a running job becomes a preemption victim once it has run `Config.min_runtime_s`
(`preemption`), a pending job starves after `Config.starvation_s` and then goes first
and reserves room (`reservation.starving`), and a job may backfill held room only while
`now + max_runtime_s` ends before the reservation's estimated start
(`reservation.may_backfill`). Until the earliest of those instants, the same snapshot at
a later `now` gets the same decisions (only the wording of reasons such as "in 40s"
changes). The simulator uses this to skip idle ticks without changing what happens.
A new rule that compares `now` must add its instant here.
"""

from __future__ import annotations

from scheduler import model as m


def next_change(snapshot: m.Snapshot) -> float | None:
    """The earliest time >= `snapshot.now` at which a rule above may flip; None: never."""
    now, cfg = snapshot.now, snapshot.config
    times: list[float] = []
    if cfg.preemption:
        times.extend(r.started_at + cfg.min_runtime_s for r in snapshot.running)
    times.extend(j.submitted_at + cfg.starvation_s for j in snapshot.pending)
    # A reservation's start is one of these ends; backfill stops being allowed at
    # start - max_runtime_s (taken without the EPS slack: a little early is harmless).
    ends = [
        r.started_at + r.job.max_runtime_s
        for r in snapshot.running
        if r.job.max_runtime_s is not None
    ]
    for j in snapshot.pending:
        if j.max_runtime_s is not None:
            times.extend(e - j.max_runtime_s for e in ends)
    return min((t for t in times if t >= now), default=None)
