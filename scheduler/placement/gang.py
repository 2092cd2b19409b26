"""Gang placement: every worker of a job gets a node and GPUs in one decision, or none.

Called by `scheduler.core` (admission, preemption trials, reservations) and by the
benchmarks. Workers go on as few nodes as possible: one node when any node holds
the whole gang, otherwise the nodes that hold the most workers (the policy breaks
ties and picks the node for the remainder). A job with `distinct_gpus` (NCCL ranks)
puts each fractional worker on a GPU of its own: during the trial, a GPU one of its
workers took is shown as full to the rest. Trials run inside a checkpoint of the state
and are rolled back: `place_gang` never leaves the state changed.
"""

from __future__ import annotations

from collections.abc import Iterable

from scheduler import model as m
from scheduler.placement import eligible, failure, fit, policies
from scheduler.placement.fragmentation import WorkloadMix
from scheduler.placement.state import UNIT, ClusterState, Sig, view

_UNSEEN = policies.Choice(float("nan"))  # a class not yet in the cache (by identity)


def best_node(
    state: ClusterState,
    d: fit.Demand,
    scorer: policies.Scorer,
    classes: Iterable[tuple[Sig, list[int]]] | None = None,
    exclude: frozenset[int] = frozenset(),
) -> policies.Pick | None:
    """The best node for one worker: lowest score, then lowest node index. The fit is
    checked here, once per class; the scorer only ranks classes where the worker fits."""
    cache = scorer.cache_for(d)
    score = scorer.score
    best_i = -1
    best: policies.Choice | None = None
    feasible: list[tuple[Sig, list[int], policies.Choice]] | None = (
        None if scorer.by_signature else []
    )
    if classes is None:
        classes = (state.open if d.gpu > 0 or d.gpu_memory_mib else state.classes).items()
    for sig, members in classes:
        c = cache.get(sig, _UNSEEN)
        if c is _UNSEEN:
            n = fit.fits(d, sig)
            c = cache[sig] = None if n is None else score(sig, d, n)
        if c is None:
            continue
        i = members[0]
        if exclude and i in exclude:
            rest = [j for j in members if j not in exclude]
            if not rest:
                continue
            i = rest[0]
            members = rest
        if feasible is not None:
            feasible.append((sig, members, c))
        elif best is None or c.score < best.score or (c.score == best.score and i < best_i):
            best_i, best = i, c
    if feasible is not None:
        return scorer.pick(state, d, feasible) if feasible else None
    return None if best is None else policies.Pick(best_i, best)


def _gpus_for(state: ClusterState, i: int, n: fit.Need, take: int | None) -> tuple[int, ...]:
    free = state.gpu[i]
    if n.gpus == 0:
        return ()
    if n.gpus == 1:
        assert take is not None  # a one-GPU worker's Choice names its GPU
        return (free.index(take),)
    return tuple(g for g, v in enumerate(free) if v >= UNIT)[: n.gpus]


def _worker(
    state: ClusterState, job: m.JobRequest, k: int, i: int, take: int | None
) -> tuple[m.WorkerPlacement, fit.Need]:
    node = state.nodes[i]
    d = fit.Demand.of(job)
    n = fit.need(d, node.gpu_model, node.gpu_memory_mib, node.slices, bool(node.no_sharing))
    assert n is not None  # the scorer said the worker fits
    gpus = _gpus_for(state, i, n, take)
    return m.WorkerPlacement(k, node.name, gpus, fit.fraction_of(job, node)), n


def place_gang(
    state: ClusterState,
    job: m.JobRequest,
    policy: m.Policy | str | policies.Scorer,
    mix: WorkloadMix | None = None,
    *,
    explain: bool = True,
) -> tuple[m.WorkerPlacement, ...] | m.PendingReason:
    """Placements for all `job.workers` workers, or why they do not fit. With
    `explain=False` a failure carries no analysis (the benchmarks' fast path)."""
    scorer = policies.resolve(policy, state, job, mix)
    d = fit.Demand.of(job)
    tiers = eligible.tiers(state, job)
    placed = None
    for only in tiers if tiers is not None else (None,):
        placed = _place(state, job, d, scorer, only)
        if placed is not None:
            break
    if placed is None:
        if not explain:
            return failure.opaque(job)
        if tiers is not None and not tiers:
            return m.PendingReason(
                m.ReasonCode.NODE_RULES, eligible.summary(job.nodes, state.nodes), {}
            )
        return failure.explain(state, job, tiers[-1] if tiers else None)
    state.handed_out(placed, job.cpu_milli, job.memory_mib)
    return placed


def _place(
    state: ClusterState,
    job: m.JobRequest,
    d: fit.Demand,
    scorer: policies.Scorer,
    only: frozenset[int] | None,
) -> tuple[m.WorkerPlacement, ...] | None:
    """All workers on nodes in `only` (None: any node), or None."""
    workers = max(job.workers, 1)
    if workers > 1:
        return _gang(state, job, d, scorer, workers, only)
    # The hot path: one worker, no trial allocation needed.
    classes = state.open if d.gpu > 0 or d.gpu_memory_mib else state.classes
    got = best_node(state, d, scorer, view(classes, only).items())
    if got is None:
        return None
    return (_worker(state, job, 0, got.node, got.choice.take)[0],)


def _gang(
    state: ClusterState,
    job: m.JobRequest,
    d: fit.Demand,
    scorer: policies.Scorer,
    workers: int,
    only: frozenset[int] | None,
) -> tuple[m.WorkerPlacement, ...] | None:
    distinct = job.distinct_gpus
    classes = view(state.classes, only)
    caps = {s: fit.capacity(d, s, workers, distinct=distinct) for s in classes}
    if sum(c * len(classes[s]) for s, c in caps.items()) < workers:
        return None
    mark = state.checkpoint()
    placed: list[m.WorkerPlacement] = []
    used: set[int] = set()
    try:
        while len(placed) < workers:
            left = workers - len(placed)
            # A node for all that is left if one exists, else one of the largest.
            classes = view(state.classes, only)
            caps = {s: fit.capacity(d, s, left, distinct=distinct) for s in classes}
            top = max((c for s, c in caps.items() if _free(classes, s, used)), default=0)
            if top == 0:
                return None
            want = left if top >= left else top
            pool = [(s, classes[s]) for s, c in caps.items() if c >= want]
            got = best_node(state, d, scorer, pool, frozenset(used))
            if got is None:
                return None
            i = got.node
            used.add(i)
            for _ in range(want):
                sig = state.sig[i]
                n = fit.fits(d, sig)
                assert n is not None  # capacity said it fits
                w, n = _worker(state, job, len(placed), i, scorer.score(sig, d, n).take)
                state.take_worker(i, d.cpu_milli, d.memory_mib, w.gpus, n.share)
                if distinct and n.gpus == 1 and n.share < UNIT:
                    state.hide_gpu(i, w.gpus[0])  # the trial is rolled back below
                placed.append(w)
        return tuple(placed)
    finally:
        state.rollback(mark)


def _free(classes: dict[Sig, list[int]], s: Sig, used: set[int]) -> bool:
    return any(i not in used for i in classes[s])
