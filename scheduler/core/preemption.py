"""Reclaim and preemption for jobs that admission could not place.

Called by `cycle.schedule` after admission, with the jobs that did not fit, in order.
Two kinds of victims, whole running jobs or an elastic job's workers beyond its gang
(newest first, before any whole job: the plan becomes a shrink, `elastic.shrinks`):

- reclaim: a queue whose usage plus the job stays within its guarantee takes GPUs
  back from other queues that hold more than their guarantee;
- fair share: a queue whose usage plus the job stays within its fair share (but not its
  guarantee) takes back other queues' elastic workers beyond their gangs, which are
  borrowed room (they grew into GPUs no one waited for), never a whole job and never
  what a guarantee covers; the same rule as reclaim otherwise;
- priority: within one queue, a higher-priority job displaces lower-priority ones.

A victim must be preemptible (`preemptible` True, or None and running over its
queue's guarantee), have run at least `Config.min_runtime_s`, and not be stopping
already. Candidates go lowest priority first, most recently started first, fewest
GPUs first, except that jobs a disruption budget holds (`RunningJob.disruption_blocked`)
come after those none holds. Each plan is tried in a session trial (release, `place_gang`, roll
back), then shrunk to a minimal set. A committed plan leaves the state as it will be
once the victims stop (victims released, preemptor allocated), so the next plan
cannot count the same room twice; admission is over, so nothing else is placed on it.
The preemptor itself stays pending (WaitingForPreemption) until its victims stop.
When the only victims that would make room have not yet run `min_runtime_s`, nothing is
preempted, and the job's reason says so: GPUs are being reclaimed from job X, which
becomes preemptible at time T (`reasons.waiting_for_min_runtime`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scheduler import model as m
from scheduler import placement
from scheduler.core import accounting, elastic, reasons, workingset
from scheduler.placement import fit

MAX_PREEMPTORS = 32  # plans tried per cycle (each costs several placement trials)
MAX_VICTIMS = 64  # victims one plan may add before it gives up
MAX_SHRINK = 16  # plans with more victims than this are not shrunk


@dataclass(frozen=True, slots=True)
class Plan:
    job: m.JobRequest
    victims: tuple[m.RunningJob, ...]
    stopping: tuple[m.RunningJob, ...]  # already stopping; their room is promised to it
    placements: tuple[m.WorkerPlacement, ...]


def _key(run: m.RunningJob) -> tuple[bool, bool, int, float, float, int, m.RunKey]:
    """Victim order: an elastic job's workers beyond its gang before any whole job (a
    shrink, not a preemption), then those no disruption budget holds (as kube-scheduler
    prefers victims whose PDBs allow the eviction: the others' stops would wait), then
    lowest priority, most recently started, fewest GPUs; an elastic job's newest
    worker first."""
    gpus = accounting.placed_gpus(run.placements)
    blocked = bool(run.disruption_blocked)
    return (
        run.split_from < 0,
        blocked,
        run.job.priority,
        -run.started_at,
        gpus,
        -run.split_from,
        run.key,
    )


@dataclass(frozen=True, slots=True)
class Right:
    """What a job's queue may take from other queues: everything over their guarantees
    (`reclaim`: the job keeps its queue within its guarantee), or only their elastic
    workers beyond their gangs (`fair`: within its fair share); neither: only
    lower-priority jobs of its own queue."""

    reclaim: bool = False
    fair: bool = False


def _right(ctx: workingset.WorkingSet, job: m.JobRequest) -> Right:
    """Whether `job`, admitted, keeps its queue within its guarantee, else its fair share
    (the books as this cycle's admissions and earlier plans left them)."""
    need = ctx.est.total(job)
    held = ctx.ledger.of(job.queue)
    guarantee = accounting.guaranteed(ctx.tree.queues[job.queue], m.TOTAL)
    if held + need <= guarantee + m.EPS:
        return Right(reclaim=True)
    share = ctx.shares.get(job.queue)
    return Right(fair=share is not None and held + need <= share.total.share + m.EPS)


def _may_take(job: m.JobRequest, run: m.RunningJob, right: Right) -> bool:
    """Whether `run` may give way to `job`: lower priority in its own queue, or another
    queue's while `job` reclaims its guarantee, or another queue's grown worker while
    `job` is within its fair share (grown workers are borrowed: a grown job must not
    keep a job of a queue owed that room waiting)."""
    if run.job.queue == job.queue:
        return run.job.priority < job.priority
    return right.reclaim or (right.fair and run.split_from >= 0)


def _fits(
    ctx: workingset.WorkingSet, job: m.JobRequest, gone: Sequence[m.RunningJob]
) -> tuple[m.WorkerPlacement, ...] | None:
    """Place `job` with `gone` released and their GPUs off their queues' books (a
    trial: the session is left as it was)."""
    with ctx.session.trial():
        for run in gone:
            ctx.session.release(run)
        return _fits_now(ctx, job)


def _fits_now(
    ctx: workingset.WorkingSet, job: m.JobRequest
) -> tuple[m.WorkerPlacement, ...] | None:
    """Place `job` on the session as it is (a trial; a failure is not explained: no
    one reads why a what-if failed)."""
    with ctx.session.trial():
        if ctx.ledger.over_limit(job.queue, None, ctx.est.total(job)) is not None:
            return None
        result = placement.place_gang(ctx.state, job, ctx.snapshot.config.policy, explain=False)
        return result if isinstance(result, tuple) else None


def _fits_somewhere(ctx: workingset.WorkingSet, d: fit.Demand, names: set[str]) -> bool:
    """Whether one worker of `d` fits any of the named nodes as the state is now."""
    state = ctx.state
    for name in names:
        i = state.index.get(name)
        if i is not None and fit.fits(d, state.sig[i]) is not None:
            return True
    return False


def _free_upper_bound(ctx: workingset.WorkingSet, allowed: frozenset[str] | None) -> float:
    """GPUs free now on the models a job may use, at most (holds not subtracted)."""
    cap = ctx.capacity
    keys = [m.TOTAL] if allowed is None else sorted(allowed)
    return sum(cap.get(k, 0.0) - ctx.session.used(k) for k in keys)


def _plan(
    ctx: workingset.WorkingSet,
    job: m.JobRequest,
    pool: list[m.RunningJob],
    right: Right,
    allowed: frozenset[str] | None,
    gone: set[m.RunKey],
) -> Plan | None:
    """The smallest set of victims (stopping jobs first in `pool`) that lets `job` place."""
    need = ctx.est.total(job)
    freed = _free_upper_bound(ctx, allowed)
    found: tuple[m.WorkerPlacement, ...] | None = None
    chosen: list[m.RunningJob] = []
    taken_from: dict[str, float] = {}
    # One trial for the whole search: each victim is released once, on top of those
    # before it (the state is then what `_fits(ctx, job, chosen)` would build anew).
    # The queues' books as they were before it, for the rule that spares guarantees.
    taking = right.reclaim or right.fair
    books = {q: ctx.ledger.of(q) for q in ctx.tree.queues} if taking else None
    # A one-worker job that failed to place (within its limits, which releases only
    # loosen) can place after more releases only on a node they changed: until one of
    # those fits a worker, a trial would fail the same way and is skipped.
    single = fit.Demand.of(job) if max(job.workers, 1) == 1 else None
    changed: set[str] | None = None  # nodes changed since such a failed trial
    with ctx.session.trial():
        for run in pool:
            if len(chosen) >= MAX_VICTIMS:
                break
            q = run.job.queue
            gpus = accounting.placed_gpus(run.placements)
            if books is not None and _spared(ctx, job, run, books, taken_from):
                continue
            chosen.append(run)
            ctx.session.release(run)
            taken_from[q] = taken_from.get(q, 0.0) + gpus
            freed += gpus
            if changed is not None:
                changed.update(p.node for p in run.placements)
            # Trials are costly: only once enough GPUs could be free.
            if freed + m.EPS < need:
                continue
            if (
                single is not None
                and changed is not None
                and not _fits_somewhere(ctx, single, changed)
            ):
                continue
            found = _fits_now(ctx, job)
            if found is not None:
                break
            if single is not None and ctx.ledger.over_limit(job.queue, None, need) is None:
                changed = set()
    if found is None:
        return None
    if len(chosen) <= MAX_SHRINK:
        chosen, found = _shrink(ctx, job, chosen, found)
    chosen = elastic.whole(chosen, ctx.snapshot.running, gone)
    return Plan(
        job,
        tuple(r for r in chosen if not r.stopping),
        tuple(r for r in chosen if r.stopping),
        found,
    )


def _spared(
    ctx: workingset.WorkingSet,
    job: m.JobRequest,
    run: m.RunningJob,
    books: dict[str, float],
    taken_from: dict[str, float],
) -> bool:
    """Reclaim only while the victim's queue still holds more than its guarantee (its
    `books` less what the plan `taken_from` it); a victim of the job's own queue, or one
    already stopping, is not spared."""
    q = run.job.queue
    if q == job.queue or run.stopping:
        return False
    holds = books[q] - taken_from.get(q, 0.0)
    return holds <= accounting.guaranteed(ctx.tree.queues[q], m.TOTAL) + m.EPS


def _shrink(
    ctx: workingset.WorkingSet,
    job: m.JobRequest,
    chosen: list[m.RunningJob],
    found: tuple[m.WorkerPlacement, ...],
) -> tuple[list[m.RunningJob], tuple[m.WorkerPlacement, ...]]:
    """Keep the cheapest victims: try dropping the most valuable ones first."""
    for run in reversed(chosen[:]):
        rest = [c for c in chosen if c is not run]
        again = _fits(ctx, job, rest) if rest else None
        if again is not None:
            chosen, found = rest, again
    return chosen, found


def _commit(ctx: workingset.WorkingSet, plan: Plan) -> None:
    """Leave the session as it will be once the victims have stopped."""
    for run in (*plan.stopping, *plan.victims):
        ctx.session.release(run)
    ctx.session.allocate(plan.job, plan.placements)


def _why(ctx: workingset.WorkingSet, victim: m.RunningJob, job: m.JobRequest, right: Right) -> str:
    if victim.job.queue == job.queue:
        return (
            f"preempted for job {job.label} of higher priority ({job.priority} > "
            f"{victim.job.priority}) in queue {job.queue}"
        )
    q = ctx.tree.queues[job.queue]
    if not right.reclaim:
        share = ctx.shares[job.queue].total.share
        return (
            f"reclaimed for job {job.label}: queue {job.queue} is within its fair share "
            f"{share:g} GPUs, and workers beyond an elastic job's minimum are borrowed"
        )
    return (
        f"reclaimed for job {job.label}: queue {job.queue} is below its guarantee "
        f"{accounting.guaranteed(q, m.TOTAL):g} GPUs and queue {victim.job.queue} is above its own"
    )


def _candidates(
    ctx: workingset.WorkingSet,
) -> tuple[list[m.RunningJob], list[m.RunningJob], list[m.RunningJob]]:
    """(stopping jobs, whose room is promised; victims; young jobs, which would be
    victims but for the minimum runtime and tell a waiting job when), each in victim
    order."""
    snap = ctx.snapshot
    stopping = sorted((r for r in snap.running if r.stopping), key=_key)
    eligible = [
        r for r in snap.running if workingset.preemptible(ctx, r) and r.job.queue in ctx.tree.queues
    ]
    old = snap.config.min_runtime_s
    victims = sorted((r for r in eligible if snap.now - r.started_at >= old), key=_key)
    young = sorted((r for r in eligible if snap.now - r.started_at < old), key=_key)
    return stopping, victims, young


class _Pool:
    """Running jobs in victim order, with what `usable` reads of each worked out once
    (it is asked for every job that tries to preempt)."""

    def __init__(self, ctx: workingset.WorkingSet, runs: Sequence[m.RunningJob]) -> None:
        self.runs = list(runs)
        self.keys = [r.key for r in self.runs]
        # The GPU models a job's placements are on (unknown nodes: none).
        self.models = [
            frozenset(n.gpu_model for p in r.placements if (n := ctx.nodes.get(p.node)) is not None)
            for r in self.runs
        ]
        self.by_queue: dict[str, list[int]] = {}
        for i, r in enumerate(self.runs):
            self.by_queue.setdefault(r.job.queue, []).append(i)
        # Answers by what they depend on: jobs alike in queue, priority, models and
        # right share one until `gone` (one set per cycle, which only grows) grows.
        self._seen: dict[tuple[object, ...], list[m.RunningJob]] = {}
        self.grown = [i for i, r in enumerate(self.runs) if r.split_from >= 0]

    def usable(
        self,
        job: m.JobRequest,
        gone: set[m.RunKey],
        allowed: frozenset[str] | None,
        right: Right,
    ) -> list[m.RunningJob]:
        """The jobs whose room `job` may take: not already taken, holding what it can
        use (`allowed` models; None: any), and allowed to it (`_may_take`: without
        reclaim, only its own queue's, and with a fair share, others' grown workers)."""
        seen = (job.queue, job.priority, allowed, right, len(gone))
        got = self._seen.get(seen)
        if got is not None:
            return got
        runs, keys, models = self.runs, self.keys, self.models
        own = self.by_queue.get(job.queue, [])
        where: Sequence[int] = (
            range(len(runs))
            if right.reclaim
            else sorted({*own, *self.grown})
            if right.fair
            else own
        )
        got = self._seen[seen] = [
            runs[i]
            for i in where
            if (not gone or keys[i] not in gone)
            and (allowed is None or not models[i].isdisjoint(allowed))
            and _may_take(job, runs[i], right)
        ]
        return got


def preempt(
    ctx: workingset.WorkingSet, failed: Sequence[tuple[m.JobRequest, m.PendingReason]]
) -> tuple[list[m.Preempt], list[m.Resize], dict[str, m.PendingReason]]:
    """Preemptions and shrinks for the jobs that did not fit, and their new reasons."""
    snap = ctx.snapshot
    stopping, victims, young = _candidates(ctx)
    gone: set[m.RunKey] = set()
    out: list[m.Preempt] = []
    # Elastic jobs shrunk: the first worker taken, why, and for which job.
    taken: dict[str, tuple[int, str, str]] = {}
    waiting: dict[str, m.PendingReason] = {}
    tries = 0
    pools = _Pool(ctx, stopping), _Pool(ctx, victims), _Pool(ctx, young)
    for job, reason in failed:
        if not reason.code.preemption_may_help or tries >= MAX_PREEMPTORS:
            continue
        needs_gpu = job.gpu > 0 or job.gpu_memory_mib is not None
        allowed = frozenset(ctx.est.allowed_models(job)) if needs_gpu else None
        right = _right(ctx, job)
        # A stopping job's room is promised only to a job that could have chosen it as
        # a victim: a borrower must not claim the room reclaimed for a guarantee.
        promised = pools[0].usable(job, gone, allowed, right)
        pool = pools[1].usable(job, gone, allowed, right) if snap.config.preemption else []
        later = pools[2].usable(job, gone, allowed, right) if snap.config.preemption else []
        if not pool and not promised and not later:
            continue
        tries += 1
        plan = _plan(ctx, job, promised + pool, right, allowed, gone) if pool or promised else None
        if plan is None:
            if later:
                wait = _plan(
                    ctx, job, sorted([*promised, *pool, *later], key=_key), right, allowed, gone
                )
                if wait is not None and any(v in later for v in wait.victims):
                    waiting[job.id] = reasons.waiting_for_min_runtime(
                        job,
                        wait.victims,
                        [v for v in wait.victims if v in later],
                        snap.config.min_runtime_s,
                        snap.now,
                        "guarantee" if right.reclaim else "fair share" if right.fair else "",
                    )
            continue
        _commit(ctx, plan)
        gone.update(r.key for r in (*plan.victims, *plan.stopping))
        gpus = sum(accounting.placed_gpus(v.placements) for v in plan.victims)
        for v in plan.victims:
            if v.split_from < 0:
                out.append(
                    m.Preempt(v.job.id, _why(ctx, v, job, right), v.job.grace_period_s, job.id)
                )
            elif v.split_from < taken.get(v.job.id, (v.split_from + 1, "", ""))[0]:
                taken[v.job.id] = (v.split_from, _why(ctx, v, job, right), job.id)
        waiting[job.id] = reasons.waiting_for_preemption(
            plan.victims,
            gpus,
            list(dict.fromkeys(s.job.id for s in plan.stopping)),
            list(
                dict.fromkeys(s.disruption_blocked for s in plan.stopping if s.disruption_blocked)
            ),
        )
    return out, elastic.shrinks(ctx, taken, {p.job_id for p in out}), waiting
