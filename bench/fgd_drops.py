"""Which tasks a policy drops on the inflation benchmark, by shape (one seed).

    nice -n 19 .venv/bin/python -m bench.fgd_drops gpushare80 fgd-learned 42

Prints the percentage arrived at the first drop, then the dropped tasks before 95% and
100% arrived, grouped by (GPUs, cores, GPU types): where a gap to another policy comes
from.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence

from bench import fgd_inflation, trace, variants
from scheduler import placement


def main(argv: Sequence[str] | None = None) -> int:
    lst, policy, seed = (argv or sys.argv[1:])[:3]
    data = trace.DEFAULT_DATA
    nodes = trace.load_nodes(data)
    pods = variants.load(lst, data, nodes)
    capacity = sum(n.gpu_count for n in nodes)
    state = placement.ClusterState.build(nodes, ())
    score = fgd_inflation.scorer(policy, pods, int(seed), nodes)
    arrived, first = 0.0, None
    drops: dict[int, Counter[tuple[float, int, str]]] = {95: Counter(), 100: Counter()}
    for k, pod in enumerate(fgd_inflation.openb_order(pods, capacity, int(seed))):
        job = pod.job(f"t{k}")
        arrived += pod.gpus
        got = placement.place_gang(state, job, score, explain=False)
        if isinstance(got, tuple):
            state.allocate(job.id, got)
            continue
        t = pod.task
        first = first or round(100 * arrived / capacity, 1)
        for at, count in drops.items():
            if arrived <= at / 100 * capacity:
                count[(t.gpu, t.cpu_milli // 1000, "|".join(t.gpu_types))] += 1
    print(f"{lst} {policy} seed {seed}: first drop at {first}% arrived")
    for at, count in drops.items():
        gpus = sum(key[0] * n for key, n in count.items())
        print(f"  before {at}%: {sum(count.values())} tasks, {gpus:.1f} GPUs;",
              count.most_common(6))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
