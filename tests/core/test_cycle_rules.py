"""Table-driven tests of the cycle's rules: each case is a scenario (nodes, queues,
running, pending) and the decisions expected of one `schedule` call."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import pytest
from support.builders import job, node, nodes, on, queue, snapshot

from scheduler import model as m
from scheduler.core import cycle

R = m.ReasonCode
OLD = 0.0  # started long before now=1000, past min_runtime
YOUNG = 990.0  # started 10 s before now, under min_runtime
PDB = "jobs/keep: allows no disruption now (2 healthy, 2 needed)"


def held(run: m.RunningJob, why: str = PDB) -> m.RunningJob:
    """`run` with a disruption budget that holds its workers (its stop would wait)."""
    return replace(run, disruption_blocked=why)


@dataclass
class Case:
    id: str
    nodes: list[m.Node]
    queues: list[m.Queue]
    pending: list[m.JobRequest]
    running: list[m.RunningJob] = field(default_factory=list)
    places: set[str] = field(default_factory=set)
    preempts: dict[str, str] = field(default_factory=dict)  # victim -> for_job
    reasons: Mapping[str, R] = field(default_factory=dict)
    says: Mapping[str, str] = field(default_factory=dict)  # job -> part of its message
    config: m.Config = field(default_factory=m.Config)


CASES = [
    Case(
        "queue limit stops admission with the numbers",
        nodes(2),
        [queue("vision").limit(6).obj()],
        [job(f"v{i}", "vision").gpu(2).submitted(i).obj() for i in range(4)],
        places={"v0", "v1", "v2"},
        reasons={"v3": R.QUEUE_LIMIT},
        says={"v3": "queue vision holds 6 of its limit 6"},
    ),
    Case(
        "parent limit bounds its children",
        nodes(2),
        [
            queue("dept").limit(4).obj(),
            queue("a").parent("dept").obj(),
            queue("b").parent("dept").obj(),
        ],
        [job("a1", "a").gpu(2).obj(), job("b1", "b").gpu(2).obj(), job("b2", "b").gpu(2).obj()],
        places={"a1", "b1"},
        reasons={"b2": R.PARENT_LIMIT},
        says={"b2": "parent queue dept of b holds 4 of its limit 4"},
    ),
    Case(
        "per-model limit steers a job to another allowed model",
        [node("h0", 8, "H100"), node("a0", 8, "A100")],
        [queue("q").limit(None, H100=0).obj()],
        [job("j", "q").gpu(2).types("H100", "A100").obj()],
        places={"j"},
    ),
    Case(
        "per-model limit with no other model keeps it pending",
        [node("h0", 8, "H100")],
        [queue("q").limit(None, H100=2).obj()],
        [job("j", "q").gpu(4).obj()],
        reasons={"j": R.QUEUE_LIMIT},
        says={"j": "holds 0 of its limit 2 H100 GPUs"},
    ),
    Case(
        "gpuMemory counts as its share of the chosen GPU against the limit",
        nodes(1),
        [queue("q").limit(1).obj()],
        [job(f"m{i}", "q").gpu_memory(40_960).submitted(i).obj() for i in range(3)],
        places={"m0", "m1"},
        reasons={"m2": R.QUEUE_LIMIT},
    ),
    Case(
        "a gang is placed whole or not at all",
        nodes(2),
        [queue("q").obj()],
        [job("big", "q").gpu(4).workers(5).obj(), job("fits", "q").gpu(4).workers(4).obj()],
        places={"fits"},
        reasons={"big": R.NO_NODE},
    ),
    Case(
        "no node with enough GPUs says the largest free block",
        nodes(2),
        [queue("q").obj()],
        [job("j", "q").gpu(8).obj()],
        running=[on(job("r0", "q").gpu(4).obj(), "n0"), on(job("r1", "q").gpu(4).obj(), "n1")],
        reasons={"j": R.FRAGMENTATION},
        says={"j": "needs 8 GPUs on one node; the largest free block is 4"},
        config=m.Config(preemption=False),
    ),
    Case(
        "unknown GPU type",
        nodes(1),
        [queue("q").obj()],
        [job("j", "q").types("B200").obj()],
        reasons={"j": R.GPU_TYPE},
    ),
    Case(
        "unknown queue",
        nodes(1),
        [queue("q").obj()],
        [job("j", "nope").obj()],
        reasons={"j": R.UNKNOWN_QUEUE},
    ),
    Case(
        "reclaim: victims are lowest priority, then most recently started",
        nodes(1),
        [queue("a").guarantee(4).obj(), queue("b").guarantee(0).obj()],
        [job("a1", "a").gpu(2).obj()],
        running=[
            on(job("b-old", "b").gpu(2).obj(), "n0", 0, started=OLD),
            on(job("b-new", "b").gpu(2).obj(), "n0", 2, started=100.0),
            on(job("b-prio", "b").gpu(2).priority(5).obj(), "n0", 4, started=200.0),
            on(job("b-x", "b").gpu(2).obj(), "n0", 6, started=50.0),
        ],
        preempts={"b-new": "a1"},
        reasons={"a1": R.WAITING_FOR_PREEMPTION},
        says={"a1": "preempting b-new (2 GPUs)"},
    ),
    Case(
        "reclaim prefers victims no disruption budget holds, before priority and age",
        nodes(1),
        [queue("a").guarantee(4).obj(), queue("b").guarantee(0).obj()],
        [job("a1", "a").gpu(2).obj()],
        running=[
            on(job("b-old", "b").gpu(2).obj(), "n0", 0, started=OLD),
            held(on(job("b-new", "b").gpu(2).obj(), "n0", 2, started=100.0)),
            on(job("b-prio", "b").gpu(2).priority(5).obj(), "n0", 4, started=200.0),
            held(on(job("b-x", "b").gpu(2).obj(), "n0", 6, started=50.0)),
        ],
        preempts={"b-old": "a1"},
        says={"a1": "preempting b-old (2 GPUs)"},
    ),
    Case(
        "a job a disruption budget holds is still a victim when no other will do",
        nodes(1),
        [queue("a").guarantee(4).obj(), queue("b").obj()],
        [job("a1", "a").gpu(4).obj()],
        running=[
            held(on(job("b1", "b").gpu(4).obj(), "n0", 0, started=OLD)),
            on(job("b2", "b").gpu(4).preemptible(False).obj(), "n0", 4, started=OLD),
        ],
        preempts={"b1": "a1"},
    ),
    Case(
        "a preemptor whose victim's stop a disruption budget holds says which",
        nodes(1),
        [queue("a").guarantee(4).obj(), queue("b").obj()],
        [job("a1", "a").gpu(4).obj()],
        running=[
            held(
                on(job("b1", "b").gpu(4).obj(), "n0", 0, OLD, stopping=True),
                "jobs/keep: The disruption budget keep needs 1 healthy pods and has 1 currently",
            ),
            on(job("b2", "b").gpu(4).preemptible(False).obj(), "n0", 4, OLD),
        ],
        reasons={"a1": R.WAITING_FOR_PREEMPTION},
        says={
            "a1": "waiting for b1 to stop; waiting for PodDisruptionBudget jobs/keep: The "
            "disruption budget keep needs 1 healthy pods and has 1 currently"
        },
    ),
    Case(
        "reclaim disturbs the fewest GPUs",
        nodes(1),
        [queue("a").guarantee(4).obj(), queue("b").obj()],
        [job("a1", "a").gpu(2).obj()],
        running=[
            on(job("b1", "b").gpu(4).obj(), "n0", 0, started=OLD),
            on(job("b2", "b").gpu(2).obj(), "n0", 4, started=OLD),
            on(job("b3", "b").gpu(2).preemptible(False).obj(), "n0", 6, started=OLD),
        ],
        preempts={"b2": "a1"},
    ),
    Case(
        "reclaim drops victims that do not help (minimal set)",
        nodes(2),
        [queue("a").guarantee(4).obj(), queue("b").obj()],
        [job("a1", "a").gpu(4).obj()],
        running=[
            on(job("b-x", "b").gpu(2).obj(), "n0", 0, started=500.0),
            on(job("b-nx", "b").gpu(6).preemptible(False).obj(), "n0", 2, started=OLD),
            on(job("b-y", "b").gpu(4).obj(), "n1", 0, started=OLD),
            on(job("b-ny", "b").gpu(4).preemptible(False).obj(), "n1", 4, started=OLD),
        ],
        preempts={"b-y": "a1"},
    ),
    Case(
        "no reclaim beyond the guarantee",
        nodes(1),
        [queue("a").guarantee(2).obj(), queue("b").obj()],
        [job("a1", "a").gpu(4).obj()],
        running=[on(job("b1", "b").gpu(8).obj(), "n0", started=OLD)],
        reasons={"a1": R.NO_NODE},
    ),
    Case(
        "young jobs are not victims, and the waiting job is told when they will be",
        nodes(1),
        [queue("a").guarantee(4).obj(), queue("b").obj()],
        [job("a1", "a").gpu(4).obj()],
        running=[on(job("b1", "b").gpu(8).obj(), "n0", started=YOUNG)],
        reasons={"a1": R.WAITING_FOR_PREEMPTION},
        says={
            "a1": "from job b1 in queue b (queue a is below its guarantee); they become "
            "preemptible at 00:17:30 UTC (after the minimum runtime of 60s)"
        },
    ),
    Case(
        "non-preemptible jobs are not victims",
        nodes(1),
        [queue("a").guarantee(4).obj(), queue("b").obj()],
        [job("a1", "a").gpu(4).obj()],
        running=[on(job("b1", "b").gpu(8).preemptible(False).obj(), "n0", started=OLD)],
        reasons={"a1": R.NO_NODE},
    ),
    Case(
        "work inside its own guarantee is not reclaimed",
        nodes(1),
        [queue("a").guarantee(4).obj(), queue("b").guarantee(4).obj()],
        [job("a1", "a").gpu(4).obj()],
        running=[
            on(job("b1", "b").gpu(4).obj(), "n0", 0, started=OLD),
            on(job("b2", "b").gpu(4).obj(), "n0", 4, started=10.0),
        ],
        preempts={"b2": "a1"},
    ),
    Case(
        "within a queue higher priority preempts lower-priority preemptible jobs",
        nodes(1),
        [queue("q").obj()],
        [job("hi", "q").gpu(8).priority(10).obj()],
        running=[
            on(job("lo", "q").gpu(4).priority(1).preemptible(True).obj(), "n0", 0, OLD),
            on(job("lo2", "q").gpu(4).priority(1).preemptible(True).obj(), "n0", 4, OLD),
        ],
        preempts={"lo": "hi", "lo2": "hi"},
    ),
    Case(
        "equal priority does not preempt",
        nodes(1),
        [queue("q").obj()],
        [job("j", "q").gpu(8).priority(1).obj()],
        running=[on(job("lo", "q").gpu(4).priority(1).preemptible(True).obj(), "n0", 0, OLD)],
        reasons={"j": R.NO_NODE},
    ),
    Case(
        "a preemptor counts on jobs already stopping before choosing new victims",
        nodes(1),
        [queue("a").guarantee(4).obj(), queue("b").obj()],
        [job("a1", "a").gpu(4).obj()],
        running=[
            on(job("b1", "b").gpu(4).obj(), "n0", 0, OLD, stopping=True),
            on(job("b2", "b").gpu(4).obj(), "n0", 4, OLD),
        ],
        reasons={"a1": R.WAITING_FOR_PREEMPTION},
        says={"a1": "waiting for b1 to stop"},
    ),
    Case(
        "preemption off: reclaim does not happen",
        nodes(1),
        [queue("a").guarantee(4).obj(), queue("b").obj()],
        [job("a1", "a").gpu(4).obj()],
        running=[on(job("b1", "b").gpu(8).obj(), "n0", started=OLD)],
        reasons={"a1": R.NO_NODE},
        config=m.Config(preemption=False),
    ),
    Case(
        "fractions share one GPU up to 1.0",
        nodes(1, gpus=1),
        [queue("q").obj()],
        [job(f"f{i}", "q").gpu(0.25).submitted(i).obj() for i in range(5)],
        places={"f0", "f1", "f2", "f3"},
        reasons={"f4": R.NO_NODE},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_cycle(case: Case) -> None:
    snap = snapshot(case.nodes, case.queues, case.running, case.pending, config=case.config)
    result = cycle.schedule(snap)
    assert {p.job_id for p in result.places} == case.places
    assert {p.job_id: p.for_job for p in result.preempts} == case.preempts
    got = {k.job_id: k.reason for k in result.pending}
    assert set(got) | {p.job_id for p in result.places} == {j.id for j in case.pending}
    for job_id, code in case.reasons.items():
        assert got[job_id].code == code, got[job_id].message
    for job_id, text in case.says.items():
        assert text in got[job_id].message
    for pre in result.preempts:
        victim = next(r for r in case.running if r.job.id == pre.job_id)
        assert pre.grace_period_s == victim.job.grace_period_s
    # Preemptors never place in the same cycle.
    assert not {p.for_job for p in result.preempts} & {p.job_id for p in result.places}
