"""Issue 36 item 6: a reservation's share checks in from an init container in Shoal's
own image, whatever the job's command, and only such a share does (pure manifests,
validated strictly against Kubernetes 1.37's schemas)."""

from __future__ import annotations

import dataclasses
from typing import Any

import kubernetes_validate
import pytest
from support.builders import launch_request

from scheduler.backends import base
from scheduler.backends.kubernetes import names
from scheduler.backends.kubernetes.config import KubeConfig, restricted_security_context
from scheduler.backends.kubernetes.pods import workerpod
from scheduler.worker import checkin

K8S = "1.37.0"
NS = "jobs"
UUID = "GPU-5f0e6c4a-0b7e-4c1c-9a77-2b3c4d5e6f70"
Obj = dict[str, Any]


def pod(
    gpu: float | None,
    *,
    replica: bool = False,
    dra: base.Enforcement | None = None,
    env: dict[str, str] | None = None,
    config: KubeConfig | None = None,
) -> Obj:
    req = launch_request("train", gpu=gpu, gpus_of=lambda w: (0,) if gpu and gpu < 1 else (0, 1))
    if gpu is None:
        req = launch_request("train", gpu=None)
    if env is not None:  # the job's own env (torchrun, not the launcher, as its command)
        spec = req.spec.model_copy(update={"env": env, "command": ["torchrun", "train.py"]})
        req = dataclasses.replace(req, spec=spec)
    cfg = config or KubeConfig()
    made = workerpod.worker_pod(
        req, req.placements[0], "train", NS, ["h0"], cfg, replica=replica, dra=dra
    )
    kubernetes_validate.validate(made, K8S, strict=True)
    return made


def env_names(container: Obj) -> dict[str, Obj]:
    return {e["name"]: e for e in container.get("env") or []}


@pytest.mark.parametrize(
    ("case", "made"),
    [
        ("whole GPUs", lambda: pod(2)),
        ("CPU worker", lambda: pod(None)),
        ("MPS replica", lambda: pod(0.5, replica=True)),
        ("DRA share", lambda: pod(0.5, dra=base.Enforcement.ADVISORY)),
        ("job opted out", lambda: pod(0.5, env={checkin.OPT_OUT_ENV: "off"})),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_only_a_reservations_share_gets_the_check(case: str, made: Any) -> None:
    got = made()
    assert "initContainers" not in got["spec"], case
    env = env_names(got["spec"]["containers"][0])
    assert checkin.CHECKED_ENV not in env, case  # the launcher, if any, is not told off


def test_a_share_checks_in_from_an_init_container_in_shoals_image() -> None:
    cfg = KubeConfig(
        reserve_image="registry.example/shoal:1.2",
        runtime_class="nvidia",
        security_context=restricted_security_context(),
    )
    # The job's own command (no launcher) and a variable that must not reach Shoal's Python.
    own = {"PYTHONHOME": "/opt/conda", "NVIDIA_DRIVER_CAPABILITIES": "all"}
    got = pod(0.5, env=own, config=cfg)
    spec = got["spec"]
    (init,) = spec["initContainers"]
    (worker,) = spec["containers"]
    assert worker["command"] == ["torchrun", "train.py"]
    assert spec["runtimeClassName"] == "nvidia"  # pod-wide: the init container's too
    assert init["name"] == names.SHARE_CHECK
    assert init["image"] == "registry.example/shoal:1.2"
    assert init["imagePullPolicy"] == "IfNotPresent"
    assert init["command"] == ["python", "-m", "scheduler.worker.checkin"]
    assert init["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert init["securityContext"] == worker["securityContext"] == dict(cfg.security_context)
    # Tiny, and never more than the worker asks (placement counted the worker's).
    assert init["resources"] == {
        "requests": {"cpu": "10m", "memory": "128Mi"},
        "limits": {"memory": "128Mi"},
    }
    env, wenv = env_names(init), env_names(worker)
    # The GPU from the same annotation, and every NVIDIA_* the runtime reads, as the worker.
    assert env["NVIDIA_VISIBLE_DEVICES"] == wenv["NVIDIA_VISIBLE_DEVICES"]
    assert env["NVIDIA_VISIBLE_DEVICES"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        f"metadata.annotations['{names.GPU_DEVICE}']"
    )
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "all"
    assert env[checkin.RESERVATION_ENV]["value"] == names.reservation_name("n1", 0)
    assert env["SHOAL_GPU_FRACTION"] == wenv["SHOAL_GPU_FRACTION"]
    assert "PYTHONHOME" not in env and "USER_VAR" not in env
    assert checkin.CHECKED_ENV not in env
    # The worker is told it was checked: a launcher in it does not check again.
    assert wenv[checkin.CHECKED_ENV]["value"] == names.SHARE_CHECK
    resolved = {k: e.get("value", UUID) for k, e in env.items()}
    assert checkin.checks(resolved)
    assert not checkin.checks({k: e.get("value", "") for k, e in wenv.items()})


def test_a_small_worker_gets_a_check_no_larger_than_itself() -> None:
    req = launch_request("tiny", gpu=0.25, gpus_of=lambda w: (0,))
    spec = req.spec.model_copy(update={"cpu": "5m", "memory": "64Mi"})
    req = dataclasses.replace(req, spec=spec)
    made = workerpod.worker_pod(req, req.placements[0], "tiny", NS, ["h0"], KubeConfig())
    kubernetes_validate.validate(made, K8S, strict=True)
    (init,) = made["spec"]["initContainers"]
    assert init["resources"]["requests"] == {"cpu": "5m", "memory": "64Mi"}


def test_a_job_cannot_tell_the_launcher_it_was_checked() -> None:
    """SHOAL_SHARE_CHECKED is Shoal's to set: a job's own value neither skips the init
    container nor reaches the worker as given."""
    got = pod(0.5, env={checkin.CHECKED_ENV: "yes"})
    assert [c["name"] for c in got["spec"]["initContainers"]] == [names.SHARE_CHECK]
    env = env_names(got["spec"]["containers"][0])
    assert env[checkin.CHECKED_ENV]["value"] == names.SHARE_CHECK
