"""Each policy's choice of node and GPU, as a table, and the baselines' orders."""

from __future__ import annotations

import pytest
from support.builders import a100, request, running, state

from bench import baselines
from scheduler import model as m
from scheduler import placement
from scheduler.placement import ClusterState, Demand, WorkloadMix, fit, policies
from scheduler.placement.fragmentation import Supply
from scheduler.placement.shares import Sig
from scheduler.placement.state import UNIT

ONE_GPU = WorkloadMix({Demand(gpu=1.0): 1.0})
THREE_QUARTERS = WorkloadMix({Demand(gpu=0.75): 1.0})
OTHER = request("o", gpu=0.5)

# b comes first so that a choice of `a` is never the lowest-index tie-break.
B_IDLE_A_HALF = ([a100("b"), a100("a")], [running(OTHER, ("a", (0,), 0.5))])
A_QUARTER = ([a100("a", gpus=2)], [running(OTHER, ("a", (0,), 0.25))])
CPU_AND_GPU: tuple[list[m.Node], list[m.RunningJob]] = (
    [a100("g"), a100("c", gpus=0, model="")],
    [],
)


@pytest.mark.parametrize(
    ("nodes", "runs", "j", "policy", "mix", "expected"),
    [
        pytest.param(*B_IDLE_A_HALF, request(gpu=0.5), "binpack", None, ("a", (0,)), id="binpack"),
        pytest.param(*B_IDLE_A_HALF, request(gpu=0.5), "spread", None, ("b", (0,)), id="spread"),
        pytest.param(
            *B_IDLE_A_HALF,
            request(gpu=0.5),
            "fgd",
            ONE_GPU,
            ("a", (0,)),
            id="fgd fills the half GPU a whole-GPU task could not use",
        ),
        pytest.param(*A_QUARTER, request(gpu=0.25), "binpack", None, ("a", (0,)), id="binpack gpu"),
        pytest.param(
            *A_QUARTER,
            request(gpu=0.25),
            "fgd",
            THREE_QUARTERS,
            ("a", (1,)),
            id="fgd keeps 0.75 free on GPU 0 for 0.75 tasks",
        ),
        pytest.param(*A_QUARTER, request(gpu=0.25), "spread", None, ("a", (1,)), id="spread gpu"),
        pytest.param(
            *CPU_AND_GPU,
            request(gpu=0),
            "binpack",
            None,
            ("c", ()),
            id="CPU-only work keeps off GPU nodes",
        ),
        pytest.param(
            [a100("x"), a100("y")],
            [],
            request(gpu=1),
            "fgd",
            ONE_GPU,
            ("x", (0,)),
            id="ties go to the lowest node",
        ),
    ],
)
def test_policy_picks(
    nodes: list[m.Node],
    runs: list[m.RunningJob],
    j: m.JobRequest,
    policy: str,
    mix: WorkloadMix | None,
    expected: tuple[str, tuple[int, ...]],
) -> None:
    got = placement.place_gang(state(nodes, runs), j, policy, mix)
    assert isinstance(got, tuple)
    assert (got[0].node, got[0].gpus) == expected


def test_fgd_uses_the_state_mix_when_none_is_given() -> None:
    s = state(*A_QUARTER)
    s.mix = THREE_QUARTERS
    got = placement.place_gang(s, request(gpu=0.25), "fgd")
    assert isinstance(got, tuple) and got[0].gpus == (1,)


PACK = [a100("idle8", gpus=8), a100("idle2", gpus=2), a100("used"), a100("shared")]
PACK_RUNS = [
    running(request("u", gpu=1), ("used", (0,), 1.0)),
    running(request("s", gpu=0.5), ("shared", (2,), 0.5)),
]


@pytest.mark.parametrize(
    ("scorer", "j", "expected"),
    [
        pytest.param(
            baselines.GpuPacking(), request(gpu=0.5), ("shared", (2,)), id="packing shared"
        ),
        pytest.param(
            baselines.GpuPacking(), request(gpu=1), ("used", (1,)), id="packing used node"
        ),
        pytest.param(
            baselines.BestFit(), request(gpu=0.5), ("idle2", (0,)), id="best-fit: least left over"
        ),
        pytest.param(baselines.DotProduct(), request(gpu=0.5), ("shared", (2,)), id="dot-product"),
        pytest.param(
            baselines.GpuClustering(),
            request(gpu=0.5),
            ("shared", (2,)),
            id="clustering same shape",
        ),
        pytest.param(
            baselines.GpuClustering(), request(gpu=2), ("idle2", (0, 1)), id="clustering idle node"
        ),
    ],
)
def test_baseline_choice(
    scorer: placement.Scorer, j: m.JobRequest, expected: tuple[str, tuple[int, ...]]
) -> None:
    got = placement.place_gang(state(PACK, PACK_RUNS), j, scorer)
    assert isinstance(got, tuple)
    assert (got[0].node, got[0].gpus) == expected


def test_gpu_packing_takes_the_smallest_idle_node() -> None:
    got = placement.place_gang(state(PACK[:2]), request(gpu=1), baselines.GpuPacking())
    assert isinstance(got, tuple) and got[0].node == "idle2"


def test_random_fit_is_seeded() -> None:
    nodes = [a100(f"n{i}") for i in range(20)]

    def picks(seed: int) -> list[str]:
        scorer = baselines.RandomFit(seed)
        out = []
        for _ in range(10):
            got = placement.place_gang(state(nodes), request(gpu=1), scorer)
            assert isinstance(got, tuple)
            out.append(got[0].node)
        return out

    assert picks(1) == picks(1)
    assert len(set(picks(1))) > 1


def test_fgd_leaves_cpu_for_the_gpus_of_a_node() -> None:
    # A CPU-only task: `small` would keep 10 cores for its 4 free GPUs (the mix needs 8
    # per GPU), `rich` keeps plenty. F_n(M) alone cannot tell them apart (every task of
    # the mix still fits either); the stranded share can.
    mix = WorkloadMix({Demand(8000, 1024, 1.0): 1.0})
    nodes = [a100("small", gpus=4, cpu=42_000), a100("rich", gpus=4, cpu=96_000)]
    got = placement.place_gang(state(nodes), request(cpu=32_000), "fgd", mix)
    assert isinstance(got, tuple) and got[0].node == "rich"
    paper = WorkloadMix(mix.weights)
    paper.stranding = 0.0  # the paper's F_n(M) alone: a tie, broken towards the smaller node
    got = placement.place_gang(state(nodes), request(cpu=32_000), "fgd", paper)
    assert isinstance(got, tuple) and got[0].node == "small"


def test_fgd_ties_go_to_the_smallest_node_keeping_large_ones_whole() -> None:
    mix = WorkloadMix({Demand(1000, 1024, 1.0): 1.0})
    mix.stranding = 0.0
    nodes = [a100("big", gpus=8, cpu=128_000), a100("small", gpus=8, cpu=64_000)]
    got = placement.place_gang(state(nodes), request(gpu=1), "fgd", mix)
    assert isinstance(got, tuple) and got[0].node == "small"


def test_paper_fgd_points_follow_the_simulators_sigmoid() -> None:
    unit = UNIT
    assert baselines.PaperFgd.points(0) == 50
    assert baselines.PaperFgd.points(unit) == 26  # fragmentation grows one GPU
    assert baselines.PaperFgd.points(-unit) == 73
    assert baselines.PaperFgd.points(int(0.01 * unit)) == 49  # any growth loses a point


def test_explain_choice_names_the_node_place_gang_takes_and_its_numbers() -> None:
    mix = WorkloadMix({Demand(1000, 1024, 1.0): 0.5, Demand(1000, 1024, 0.5): 0.5})
    s = state(*B_IDLE_A_HALF)
    want = placement.place_gang(s, request(gpu=0.5), "fgd", mix)
    got = placement.explain_choice(s, request(gpu=0.5), "fgd", mix)
    assert isinstance(want, tuple) and got[0].node == want[0].node == "a"
    assert got[0].reason.startswith("chosen: fragmentation grows -0.250 GPU on a GPU with 0.5 free")
    assert got[1].reason.startswith("rank 2: fragmentation grows")
    assert placement.explain_choice(s, request(gpu=0.5), "binpack")[0].reason.startswith("chosen")


def test_fgd_keeps_a_rare_gpu_model_for_the_tasks_that_can_only_run_there() -> None:
    # Three nodes of model C, one of model R; a third of the constrained demand asks
    # for R but R has a quarter of the GPUs. An unconstrained task should not take R.
    # Weighted by popularity alone (the paper), C-constrained types see all of r's free
    # share as a fragment already, so filling r looks cheapest.
    mix = WorkloadMix(
        {
            Demand(gpu=1.0): 0.4,
            Demand(gpu=1.0, gpu_types=("C",)): 0.4,
            Demand(gpu=1.0, gpu_types=("R",)): 0.2,
        }
    )
    nodes = [a100("r", model="R")] + [a100(f"c{k}", model="C") for k in range(3)]
    got = placement.place_gang(state(nodes), request(gpu=1), "fgd", mix)
    assert isinstance(got, tuple) and got[0].node.startswith("c")
    unweighted = placement.place_gang(state(nodes), request(gpu=1), policies.Fgd(mix))
    assert isinstance(unweighted, tuple) and unweighted[0].node == "r"


def test_a_task_type_no_node_can_host_weighs_nothing() -> None:
    nodes = [a100("a", gpus=2), a100("b", gpus=4)]
    supply = Supply(nodes)
    assert supply.scarcity(Demand(gpu=4.0)) == 6 / 4
    assert supply.scarcity(Demand(gpu=8.0)) == 0.0
    assert supply.scarcity(Demand(cpu_milli=1000)) == 1.0
    mix = WorkloadMix({Demand(gpu=8.0): 0.5, Demand(gpu=1.0): 0.5}).on(supply)
    assert mix.weights == {Demand(gpu=1.0): 1.0}


def test_policies_are_made_by_name_once_per_state() -> None:
    assert {"binpack", "spread", "fgd"} <= set(policies.names())
    one, two = state([a100("a")]), state([a100("a")])
    j = request(gpu=1)
    # One scorer (and its cache) per state, i.e. per cycle; a new state gets its own.
    assert policies.resolve("binpack", one, j, None) is policies.resolve("binpack", one, j, None)
    assert policies.resolve("binpack", one, j, None) is not policies.resolve(
        "binpack", two, j, None
    )
    with pytest.raises(ValueError, match=r"known: .*binpack"):
        policies.resolve("tetris", one, j, None)


def test_a_registered_policy_places_through_place_gang(monkeypatch: pytest.MonkeyPatch) -> None:
    class Last(policies.Scorer):
        """The highest node index first: a policy the built-in ones never pick like."""

        name = "last-node"

        def score(self, s: Sig, d: Demand, n: fit.Need) -> policies.Choice:
            return policies.Choice(0.0, policies.best_fit_take(n, s.shares))

        by_signature = False

        def pick(self, st_: ClusterState, d: Demand, feasible: policies.Feasible) -> policies.Pick:
            return max((policies.Pick(ms[-1], c) for _, ms, c in feasible), key=lambda p: p.node)

    monkeypatch.setitem(policies.REGISTRY, "last-node", policies.per_cycle(Last))
    got = placement.place_gang(state([a100("a"), a100("b")]), request(gpu=1), "last-node")
    assert isinstance(got, tuple) and got[0].node == "b"


BIG = Demand(120_000, 1024, gpu=8.0)  # only the 128-core nodes host it, one per node
SMALL = Demand(16_000, 1024, gpu=1.0)


def test_a_whole_node_types_weight_doubles_each_time_its_empty_hosts_halve() -> None:
    # A quarter of the GPUs host BIG: scarce enough (`SCARCE`) to be watched.
    nodes = [a100(f"g{k}", gpus=8, cpu=128_000, mem=786_432) for k in range(4)] + [
        a100(f"s{k}", gpus=8, cpu=96_000) for k in range(12)
    ]
    mix = WorkloadMix({BIG: 0.1, SMALL: 0.9})
    supply = Supply(nodes)
    assert [shape for shape, _ in supply.whole_node(BIG)] == [("A100", 40_960, 8, 128_000, 786_432)]
    assert supply.whole_node(SMALL) == ()  # eight fit on a node: not a whole-node type

    def opened(k: int) -> tuple[tuple[Demand, int], ...]:
        runs = [running(request(f"o{i}", gpu=0.5), (f"g{i}", (0,), 0.5)) for i in range(k)]
        s = state(nodes, runs)
        return policies.depletion(s, mix, policies.supply_of(s))

    assert opened(0) == opened(1) == ()
    assert opened(2) == ((BIG, 1),)  # half of its hosts left
    assert opened(3) == opened(4) == ((BIG, 2),)  # one left; none is capped at one
    static, depleted = mix.on(supply), mix.on(supply, ((BIG, 1),))
    ratio = static.weights[BIG] / static.weights[SMALL]
    assert depleted.weights[BIG] / depleted.weights[SMALL] == pytest.approx(2 * ratio)
    assert mix.on(supply, ((BIG, 1),)) is depleted  # memoised: its caches survive
    # Where half the GPUs could host it, BIG is not scarce: its empty hosts are not
    # kept, however few are left.
    common = nodes[:8]
    runs = [running(request(f"o{i}", gpu=0.5), (f"g{i}", (0,), 0.5)) for i in range(4)]
    assert policies.depletion(state(common, runs), mix, Supply(common)) == ()


def test_the_learned_mix_takes_a_scarce_type_in_when_it_is_first_seen() -> None:
    nodes = [a100("g", gpus=8, cpu=128_000, mem=786_432)] + [
        a100(f"s{k}", gpus=8, cpu=96_000) for k in range(7)
    ]
    s = state(nodes)
    for k in range(5):  # the mix is rebuilt at 1, 2 and 4 workers, next at 8
        placement.place_gang(s, request(f"a{k}", gpu=1, cpu=16_000), "fgd")
    assert s.learner.mix is not None and BIG not in s.learner.mix.weights
    placement.place_gang(s, request("big", gpu=8, cpu=120_000), "fgd")
    assert BIG in s.learner.mix.weights  # only the 128-core node hosts it: scarce
    plain = s.learner.observe(request("c0", gpu=2, cpu=1000))
    assert Demand(1000, 1024, gpu=2.0) not in plain.weights  # waits for the doubling
