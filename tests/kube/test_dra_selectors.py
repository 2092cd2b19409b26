"""CEL selectors as Kubernetes DRA evaluates them: the `device` variable, the quantity
and semver libraries, failures that are "no match, and why", and DeviceClasses that
compile once per resourceVersion."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.draslices import gpu_class, gpu_slice

from scheduler.backends.kubernetes.dra import (
    Device,
    DeviceClasses,
    SelectorError,
    compile_selectors,
    read_slices,
)
from scheduler.backends.kubernetes.dra import selectors as selectors_module
from scheduler.spec.quantities import parse_quantity

GPU, MIG_1G, SHARED = (
    read_slices(gpu_slice("n", gpus=1)).devices[0],
    read_slices(gpu_slice("n", gpus=1, mig=True)).by_key[
        ("gpu.nvidia.com", "n", "gpu-0-mig-1g10gb-0")
    ],
    read_slices(gpu_slice("n", gpus=1, consumable=True)).devices[0],
)
A = 'device.attributes["gpu.nvidia.com"]'
C = 'device.capacity["gpu.nvidia.com"]'


def sel(*expressions: str) -> list[dict[str, Any]]:
    return [{"cel": {"expression": e}} for e in expressions]


@pytest.mark.parametrize(
    ("expression", "device", "expected"),
    [
        ('device.driver == "gpu.nvidia.com"', GPU, True),
        ("device.driver == 'other.example.com'", GPU, False),
        (f'{A}.productName == "NVIDIA H100 80GB HBM3"', GPU, True),
        (f'{A}["type"] == "mig" && {A}.profile == "1g.10gb"', MIG_1G, True),
        (f"{A}.index == 0", GPU, True),
        (f'{A}.productName.startsWith("NVIDIA H")', GPU, True),
        (f'{A}.productName.matches("H1[0-9]0")', GPU, True),
        (f'{C}.memory.compareTo(quantity("40Gi")) >= 0', GPU, True),
        (f'{C}.memory.compareTo(quantity("40Gi")) >= 0', MIG_1G, False),
        (f'{C}.memory.isGreaterThan(quantity("79Gi"))', GPU, True),
        (f'{C}.memory.isLessThan(quantity("80Gi"))', GPU, False),
        (f'{C}.memory == quantity("81920Mi")', GPU, True),
        (f"{C}.memory.asInteger() == 85899345920", GPU, True),
        (f'{C}.memory.sub(quantity("70Gi")).isLessThan(quantity("11Gi"))', GPU, True),
        (f'{C}.memory.add(1).isGreaterThan(quantity("80Gi"))', GPU, True),
        ('quantity("1.5").isInteger()', GPU, False),
        ('quantity("50k").asApproximateFloat() == 50000.0', GPU, True),
        ('isQuantity("1,5G") || isQuantity("200K")', GPU, False),
        (f'{A}.cudaComputeCapability.isGreaterThan(semver("8.9.0"))', GPU, True),
        (f'{A}.driverVersion.compareTo(semver("580.82.7")) == 0', GPU, True),
        (f'{A}.driverVersion == semver("580.82.7")', GPU, True),
        (f"{A}.driverVersion.major() == 580", GPU, True),
        ('semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))', GPU, True),
        ('semver("v1.2", true) == semver("1.2.0")', GPU, True),
        ('semver("1-rc.1", true) == semver("1.0.0-rc.1")', GPU, True),
        ("device.allowMultipleAllocations", SHARED, True),
        ("device.allowMultipleAllocations", GPU, False),
        (f'has({A}.profile) && {A}.profile == "1g.10gb"', GPU, False),
        (f'"profile" in {A}', MIG_1G, True),
        ('device.attributes["other.example.com"].size() == 0', GPU, True),
        ('"x" in device.attributes["other.example.com"]', GPU, False),
        ('device.attributes["resource.kubernetes.io"].size() == 0', GPU, True),
    ],
)
def test_expressions(expression: str, device: Device, expected: bool) -> None:
    selector = compile_selectors(sel(expression))
    assert selector.matches(device) is expected, selector.explain(device)


@pytest.mark.parametrize(
    ("expression", "why"),
    [
        (f'{A}.profile == "1g.10gb"', "no such member in mapping: 'profile'; guard"),
        (f'{A}["profile"] == "1g.10gb"', "no such key"),
        ('device.attributes["other.example.com"].x == 1', "no such member"),
        ('quantity("lots").isInteger()', "quantity: 'lots' is not a quantity"),
        ('semver("1.0").major() == 1', "semver: '1.0' is not a semantic version"),
        (f'{C}.memory.isGreaterThan(semver("1.0.0"))', "no such overload"),
        ('quantity("1.5").asInteger() == 1', "cannot convert value 3/2 to integer"),
        ("device.driver", "gave StringType, not bool"),
        ('1 + "a" == 2', "failed on device gpu.nvidia.com/n/gpu-0"),
    ],
)
def test_failures_are_no_match_with_the_reason(expression: str, why: str) -> None:
    """The last three are type errors a 1.37 API server refuses when the class is made
    (celpy has no type checker); the rest fail at run time there too. Every expression in
    test_expressions compiles on a 1.37.2 kube-apiserver (checked with dryRun=All)."""
    selector = compile_selectors(sel(expression))
    assert not selector.matches(GPU)
    explained = selector.explain(GPU)
    assert explained is not None and why in explained and expression in explained


def test_false_says_which_expression_was_false() -> None:
    s = compile_selectors(sel('device.driver == "gpu.nvidia.com"', f"{A}.index == 3"))
    assert s.explain(GPU) == f"selector '{A}.index == 3' is false for device gpu.nvidia.com/n/gpu-0"
    assert compile_selectors([]).matches(GPU)


@pytest.mark.parametrize(
    ("selectors", "why"),
    [
        (sel("device.driver =="), "does not compile: syntax error at line 1, column 15"),
        (sel('device.attributes["x"'), "does not compile: syntax error"),
        (sel("lowerAscii(device.driver)"), "unknown function lowerAscii()"),
        (sel("device.driver.frobnicate()"), "unknown function frobnicate()"),
        ([{"cel": {}}], "selector 0 has no cel.expression"),
        ([{}], "selector 0 has no cel.expression"),
    ],
)
def test_bad_selectors_are_refused_at_compile_time(
    selectors: list[dict[str, Any]], why: str
) -> None:
    with pytest.raises(SelectorError, match=why.replace("(", r"\(").replace(")", r"\)")):
        compile_selectors(selectors)


def test_device_classes_match_and_explain() -> None:
    classes = DeviceClasses(
        [
            gpu_class(extended_resource="nvidia.com/gpu"),
            gpu_class("mig.nvidia.com", type="mig"),
            {"metadata": {"name": "broken"}, "spec": {"selectors": sel("device.driver ==")}},
        ]
    )
    assert classes.names == ("broken", "gpu.nvidia.com", "mig.nvidia.com")
    assert classes.matches("gpu.nvidia.com", GPU) and not classes.matches("gpu.nvidia.com", MIG_1G)
    assert classes.matches("mig.nvidia.com", MIG_1G)
    assert classes.matches("gpu.nvidia.com", GPU, sel(f"{A}.index == 0"))
    assert not classes.matches("gpu.nvidia.com", GPU, sel(f"{A}.index == 1"))
    assert classes.explain("nope", GPU) == "no DeviceClass nope"
    why = classes.explain("broken", GPU)
    assert why is not None and why.startswith("DeviceClass broken: selector")
    assert set(classes.errors) == {"broken"}
    assert classes.by_extended_resource("nvidia.com/gpu") == "gpu.nvidia.com"
    assert classes.by_extended_resource("example.com/fpga") is None


def test_device_classes_evaluate_once_per_resource_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    real = selectors_module._evaluate

    def counting(expression: str, device: Device) -> str | None:
        calls.append(device.name)
        return real(expression, device)

    monkeypatch.setattr(selectors_module, "_evaluate", counting)
    devices = read_slices(gpu_slice("n", gpus=3)).devices
    classes = DeviceClasses([gpu_class(resource_version="5")])
    for _ in range(3):
        assert all(classes.matches("gpu.nvidia.com", d) for d in devices)
    assert len(calls) == 3
    classes.update([gpu_class(resource_version="5")])  # unchanged: answers kept
    assert all(classes.matches("gpu.nvidia.com", d) for d in devices)
    assert len(calls) == 3
    # A re-read device that is equal keeps its answer; a changed one is asked again.
    again = read_slices(gpu_slice("n", gpus=3)).devices
    assert all(classes.matches("gpu.nvidia.com", d) for d in again)
    assert len(calls) == 3
    classes.update([gpu_class(type="mig", resource_version="6")])  # changed: asked again
    assert not any(classes.matches("gpu.nvidia.com", d) for d in devices)
    assert len(calls) == 6
    classes.update([])
    assert classes.explain("gpu.nvidia.com", devices[0]) == "no DeviceClass gpu.nvidia.com"


QUANTITIES = st.tuples(
    st.integers(0, 10**6), st.sampled_from(["", "m", "k", "Ki", "Mi", "Gi", "G"])
)


@settings(max_examples=60, deadline=None)
@given(QUANTITIES, QUANTITIES)
def test_quantity_comparisons_agree_with_their_values(
    a: tuple[int, str], b: tuple[int, str]
) -> None:
    qa, qb = f"{a[0]}{a[1]}", f"{b[0]}{b[1]}"
    sign = (parse_quantity(qa) > parse_quantity(qb)) - (parse_quantity(qa) < parse_quantity(qb))
    expression = (
        f'quantity("{qa}").compareTo(quantity("{qb}")) == {sign}'
        f' && quantity("{qa}").isGreaterThan(quantity("{qb}")) == {str(sign > 0).lower()}'
        f' && quantity("{qa}").isLessThan(quantity("{qb}")) == {str(sign < 0).lower()}'
        f' && (quantity("{qa}") == quantity("{qb}")) == {str(sign == 0).lower()}'
    )
    assert compile_selectors(sel(expression)).explain(GPU) is None
