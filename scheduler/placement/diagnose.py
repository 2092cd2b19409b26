"""Per-node account of a job's fit, for `explain` (`GET /api/v1/jobs/{id}/explain`).

Called by the core's explain. `diagnose` ranks nodes as candidates for one worker of
the job: nodes where workers fit first (those holding more of the gang ahead), then the
near misses (most free GPU first), each with a sentence saying why it fits or fails.
`explain_choice` says why the policy prefers one node over the others: for `fgd`, the
growth of the fragmentation F_n(M) and of the stranded share on each of the best nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler import model as m
from scheduler.placement import fit, policies
from scheduler.placement.fragmentation import WorkloadMix
from scheduler.placement.state import UNIT, ClusterState, Sig


@dataclass(frozen=True, slots=True)
class NodeFit:
    node: str
    fits: bool  # the whole job fits here now (a gang's every worker)
    reason: str
    workers: int  # how many of its workers fit here now: 0 < workers < all is "part"


def _why(d: fit.Demand, s: Sig, workers: int, distinct: bool) -> tuple[int, str, int]:
    """(distance, reason, workers that fit): 0 fits, 1 short of room, 2 never fits."""
    n = fit.need(d, s.model, s.gpu_mem, s.slices, s.no_sharing)
    if n is None:
        if d.gpu_types and s.model not in d.gpu_types:
            return 2, f"GPU type {s.model or 'none'} is not one of {', '.join(d.gpu_types)}", 0
        if s.no_sharing:
            return 2, "GPU sharing is off on this node now; the job asks a fraction", 0
        if s.slices:
            return 2, f"its GPUs are MPS replicas of 1/{s.slices}; the job asks more", 0
        return 2, f"its GPUs have {s.gpu_mem} MiB; the job asks {d.gpu_memory_mib} MiB", 0
    if fit.unenforced(d, n, s):
        return 2, "its GPU fractions are advisory; the job requires them enforced (MPS)", 0
    if not fit.gpu_fits(n, s.shares):
        block = sum(1 for v in s.shares if v >= UNIT)
        if n.share >= UNIT:
            plural = "s" if n.gpus > 1 else ""
            return 1, f"needs {n.gpus} free GPU{plural}; {block} of {len(s.shares)} are free", 0
        top = s.shares[0] / UNIT if s.shares else 0.0
        return 1, f"needs {n.share / UNIT:g} of one GPU; the most free GPU has {top:g}", 0
    if d.cpu_milli > s.cpu:
        return 1, f"needs {d.cpu_milli}m CPU; {s.cpu}m free", 0
    if d.memory_mib > s.mem:
        return 1, f"needs {d.memory_mib} MiB memory; {s.mem} MiB free", 0
    k = fit.capacity(d, s, workers, distinct=distinct)
    if workers > 1:
        each = ", each on a GPU of its own" if distinct and 0 < n.share < UNIT else ""
        if k >= workers:
            return 0, f"fits all {workers} workers{each}", k
        # A worker fits here, not the gang: it starts only once all fit (across nodes).
        return 0, f"room for {k} of its {workers} workers{each}; all must fit at once", k
    return 0, "fits", k


def diagnose(state: ClusterState, job: m.JobRequest, top: int = 5) -> list[NodeFit]:
    """The `top` best candidate nodes and why each fits or fails."""
    d = fit.Demand.of(job)
    workers = max(job.workers, 1)
    ranked = []
    for s, members in state.classes.items():
        far, reason, k = _why(d, s, workers, job.distinct_gpus)
        k = k if far == 0 else 0
        ranked.append(((far, -k, -sum(s.shares), -s.cpu, members[0]), members, k, reason))
    ranked.sort(key=lambda r: r[0])
    out: list[NodeFit] = []
    for _, members, k, reason in ranked:
        for i in members:
            if len(out) >= top:
                return out
            out.append(NodeFit(state.nodes[i].name, k >= workers, reason, k))
    return out


def explain_choice(
    state: ClusterState,
    job: m.JobRequest,
    policy: m.Policy | str | policies.Scorer = m.Policy.FGD,
    mix: WorkloadMix | None = None,
    top: int = 3,
) -> list[NodeFit]:
    """The `top` nodes the policy ranks best for one worker of `job`, best first (the
    node `place_gang` takes for a one-worker job), each with the numbers behind its
    rank. Pure: it does not change the state (the learner may note the job)."""
    scorer = policies.resolve(policy, state, job, mix)
    d = fit.Demand.of(job)
    pool = state.open if d.gpu > 0 or d.gpu_memory_mib else state.classes
    ranked = []
    for s, members in pool.items():
        n = fit.fits(d, s)
        if n is not None:
            ranked.append((members[0], s, n, scorer.score(s, d, n)))
    ranked.sort(key=lambda x: (x[3].score, x[0]))
    workers = max(job.workers, 1)
    out: list[NodeFit] = []
    for k, (i, s, n, c) in enumerate(ranked[:top]):
        lead = "chosen" if k == 0 else f"rank {k + 1}"
        room = fit.capacity(d, s, workers, distinct=job.distinct_gpus)
        said = f"{lead}: {_numbers(scorer, s, d, n, c)}"
        out.append(NodeFit(state.nodes[i].name, room >= workers, said, room))
    return out


def _numbers(
    scorer: policies.Scorer, s: Sig, d: fit.Demand, n: fit.Need, c: policies.Choice
) -> str:
    if not isinstance(scorer, policies.Fgd):
        return f"{scorer.name} score {c.score:.4g}"
    frag, stranded = scorer.growth(s, d, n, c.take)
    gpu = f" on a GPU with {c.take / UNIT:g} free" if c.take is not None else ""
    return (f"fragmentation grows {(frag + stranded) / UNIT:+.3f} GPU{gpu} "
            f"(weighted frag {frag / UNIT:+.3f}, stranded by CPU/memory {stranded / UNIT:+.3f}); "
            f"node of {len(s.shares)} GPUs, {s.cap_cpu // 1000} cores")  # fmt: skip
