"""The one snapshot builder: what the core is shown of the store and the cluster at `now`.

The loop builds every cycle's snapshot with `build`; explain, the dashboard and /metrics
build theirs with `from_store`, which calls the same `build` on the same store rows with
the policy the loop runs and the time they are asked at, so an account given to a person
follows the loop's rules. What only the loop knows (attempts still draining, jobs in a
backoff, foreign pods) it passes in; `from_store` has none of these.

Rules: running jobs hold what they hold (a stopping attempt too, until its workers are
gone); a job is pending when its phase is Pending, no cancel was asked for, no earlier
attempt is still draining and no backoff holds it back; foreign pods count only in a
queue that exists.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence

from scheduler import model
from scheduler.backends import base
from scheduler.placement import eligible
from scheduler.spec import Phase
from scheduler.store.live import LiveJob
from scheduler.store.port import LiveStore


def draining_attempts(
    draining: Sequence[tuple[str, int]],
    attempts: Mapping[tuple[str, int], Sequence[base.WorkerStatus]],
    live: Mapping[str, LiveJob],
    now: float,
) -> list[model.RunningJob]:
    """The attempts whose workers still drain (job id, attempt) as stopping entries
    holding what their workers hold. An earlier attempt draining while its job holds
    GPUs again is an entry of its own: the core tells them apart by `RunningJob.key`."""
    out = []
    for job_id, attempt in draining:
        workers = attempts[(job_id, attempt)]
        lj = live.get(job_id)
        request = (
            lj.request if lj is not None else model.JobRequest(id=job_id, queue=workers[0].queue)
        )
        # A bound worker holds its GPUs until the kubelet says it is gone.
        placements = tuple(w.placement for w in workers if w.holds_gpus)
        out.append(model.RunningJob(request, placements, now, stopping=True, attempt=attempt))
    return out


def build(
    *,
    nodes: Sequence[model.Node],
    queues: Sequence[model.Queue],
    live: Sequence[LiveJob],
    now: float,
    config: model.Config,
    held: Sequence[model.RunningJob] | None = None,
    stopping: Sequence[model.RunningJob] = (),
    draining: Collection[str] = frozenset(),
    held_back: Collection[str] = frozenset(),
    foreign_running: Sequence[model.RunningJob] = (),
    foreign_pending: Sequence[model.JobRequest] = (),
    unstoppable: Collection[str] = frozenset(),
    disruption_blocked: Mapping[str, str] | None = None,
    job_rules: Mapping[str, model.NodeRules] | None = None,
) -> model.Snapshot:
    """The snapshot of `live` jobs on `nodes` at `now`. `held`: the running entries of
    `live`, when made already (the loop's cache); `stopping`: attempts still
    draining, which hold their GPUs; `draining`: the ids of their jobs, not pending
    until those are gone; `held_back`: ids a backoff keeps out of this cycle;
    `unstoppable`: running jobs whose workers another replica launched out of this one's
    reach (a stop would free their GPUs while they run on); `disruption_blocked`: job id
    -> the disruption budget that holds its workers (`base.DisruptionBudgets`);
    `job_rules`: job id -> the backend's node rules for a pending job, beside its spec's
    (`base.JobNodeRules`: its volumes' topology)."""
    if held is None:
        held = [r for lj in live if (r := lj.running()) is not None]
    running = list(held)
    if unstoppable:  # workers this replica can neither see nor stop: never a victim
        running = [
            dataclasses.replace(r, job=dataclasses.replace(r.job, preemptible=False))
            if r.job.id in unstoppable
            else r
            for r in running
        ]
    running.extend(stopping)
    holding = {r.job.id for r in running}
    running.extend(f for f in foreign_running if f.job.id not in holding)
    if disruption_blocked:
        running = [
            dataclasses.replace(r, disruption_blocked=why)
            if (why := disruption_blocked.get(r.job.id))
            else r
            for r in running
        ]
    ids = {lj.id for lj in live}
    extra = model.NodeRules(tolerations=config.worker_tolerations)
    more = job_rules or {}
    pending = tuple(
        dataclasses.replace(lj.request, nodes=_rules(lj.request.nodes, extra, more.get(lj.id)))
        if config.worker_tolerations or lj.id in more
        else lj.request
        for lj in live
        if lj.phase is Phase.PENDING
        and not lj.cancel_requested
        and lj.id not in draining
        and lj.id not in held_back
    ) + tuple(fp for fp in foreign_pending if fp.id not in ids and fp.id not in held_back)
    return model.Snapshot(
        nodes=tuple(nodes),
        queues=tuple(queues),
        running=tuple(running),
        pending=pending,
        now=now,
        config=config,
    )


def _rules(
    own: model.NodeRules | None, extra: model.NodeRules, backend: model.NodeRules | None
) -> model.NodeRules | None:
    return eligible.also(eligible.also(own, extra if extra.tolerations else None), backend)


def from_store(db: LiveStore, *, config: model.Config, now: float) -> model.Snapshot:
    """The snapshot the loop would build from the store now (the inventory it last
    recorded, no draining attempts, no backoffs): for explain, dashboard and metrics."""
    return build(
        nodes=db.load_inventory(),
        queues=db.load_queues(),
        # A row that cannot be read is left out (the loop makes it that job's reason).
        live=db.live_jobs(unreadable=[]),
        now=now,
        config=config,
    )
