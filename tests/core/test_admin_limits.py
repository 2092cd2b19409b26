"""Admins' limits on what a job may ask (issue 37 item 3): `scheduler.spec.allowed`'s
rules as tables (what is refused by default, what a queue's or the chart's list allows,
which list is in force), each refusal naming the field and the rule, and a property:
a job asking none of the limited things is never refused."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler import feasibility
from scheduler.model import Queue
from scheduler.spec import JobSpec
from scheduler.spec.allowed import Allowances, covers, refusals
from scheduler.spec.nodes import Toleration


def job(**kw: Any) -> JobSpec:
    return JobSpec.model_validate({"name": "j", "queue": "vision", "image": "img:1", **kw})


def allow(**kw: Any) -> Allowances:
    return Allowances.model_validate(kw)


def refused(spec: JobSpec, mine: Allowances | None = None, chart: Allowances | None = None):
    return [(r.loc, r.msg) for r in refusals(spec, queue="vision", mine=mine, chart=chart)]


CP = "node-role.kubernetes.io/control-plane"

# (id, job fields, queue's allowed, chart's allowed, refused loc or None, words in the msg)
CASES = [
    # The dangerous ones, refused with no configuration at all.
    (
        "system-node-critical",
        {"priorityClassName": "system-node-critical"},
        None,
        None,
        ("priorityClassName",),
        ["refused by default", "system-*", "allowed.priorityClasses"],
    ),
    (
        "system-cluster-critical",
        {"priorityClassName": "system-cluster-critical"},
        None,
        None,
        ("priorityClassName",),
        ["refused by default"],
    ),
    (
        "tolerate-everything",
        {"tolerations": [{"operator": "Exists"}]},
        None,
        None,
        ("tolerations", 0),
        ["every taint", "allowed.tolerations"],
    ),
    (
        "control-plane",
        {"tolerations": [{"key": CP, "operator": "Exists"}]},
        None,
        None,
        ("tolerations", 0),
        ["control-plane taint"],
    ),
    (
        "master",
        {
            "tolerations": [
                {
                    "key": "node-role.kubernetes.io/master",
                    "effect": "NoSchedule",
                    "operator": "Exists",
                }
            ]
        },
        None,
        None,
        ("tolerations", 0),
        ["control-plane taint"],
    ),
    (
        "second-toleration",
        {"tolerations": [{"key": "gpu", "operator": "Exists"}, {"operator": "Exists"}]},
        None,
        None,
        ("tolerations", 1),
        ["every taint"],
    ),
    # What nobody limited is allowed.
    ("plain-class", {"priorityClassName": "batch-low"}, None, None, None, []),
    (
        "plain-toleration",
        {"tolerations": [{"key": "gpu", "value": "a", "effect": "NoSchedule"}]},
        None,
        None,
        None,
        [],
    ),
    ("plain-selector", {"nodeSelector": {"pool": "a"}}, None, None, None, []),
    # A system class or a dangerous toleration, allowed by naming it exactly.
    (
        "system-named",
        {"priorityClassName": "system-node-critical"},
        allow(priorityClasses=["system-node-critical"]),
        None,
        None,
        [],
    ),
    (
        "system-pattern-is-not-enough",
        {"priorityClassName": "system-node-critical"},
        allow(priorityClasses=["*"]),
        None,
        ("priorityClassName",),
        ["refused by default"],
    ),
    (
        "control-plane-allowed",
        {"tolerations": [{"key": CP, "operator": "Exists"}]},
        allow(tolerations=[{"key": CP, "operator": "Exists"}]),
        None,
        None,
        [],
    ),
    (
        "everything-allowed",
        {"tolerations": [{"operator": "Exists"}]},
        None,
        allow(tolerations=[{"operator": "Exists"}]),
        None,
        [],
    ),
    # A queue's lists.
    (
        "class-listed",
        {"priorityClassName": "team-a-high"},
        allow(priorityClasses=["team-a-*"]),
        None,
        None,
        [],
    ),
    (
        "class-not-listed",
        {"priorityClassName": "batch-high"},
        allow(priorityClasses=["team-a-*"]),
        None,
        ("priorityClassName",),
        ["queue 'vision' allows only these", "PATCH /api/v1/queues/vision", "team-a-*"],
    ),
    (
        "nothing-allowed",
        {"priorityClassName": "batch"},
        allow(priorityClasses=[]),
        None,
        ("priorityClassName",),
        ["not allowed"],
    ),
    (
        "toleration-value-covered",
        {"tolerations": [{"key": "pool", "value": "a"}]},
        allow(tolerations=[{"key": "pool", "operator": "Exists"}]),
        None,
        None,
        [],
    ),
    (
        "toleration-other-value",
        {"tolerations": [{"key": "pool", "value": "b"}]},
        allow(tolerations=[{"key": "pool", "value": "a"}]),
        None,
        ("tolerations", 0),
        ["not allowed", "queue 'vision'"],
    ),
    (
        "toleration-other-effect",
        {"tolerations": [{"key": "pool", "operator": "Exists", "effect": "NoExecute"}]},
        allow(tolerations=[{"key": "pool", "operator": "Exists", "effect": "NoSchedule"}]),
        None,
        ("tolerations", 0),
        ["not allowed"],
    ),
    (
        "selector-value-listed",
        {"nodeSelector": {"pool": "vision-a"}},
        allow(nodeSelector={"pool": ["vision-*"]}),
        None,
        None,
        [],
    ),
    (
        "selector-value-not-listed",
        {"nodeSelector": {"pool": "infra"}},
        allow(nodeSelector={"pool": ["vision-*"]}),
        None,
        ("nodeSelector", "pool"),
        ["pool='infra' is not allowed"],
    ),
    (
        "selector-key-not-listed",
        {"nodeSelector": {"dedicated": "db"}},
        allow(nodeSelector={"pool": ["*"]}),
        None,
        ("nodeSelector", "dedicated"),
        ["node label 'dedicated' is not allowed"],
    ),
    (
        "affinity-in-checked",
        {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "pool", "operator": "In", "values": ["infra"]}
                                ]
                            }
                        ]
                    }
                }
            }
        },
        allow(nodeSelector={"pool": ["vision-*"]}),
        None,
        (
            "affinity",
            "nodeAffinity",
            "requiredDuringSchedulingIgnoredDuringExecution",
            "nodeSelectorTerms",
            0,
            "matchExpressions",
            0,
        ),
        ["pool='infra'"],
    ),
    # Which list is in force: a queue's replaces the chart's for that kind only.
    (
        "chart-list",
        {"priorityClassName": "batch"},
        None,
        allow(priorityClasses=["team-*"]),
        ("priorityClassName",),
        ["the chart allows only these", "admission.allowed.priorityClasses"],
    ),
    (
        "queue-widens-chart",
        {"priorityClassName": "batch"},
        allow(priorityClasses=["batch"]),
        allow(priorityClasses=["team-*"]),
        None,
        [],
    ),
    (
        "queue-other-kind",
        {"priorityClassName": "batch"},
        allow(tolerations=[]),
        allow(priorityClasses=["team-*"]),
        ("priorityClassName",),
        ["the chart allows"],
    ),
    # Namespaces: which teams' namespaces a queue serves (a job naming none runs in the
    # jobs namespace, judged by that name).
    ("any-namespace", {"namespace": "nlp"}, None, None, None, []),
    ("own-namespace", {"namespace": "vision"}, allow(namespaces=["vision"]), None, None, []),
    (
        "other-namespace",
        {"namespace": "nlp"},
        allow(namespaces=["vision", "vision-*"]),
        None,
        ("namespace",),
        ["namespace 'nlp' is not allowed", "queue 'vision' allows only", "allowed.namespaces"],
    ),
    (
        "no-namespace-is-the-jobs-namespace",
        {},
        allow(namespaces=["vision"]),
        None,
        ("namespace",),
        ["namespace 'shoal-jobs' is not allowed"],
    ),
    (
        "namespace-pattern",
        {"namespace": "vision-dev"},
        allow(namespaces=["vision-*"]),
        None,
        None,
        [],
    ),
    (
        "chart-namespaces",
        {"namespace": "nlp"},
        None,
        allow(namespaces=["shoal-jobs"]),
        ("namespace",),
        ["the chart allows only", "admission.allowed.namespaces"],
    ),
    # Service accounts: any by default; a list bounds them.
    ("any-account", {"serviceAccountName": "trainer"}, None, None, None, []),
    (
        "other-account",
        {"serviceAccountName": "admin"},
        allow(serviceAccounts=["trainer", "team-*"]),
        None,
        ("serviceAccountName",),
        ["ServiceAccount 'admin' is not allowed", "allowed.serviceAccounts"],
    ),
    (
        "listed-account",
        {"serviceAccountName": "team-a"},
        allow(serviceAccounts=["team-*"]),
        None,
        None,
        [],
    ),
    # Host paths: none by default; a listed directory and what is under it.
    (
        "host-path-by-default",
        {"volumes": [{"name": "h", "hostPath": {"path": "/var/lib"}}]},
        None,
        None,
        ("volumes", 0, "hostPath", "path"),
        ["refused by default", "node's own files", "allowed.hostPaths"],
    ),
    (
        "host-path-under",
        {"volumes": [{"name": "h", "hostPath": {"path": "/srv/datasets/imagenet"}}]},
        allow(hostPaths=["/srv/datasets"]),
        None,
        None,
        [],
    ),
    (
        "host-path-beside",
        {"volumes": [{"name": "h", "hostPath": {"path": "/srv/datasets2"}}]},
        None,
        allow(hostPaths=["/srv/datasets"]),
        ("volumes", 0, "hostPath", "path"),
        ["is not allowed", "admission.allowed.hostPaths"],
    ),
]


@pytest.mark.parametrize(
    ("fields", "mine", "chart", "loc", "words"),
    [pytest.param(*c[1:], id=c[0]) for c in CASES],
)
def test_rules(
    fields: dict[str, Any],
    mine: Allowances | None,
    chart: Allowances | None,
    loc: tuple[str | int, ...] | None,
    words: list[str],
) -> None:
    out = refused(job(**fields), mine, chart)
    if loc is None:
        assert out == []
        return
    assert [where for where, _ in out] == [loc], out
    for w in words:
        assert w in out[0][1], out[0][1]


@pytest.mark.parametrize(
    ("allowed", "asked", "covered"),
    [
        ({"key": "a", "operator": "Exists"}, {"key": "a", "value": "x"}, True),
        ({"key": "a", "value": "x"}, {"key": "a", "value": "x"}, True),
        ({"key": "a", "value": "x"}, {"key": "a", "operator": "Exists"}, False),
        ({"key": "a", "value": "x"}, {"key": "b", "value": "x"}, False),
        ({"operator": "Exists"}, {"key": "anything", "operator": "Exists"}, True),
        ({"key": "a", "operator": "Exists"}, {"operator": "Exists"}, False),
        (
            {"key": "a", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "a", "operator": "Exists"},
            False,
        ),
        (
            {"key": "a", "operator": "Exists"},
            {"key": "a", "effect": "NoExecute", "value": "v"},
            True,
        ),
    ],
)
def test_covers_as_pod_toleration_restriction(
    allowed: dict[str, Any], asked: dict[str, Any], covered: bool
) -> None:
    assert covers(Toleration.model_validate(allowed), Toleration.model_validate(asked)) is covered


KEYS = st.sampled_from(["pool", "gpu", "example.com/team"])
SAFE_TOLERATION = st.builds(
    lambda k, v, e: {"key": k, "value": v, "effect": e},
    KEYS,
    st.sampled_from(["", "a", "b"]),
    st.sampled_from(["", "NoSchedule", "NoExecute"]),
)


@given(
    cls=st.none() | st.from_regex(r"[a-r][a-z0-9]{0,8}", fullmatch=True),
    tolerations=st.lists(SAFE_TOLERATION, max_size=3),
    selector=st.dictionaries(KEYS, st.sampled_from(["a", "b"]), max_size=2),
)
def test_nothing_limited_refuses_nothing_but_the_defaults(
    cls: str | None, tolerations: list[dict[str, str]], selector: dict[str, str]
) -> None:
    """No list anywhere: a job with no system class and no dangerous toleration passes,
    and listing exactly what it asks passes too."""
    spec = job(priorityClassName=cls, tolerations=tolerations, nodeSelector=selector)
    assert refused(spec) == []
    exact = allow(
        priorityClasses=[cls] if cls else [],
        tolerations=tolerations,
        nodeSelector={k: [v] for k, v in selector.items()},
    )
    assert refused(spec, mine=exact) == []


def test_feasibility_names_the_field_beside_other_problems() -> None:
    """The one admission check of every front door carries the refusal."""
    spec = job(priorityClassName="system-node-critical", queue="nope")
    problems = feasibility.check_job(spec, queues={"vision": Queue("vision")}, nodes=())
    assert [p.loc for p in problems] == [("priorityClassName",), ("queue",)]


def test_a_bad_allow_list_is_refused() -> None:
    with pytest.raises(ValueError, match="label key"):
        allow(nodeSelector={"not a key!": ["x"]})
    with pytest.raises(ValueError, match="extra"):
        allow(sudo=["/"])  # not a limit Shoal has: refused, not ignored
