"""Variant pod lists derived from the default `openb` pod list (seeded, in memory).

The FGD paper evaluates on variants of the pod list (`openb_pod_list_gpushareNN`,
`multigpuNN`, `gpuspecNN`, `cpuNNN` of alibaba/clusterdata, cluster-trace-gpu-v2023),
"sampled from the default one, emphasizing certain types of workloads"; they are not in
shared/. No script that made them is published, so these are rebuilt the way the
published files are laid out (their sizes, their first rows, the paper's figures):

- `gpushare<P>`: the default list's CPU-only tasks, then as many GPU tasks as the
  default list has, drawn with replacement from its sharing (0 < gpu < 1) and
  non-sharing GPU tasks so that sharing tasks ask for P% of the GPU requests.
- `multigpu<P>`: the whole default list, then multi-GPU tasks drawn with replacement
  from its own, appended until they ask for P% of the GPU requests (the published
  multigpu50 starts with the default list unchanged and is ~900 rows longer). The
  list then asks for more than 130% of the GPUs; the protocol tunes it down.
- `gpuspec<P>`: the default list with P% of its GPU tasks (seeded choice) restricted
  to GPU models. The published gpuspec33 constrains mostly the scarce models, and
  sharing and whole-GPU tasks differently; `SPEC_MIX` is the mix of constraints in
  its first 211 GPU tasks (the only rows of it read). A constraint no node can meet
  for the task (an 8-GPU task on T4) is drawn again.
- `cpu<P>`: CPU-only tasks drawn with replacement from the default list's, then
  every GPU task of the default list. The published files hold 374, 790, 1,767 and
  2,356 CPU-only tasks for P = 50, 100, 200, 250 (from their sizes: cpu0 is exactly
  the default list's GPU rows); other P interpolate (`CPU_TASKS`).

Any other name ending in `.csv` is read as a pod list file (e.g. a published one).
"""

from __future__ import annotations

import itertools
import random
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from bench import trace
from bench.trace import Pod
from scheduler import model as m

DEFAULT_LISTS = ("default", "gpushare80", "multigpu50", "gpuspec33", "cpu250")
# The paper's figures 11-14: every published variant it plots.
ALL_LISTS = ("default", "gpushare40", "gpushare60", "gpushare80", "gpushare100",
             "multigpu20", "multigpu30", "multigpu40", "multigpu50", "gpuspec10",
             "gpuspec20", "gpuspec25", "gpuspec33", "cpu050", "cpu100", "cpu200",
             "cpu250")  # fmt: skip
_NAME = re.compile(r"^(default|gpushare|multigpu|gpuspec|cpu)(\d*)$")
_SEED = 20230710  # fixed: a variant is one pod list, like a published file
V100 = ("V100M16", "V100M32")
# (constraint, count) by task kind, from the published gpuspec33 (see above).
SPEC_MIX: dict[str, list[tuple[tuple[str, ...], int]]] = {
    "sharing": [(("T4",), 17), (("P100",), 5), (("G2", "P100", "T4", *V100), 2)],
    "whole": [(("T4",), 16), (V100, 13), (("G2",), 10), (("G3",), 2),
              (("P100", *V100), 3), (("P100", "T4", *V100), 2)],
}  # fmt: skip
CPU_TASKS = ((0, 0), (50, 374), (100, 790), (200, 1767), (250, 2356))


def label(name: str) -> str:
    """The list's name in reports: a file's stem without `openb_pod_list_`."""
    return Path(name).stem.removeprefix("openb_pod_list_") if name.endswith(".csv") else name


def load(name: str, data: Path, nodes: Sequence[m.Node]) -> list[Pod]:
    """The pod list `name`: a built one (see `build`) or a `.csv` file."""
    if name.endswith(".csv"):
        return trace.load_pod_list(Path(name))
    return build(name, trace.load_pods(data), nodes)


def build(name: str, pods: Sequence[Pod], nodes: Sequence[m.Node], seed: int = _SEED) -> list[Pod]:
    """The pod list `name` ("default", "gpushare80", "multigpu50", "gpuspec33", ...)."""
    got = _NAME.match(name)
    if got is None or (got.group(1) != "default" and not got.group(2)):
        raise ValueError(f"unknown pod list {name!r}: default, gpushareP, multigpuP, "
                         "gpuspecP, cpuP or a .csv file")  # fmt: skip
    kind, pct = got.group(1), int(got.group(2) or 0)
    if not 0 <= pct <= (400 if kind == "cpu" else 100):
        raise ValueError(f"pod list {name!r}: the percentage is out of range")
    rng = random.Random(f"{seed}-{name}")
    if kind == "default":
        return list(pods)
    if kind == "gpushare":
        return _gpushare(pods, rng, pct / 100)
    if kind == "multigpu":
        return _multigpu(pods, rng, pct / 100)
    if kind == "cpu":
        return _cpu(pods, rng, pct)
    return _constrain(pods, nodes, rng, pct / 100)


def _renamed(pods: Sequence[Pod], first: int = 0) -> list[Pod]:
    return [Pod(f"openb-pod-{first + i:04d}", p.task) for i, p in enumerate(pods)]


def _draw(
    hot: Sequence[Pod], cold: Sequence[Pod], rng: random.Random, share: float, count: int
) -> list[Pod]:
    """`count` GPU tasks, `share` of their GPU requests from `hot` (greedy, seeded)."""
    out: list[Pod] = []
    got_hot = got_cold = 0.0
    for _ in range(count):
        total = got_hot + got_cold
        ratio = got_hot / total if total else 0.0
        take_hot = bool(hot) and (not cold or share >= 1 or ratio < share)
        p = rng.choice(hot if take_hot else cold)
        if take_hot:
            got_hot += p.gpus
        else:
            got_cold += p.gpus
        out.append(p)
    return out


def _gpushare(pods: Sequence[Pod], rng: random.Random, share: float) -> list[Pod]:
    cpu = [p for p in pods if p.gpus <= 0]
    gpu = [p for p in pods if p.gpus > 0]
    sharing = [p for p in gpu if p.gpus < 1]
    whole = [p for p in gpu if p.gpus >= 1]
    return _renamed(cpu + _draw(sharing, whole, rng, share, len(gpu)))


def _multigpu(pods: Sequence[Pod], rng: random.Random, share: float) -> list[Pod]:
    multi = [p for p in pods if p.gpus > 1]
    total = sum(p.gpus for p in pods)
    hot = sum(p.gpus for p in multi)
    extra = []
    while multi and hot < share * total:
        p = rng.choice(multi)
        extra.append(p)
        hot += p.gpus
        total += p.gpus
    return list(pods) + _renamed(extra, first=len(pods))


def cpu_tasks(pct: int) -> int:
    """CPU-only tasks of `cpu<pct>`, interpolated between the published files'."""
    pairs = list(itertools.pairwise(CPU_TASKS))
    (x0, y0), (x1, y1) = next((a, b) for a, b in pairs if pct <= b[0]) if pct <= 250 else pairs[-1]
    return round(y0 + (y1 - y0) * (pct - x0) / (x1 - x0))


def _cpu(pods: Sequence[Pod], rng: random.Random, pct: int) -> list[Pod]:
    cpu = [p for p in pods if p.gpus <= 0]
    gpu = [p for p in pods if p.gpus > 0]
    return _renamed([rng.choice(cpu) for _ in range(cpu_tasks(pct))] + gpu)


def _constrain(
    pods: Sequence[Pod], nodes: Sequence[m.Node], rng: random.Random, share: float
) -> list[Pod]:
    largest = Counter[str]()
    for n in nodes:
        largest[n.gpu_model] = max(largest[n.gpu_model], n.gpu_count)
    gpu_tasks = [i for i, p in enumerate(pods) if p.gpus > 0]
    chosen = set(rng.sample(gpu_tasks, round(share * len(gpu_tasks))))
    out = []
    for i, p in enumerate(pods):
        if i in chosen:
            mix = SPEC_MIX["sharing" if p.gpus < 1 else "whole"]
            # A constraint no node meets is a rejected submission, not a placement
            # problem: only constraints with a node large enough are drawn.
            options = [(t, w) for t, w in mix if max(largest[k] for k in t) >= p.gpus]
            options = options or [(tuple(largest), 1)]
            types = rng.choices([t for t, _ in options], [w for _, w in options])[0]
            p = Pod(p.name, p.task._replace(gpu_types=types))
        out.append(p)
    return out
