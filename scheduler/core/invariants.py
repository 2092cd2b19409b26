"""Drift detection: does what runs still satisfy policy?

`check(snapshot)` is run by `cycle.schedule` every cycle (its result is
`CycleResult.violations`) and is usable on its own by tests and the loop. It trusts no
earlier decision: it recomputes GPU shares, node totals, gang completeness, distinct
GPUs for NCCL jobs and queue usage from the running jobs alone. Reclaim corrects an
unmet guarantee; the rest is reported for the loop to act on (or for a person to
read).
"""

from __future__ import annotations

from collections import defaultdict

from scheduler import model as m
from scheduler.core import accounting


def _placements(snapshot: m.Snapshot, nodes: dict[str, m.Node]) -> list[m.Violation]:
    out: list[m.Violation] = []
    gpu_share: dict[tuple[str, int], float] = defaultdict(float)
    cpu: dict[str, int] = defaultdict(int)
    mem: dict[str, int] = defaultdict(int)
    for run in snapshot.running:
        job = run.job
        out += _gang(run) + _shared_gpus(run)
        for p in run.placements:
            node = nodes.get(p.node)
            if node is None:
                out.append(
                    m.Violation(
                        "unknown-node",
                        f"job {job.id} runs on unknown node {p.node}",
                        job.id,
                    )
                )
                continue
            cpu[p.node] += job.cpu_milli
            mem[p.node] += job.memory_mib
            for g in p.gpus:
                gpu_share[(p.node, g)] += p.fraction
            out += _gpus(job, p, node)
    return out + _gpu_overcommit(gpu_share) + _node_overcommit(cpu, mem, nodes)


def _gang(run: m.RunningJob) -> list[m.Violation]:
    job = run.job
    workers = sorted(p.worker for p in run.placements)
    # A stopping job (cancelled, preempted, failed: draining) loses workers as they
    # exit; only a job that is meant to run whole must be whole.
    if run.stopping or workers == list(range(job.workers)):
        return []
    elastic_size = job.elastic and job.workers <= len(workers) <= job.max_workers
    if elastic_size and workers == list(range(len(workers))):
        return []
    of = f"{job.workers}..{job.max_workers}" if job.elastic else str(job.workers)
    return [
        m.Violation(
            "gang-incomplete",
            f"job {job.id} has placements for workers {workers} of {of}",
            job.id,
        )
    ]


def _shared_gpus(run: m.RunningJob) -> list[m.Violation]:
    """Two workers of a distinct-GPU job (NCCL ranks) on one GPU: NCCL aborts them."""
    if not run.job.distinct_gpus:
        return []
    holders: dict[tuple[str, int], list[int]] = defaultdict(list)
    for p in run.placements:
        for g in p.gpus:
            holders[(p.node, g)].append(p.worker)
    return [
        m.Violation(
            "distinct-gpus-shared",
            f"job {run.job.id} has workers {ws} on GPU {g} of node {node}",
            run.job.id,
        )
        for (node, g), ws in sorted(holders.items())
        if len(ws) > 1
    ]


def _gpus(job: m.JobRequest, p: m.WorkerPlacement, node: m.Node) -> list[m.Violation]:
    """One worker's GPUs: a fraction on one GPU only, and GPUs the node has."""
    out: list[m.Violation] = []
    if len(p.gpus) > 1 and p.fraction < 1.0 - m.EPS:
        out.append(
            m.Violation(
                "fraction-spans-gpus",
                f"job {job.id} worker {p.worker} holds {p.fraction} of {len(p.gpus)} GPUs",
                job.id,
            )
        )
    fraction = bool(p.gpus) and p.fraction < 1.0 - m.EPS
    if job.enforced_only and fraction and not node.enforcement.enforcing:
        out.append(
            m.Violation(
                "fraction-not-enforced",
                f"job {job.id} worker {p.worker} requires an enforced fraction; node "
                f"{p.node} only advises one ({node.enforcement})",
                job.id,
            )
        )
    for g in p.gpus:
        if not 0 <= g < node.gpu_count:
            out.append(
                m.Violation(
                    "unknown-gpu",
                    f"job {job.id} uses GPU {g} of node {p.node}, which has {node.gpu_count}",
                    job.id,
                )
            )
    return out


def _gpu_overcommit(gpu_share: dict[tuple[str, int], float]) -> list[m.Violation]:
    return [
        m.Violation(
            "gpu-overcommit",
            f"GPU {g} of node {node_name} is {share:.3g} allocated",
            f"{node_name}/{g}",
        )
        for (node_name, g), share in sorted(gpu_share.items())
        if share > 1.0 + m.EPS
    ]


def _node_overcommit(
    cpu: dict[str, int], mem: dict[str, int], nodes: dict[str, m.Node]
) -> list[m.Violation]:
    out: list[m.Violation] = []
    for name in sorted(cpu):
        node = nodes[name]
        if cpu[name] > node.cpu_milli:
            out.append(
                m.Violation(
                    "cpu-overcommit",
                    f"node {name} has {cpu[name]}m CPU allocated of {node.cpu_milli}m",
                    name,
                )
            )
        if mem[name] > node.memory_mib:
            out.append(
                m.Violation(
                    "memory-overcommit",
                    f"node {name} has {mem[name]} MiB allocated of {node.memory_mib} MiB",
                    name,
                )
            )
    return out


def _queues(snapshot: m.Snapshot, nodes: dict[str, m.Node]) -> list[m.Violation]:
    out: list[m.Violation] = []
    tree = accounting.QueueTree.build(snapshot.queues)
    for run in snapshot.running:
        # A stopping entry in no queue holds room for the cluster, not for a job (on
        # Kubernetes: a GPU reservation pod still going away); no queue is charged.
        if run.job.queue not in tree.queues and not (run.stopping and not run.job.queue):
            out.append(
                m.Violation(
                    "unknown-queue",
                    f"job {run.job.id} runs in unknown queue {run.job.queue}",
                    run.job.id,
                )
            )
    ledger = accounting.build_ledger(tree, snapshot.running, nodes)
    for name in sorted(tree.queues):
        q = tree.queues[name]
        for key in sorted(ledger.usage[name]):
            cap = accounting.limit(q, key)
            holds = ledger.of(name, key)
            if cap is not None and holds > cap + m.EPS:
                what = "GPUs" if key == m.TOTAL else f"{key} GPUs"
                out.append(
                    m.Violation(
                        "queue-over-limit",
                        f"queue {name} holds {holds:g} {what} of its limit {cap:g}",
                        name,
                    )
                )
    # A guarantee is unmet when a queue under it has a pending job that fits inside it
    # while another queue runs over its own guarantee (borrowed GPUs it should return).
    est = accounting.PendingGpus(snapshot.nodes)
    borrowers = [
        n
        for n in sorted(tree.queues)
        if not tree.children.get(n)
        and ledger.of(n) > accounting.guaranteed(tree.queues[n], m.TOTAL) + m.EPS
    ]
    waiting: set[str] = set()
    for job in snapshot.pending:
        owner = tree.queues.get(job.queue)
        if owner is None or job.queue in waiting:
            continue
        room = accounting.guaranteed(owner, m.TOTAL) - ledger.of(job.queue)
        if est.total(job) <= room + m.EPS and any(b != job.queue for b in borrowers):
            waiting.add(job.queue)
    for name in sorted(waiting):
        out.append(
            m.Violation(
                "guarantee-unmet",
                f"queue {name} holds {ledger.of(name):g} of its guarantee "
                f"{accounting.guaranteed(tree.queues[name], m.TOTAL):g} with fitting work pending "
                f"while {', '.join(b for b in borrowers if b != name)} borrow",
                name,
            )
        )
    return out


def check(snapshot: m.Snapshot) -> list[m.Violation]:
    """Every violation of policy in what the snapshot says is running."""
    nodes = {n.name: n for n in snapshot.nodes}
    return _placements(snapshot, nodes) + _queues(snapshot, nodes)
