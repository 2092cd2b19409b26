"""The one quantity parser (`scheduler.spec.quantities`, issue 38 item 4): exact, in
Kubernetes' full grammar, agreeing with the official client's parser on every quantity
it prints; a job spec's CPU and memory read through it (so `memory: 1e9` and `1Pi`,
which Kubernetes accepts, are accepted), rounded as Kubernetes rounds."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.utils import quantity as k8s_quantity

from scheduler.spec import JobSpec
from scheduler.spec.quantities import (
    parse_cpu_milli,
    parse_memory_mib,
    parse_quantity,
    quantity_int,
)

GIB = 1024**3
SUFFIXES = ["", "m", "k", "M", "G", "T", "P", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "e3", "E-2"]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("80Gi", 80 * GIB),
        ("1.5G", 1_500_000_000),
        ("100m", Fraction(1, 10)),
        ("1e3", 1000),
        ("5E-3", Fraction(5, 1000)),
        ("10240Mi", 10 * GIB),
        ("7", 7),
        ("+2k", 2000),
        ("-1Ki", -1024),
        (".5", Fraction(1, 2)),
        (3, 3),
    ],
)
def test_quantities_are_exact(text: str | int, value: Fraction | int) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "Gi", "1,5G", "200K", "1 Gi", "1e9999", "three"])
def test_non_quantities_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"quantity|exponent"):
        parse_quantity(text)


@pytest.mark.parametrize(("text", "value"), [("100m", 1), ("1.5", 2), ("2", 2), ("0.001", 1)])
def test_whole_units_round_up_as_quantity_value_does(text: str, value: int) -> None:
    assert quantity_int(text) == value


@given(st.integers(min_value=0, max_value=2**62), st.sampled_from(["", "Ki", "Mi", "Gi", "k"]))
def test_a_printed_quantity_reads_back(n: int, suffix: str) -> None:
    scale = {"": 1, "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "k": 1000}[suffix]
    assert quantity_int(f"{n}{suffix}") == n * scale


@given(
    st.integers(min_value=0, max_value=10**6),  # the client keeps 28 digits; we keep all
    st.integers(min_value=0, max_value=999),
    st.sampled_from(SUFFIXES),
)
def test_it_agrees_with_the_kubernetes_client(whole: int, part: int, suffix: str) -> None:
    text = f"{whole}.{part:03d}{suffix}" if part else f"{whole}{suffix}"
    official = k8s_quantity.parse_quantity(text)  # type: ignore[no-untyped-call]
    assert parse_quantity(text) == Fraction(official)


@pytest.mark.parametrize(
    ("text", "mib"),
    [("16Gi", 16384), ("512Mi", 512), ("1e9", 953), ("1Pi", 1024**3), ("1.5Gi", 1536),
     ("1048577", 1), (1048576 * 3, 3), ("100M", 95)],
)  # fmt: skip
def test_memory_in_whole_mib_rounded_down(text: str | int, mib: int) -> None:
    assert parse_memory_mib(text) == mib


@pytest.mark.parametrize(
    ("text", "milli"),
    [("500m", 500), ("2", 2000), (2, 2000), (0.5, 500), ("1.5", 1500), ("1k", 10**6),
     ("0.0001", 1), ("2e-1", 200)],
)  # fmt: skip
def test_cpu_in_millicores_rounded_up_as_milli_value_does(text: str | float, milli: int) -> None:
    assert parse_cpu_milli(text) == milli


@pytest.mark.parametrize("bad", ["lots", "16GB", "1 Gi", "Gi", ""])
def test_not_quantities_name_the_kind(bad: str) -> None:
    with pytest.raises(ValueError, match="not a memory quantity"):
        parse_memory_mib(bad)
    with pytest.raises(ValueError, match="not a CPU quantity"):
        parse_cpu_milli(bad)


def test_a_job_spec_takes_what_kubernetes_takes_within_its_bounds() -> None:
    spec = JobSpec(name="j", queue="q", image="i", memory="1e10", cpu="1.5")
    assert (spec.memory_mib, spec.cpu_milli) == (9536, 1500)
    with pytest.raises(ValueError, match="must be at most 1Pi"):
        JobSpec(name="j", queue="q", image="i", memory="2Pi")
    with pytest.raises(ValueError, match="must be at most"):
        JobSpec(name="j", queue="q", image="i", cpu="1e7")
