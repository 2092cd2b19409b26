"""Hypothesis strategies for core property tests: random clusters, queue sets and job
mixes, kept small so that a cycle runs in milliseconds."""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from scheduler import model as m

MODELS = ("H100", "A100")


@st.composite
def clusters(draw: st.DrawFn) -> list[m.Node]:
    count = draw(st.integers(1, 5))
    out = []
    for i in range(count):
        gpus = draw(st.sampled_from([0, 2, 4, 8]))
        model = draw(st.sampled_from(MODELS)) if gpus else ""
        cpu = draw(st.sampled_from([8_000, 32_000, 64_000]))
        mem = draw(st.sampled_from([16_384, 131_072]))
        how = draw(st.sampled_from([m.Enforcement.ADVISORY, m.Enforcement.MPS]))
        # An MPS node of a device plugin's replicas (Kubernetes), or of Shoal's own daemon.
        slices = draw(st.sampled_from([0, 0, 4])) if how is m.Enforcement.MPS else 0
        gpu_mem = 81_920 if model == "H100" else 40_960
        labels = {"zone": draw(st.sampled_from(["a", "b"]))}
        taints = draw(
            st.sampled_from([(), (), (SPOT,), (m.Taint("busy", "", "PreferNoSchedule"),)])
        )
        node = m.Node(f"n{i}", cpu, mem, gpus, model, gpu_mem, how, slices)
        out.append(dataclasses.replace(node, labels=labels, taints=taints))
    return out


SPOT = m.Taint("spot", "true", "NoSchedule")
# Where a job may run: anywhere untainted, one zone, not zone b, or spot nodes too.
RULES = (
    None,
    m.NodeRules(selector=(("zone", "a"),)),
    m.NodeRules(required=(((m.Requirement("zone", "NotIn", ("b",)),),),)),
    m.NodeRules(tolerations=(m.Toleration("spot", "Exists"),)),
    m.NodeRules(preferred=((5, (m.Requirement("zone", "In", ("b",)),)),)),
)


@st.composite
def queue_sets(draw: st.DrawFn) -> list[m.Queue]:
    names = ["a", "b", "c"][: draw(st.integers(1, 3))]
    out = []
    with_parent = draw(st.booleans())
    if with_parent:
        out.append(m.Queue("dept", limit=m.Quota(draw(st.sampled_from([None, 8.0, 12.0])))))
    for name in names:
        limit_total = draw(st.sampled_from([None, 2.0, 6.0, 16.0]))
        by_model = draw(st.sampled_from([{}, {"H100": 4.0}]))
        out.append(
            m.Queue(
                name,
                guaranteed=m.Quota(draw(st.sampled_from([0.0, 1.5, 4.0]))),
                limit=m.Quota(limit_total, by_model),
                weight=draw(st.sampled_from([1.0, 2.0])),
                parent="dept" if with_parent and name != "a" else None,
            )
        )
    return out


@st.composite
def jobs(draw: st.DrawFn, queues: list[str], prefix: str, count: int) -> list[m.JobRequest]:
    out = []
    for i in range(count):
        gpu = draw(st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0, 4.0]))
        memory = draw(st.sampled_from([None, None, None, 20_000])) if gpu == 0.0 else None
        out.append(
            m.JobRequest(
                f"{prefix}{i}",
                draw(st.sampled_from(queues)),
                workers=draw(st.integers(1, 3)),
                gpu=gpu,
                gpu_memory_mib=memory,
                cpu_milli=draw(st.sampled_from([500, 4_000])),
                memory_mib=draw(st.sampled_from([1_024, 8_192])),
                gpu_types=draw(st.sampled_from([(), ("H100",), ("A100", "H100")])),
                priority=draw(st.integers(0, 3)),
                preemptible=draw(st.sampled_from([None, None, True, False])),
                submitted_at=float(draw(st.integers(0, 900))),
                max_runtime_s=draw(st.sampled_from([None, 100.0, 5_000.0])),
                distinct_gpus=draw(st.booleans()),
                enforced_only=draw(st.sampled_from([False, False, True])),
                nodes=draw(st.sampled_from(RULES)),
                max_workers=draw(st.sampled_from([0, 0, 0, 4, 6])),  # > workers: elastic
            )
        )
    return out
