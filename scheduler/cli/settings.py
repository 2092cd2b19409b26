"""What `shoal serve` reads from its environment: the Helm chart's contract.

The chart's Deployment sets SHOAL_* variables and mounts a policy ConfigMap and a token
Secret (see docs/install.md, "What the container gets"). `from_env()` maps them onto
`ServeSettings`; `load_policy()` reads the policy YAML onto `scheduler.model.Config`
and the admins' limits on what jobs may ask (`allowed`).
Nothing here imports the `kubernetes` client: the Kubernetes backend turns these plain
values into its own `KubeConfig` (scheduler.backends.kubernetes.runtime).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from scheduler import model
from scheduler.placement import eligible
from scheduler.spec.allowed import Allowances

# The keys the chart's policy ConfigMap renders (helm/shoal/templates/configmap.yaml).
POLICY_KEYS = frozenset(
    {
        "policy",
        "minRuntimeSeconds",
        "starvationSeconds",
        "preemption",
        "intervalSeconds",
        "resizeIntervalSeconds",
        "allowed",
    }
)


class BackendKind(StrEnum):
    """`--backend` (SHOAL_BACKEND): where workers run."""

    LOCAL = "local"  # processes on this host, the embedded default
    KUBERNETES = "kubernetes"

    @classmethod
    def parse(cls, text: str) -> BackendKind:
        try:
            return cls(text.strip().lower())
        except ValueError:
            kinds = ", ".join(k.value for k in cls)
            raise SystemExit(f"--backend {text!r}: expected one of {kinds}") from None


TRUE = frozenset({"1", "true", "yes", "on"})
FALSE = frozenset({"", "0", "false", "no", "off"})


class SettingsError(ValueError):
    """A setting the service cannot start with; the message names the variable or key."""


@dataclass(frozen=True)
class Policy:
    """The scheduler policy, the loop's idle interval and the chart's limits on what a
    job may ask (None: only the dangerous defaults are refused)."""

    core: model.Config
    interval_s: float
    allowed: Allowances | None = None


@dataclass(frozen=True)
class ServeSettings:
    """Everything `shoal serve` takes from SHOAL_* variables (flags are passed apart)."""

    tokens_file: str | None = None  # SHOAL_API_TOKENS_FILE: use it, generate nothing
    policy_file: str | None = None  # SHOAL_POLICY_FILE
    jobs_namespace: str = "shoal-jobs"
    scheduler_name: str = "shoal"
    reserve_image: str | None = None  # None: KubeConfig's default
    worker_security_context: Mapping[str, Any] | None = None  # None: KubeConfig's default
    worker_tolerations: Sequence[Mapping[str, Any]] = ()
    leader_election: bool = False
    leader_namespace: str = "shoal-system"
    lease_name: str = "shoal-scheduler"
    lease_duration_s: int = 15
    pod_name: str | None = None  # the replica's identity (lease holder, store lease)
    kube_api_url: str | None = None  # explicit API server (tests); None: in-cluster
    kubeconfig: str | None = None
    # SHOAL_KUBE_OPTIONS_FILE: more of the kubernetes backend's settings, as a JSON object
    # (the chart's kube-options.json; keys in runtime.KUBE_OPTIONS).
    kube_options: Mapping[str, Any] | None = None
    # SHOAL_WORKER_API_URL: the API URL workers report progress to, where it is not this
    # process's own (`--role scheduler`: the API's Service). None: this server's URL.
    worker_api_url: str | None = None


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise SettingsError(f"{name}: expected true or false, got {raw!r}")


def _json_file(env: Mapping[str, str], name: str) -> Any:
    path = env.get(name)
    if not path:
        return None
    try:
        return json.loads(Path(path).read_text() or "null")
    except (OSError, ValueError) as e:
        raise SettingsError(f"{name}={path}: {e}") from None


def from_env(env: Mapping[str, str] | None = None) -> ServeSettings:
    """The settings in `env` (default: the process environment)."""
    env = os.environ if env is None else env
    sc = _json_file(env, "SHOAL_WORKER_SECURITY_CONTEXT_FILE")
    if sc is not None and not isinstance(sc, dict):
        raise SettingsError("SHOAL_WORKER_SECURITY_CONTEXT_FILE: expected a JSON object")
    tolerations = _json_file(env, "SHOAL_WORKER_TOLERATIONS_FILE") or []
    if not isinstance(tolerations, list) or not all(isinstance(t, dict) for t in tolerations):
        raise SettingsError("SHOAL_WORKER_TOLERATIONS_FILE: expected a JSON list of objects")
    kube_options = _json_file(env, "SHOAL_KUBE_OPTIONS_FILE")
    if kube_options is not None and not isinstance(kube_options, dict):
        raise SettingsError("SHOAL_KUBE_OPTIONS_FILE: expected a JSON object")
    duration = env.get("SHOAL_LEADER_ELECTION_DURATION_SECONDS", "15")
    try:
        lease_duration_s = int(duration)
    except ValueError:
        raise SettingsError(f"SHOAL_LEADER_ELECTION_DURATION_SECONDS: {duration!r}") from None
    return ServeSettings(
        tokens_file=env.get("SHOAL_API_TOKENS_FILE") or None,
        policy_file=env.get("SHOAL_POLICY_FILE") or None,
        jobs_namespace=env.get("SHOAL_JOBS_NAMESPACE") or "shoal-jobs",
        scheduler_name=env.get("SHOAL_SCHEDULER_NAME") or "shoal",
        reserve_image=env.get("SHOAL_RESERVE_IMAGE") or None,
        worker_security_context=sc,
        worker_tolerations=tuple(tolerations),
        leader_election=_flag(env, "SHOAL_LEADER_ELECTION", False),
        leader_namespace=env.get("SHOAL_LEADER_ELECTION_NAMESPACE") or "shoal-system",
        lease_name=env.get("SHOAL_LEADER_ELECTION_LEASE") or "shoal-scheduler",
        lease_duration_s=lease_duration_s,
        pod_name=env.get("SHOAL_POD_NAME") or None,
        # SHOAL_KUBE_HOST is what `shoal reserve` reads; accept it here too.
        kube_api_url=env.get("SHOAL_KUBE_API_URL") or env.get("SHOAL_KUBE_HOST") or None,
        kubeconfig=env.get("KUBECONFIG") or None,
        kube_options=kube_options,
        worker_api_url=env.get("SHOAL_WORKER_API_URL") or None,
    )


def load_policy(
    path: str | None,
    *,
    policy: str,
    min_runtime_s: float,
    interval_s: float,
    worker_tolerations: Sequence[Mapping[str, Any]] = (),
) -> Policy:
    """The policy file's values over the flags' (the chart renders both from the same
    values, so they agree; without a file the flags are all there is), and the taints
    the worker pods tolerate (placement honours them)."""
    data: dict[str, Any] = {}
    if path:
        try:
            loaded = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as e:
            raise SettingsError(f"SHOAL_POLICY_FILE={path}: {e}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise SettingsError(f"SHOAL_POLICY_FILE={path}: expected a mapping")
        data = loaded or {}
        unknown = sorted(set(data) - POLICY_KEYS)
        if unknown:
            raise SettingsError(
                f"SHOAL_POLICY_FILE={path}: unknown key(s) {', '.join(unknown)} "
                f"(known: {', '.join(sorted(POLICY_KEYS))})"
            )
    try:
        core = model.Config(
            policy=model.Policy(str(data.get("policy", policy))),
            min_runtime_s=float(data.get("minRuntimeSeconds", min_runtime_s)),
            starvation_s=float(data.get("starvationSeconds", model.Config().starvation_s)),
            preemption=_as_bool(data.get("preemption", True)),
            resize_interval_s=float(
                data.get("resizeIntervalSeconds", model.Config().resize_interval_s)
            ),
            worker_tolerations=eligible.tolerations_of(worker_tolerations),
        )
        interval = float(data.get("intervalSeconds", interval_s))
    except (TypeError, ValueError) as e:
        raise SettingsError(f"policy: {e}") from None
    if min(core.min_runtime_s, core.starvation_s, core.resize_interval_s) < 0 or interval <= 0:
        raise SettingsError("policy: times must be >= 0 and intervalSeconds > 0")
    return Policy(core, interval, _allowed(data.get("allowed")))


def _allowed(data: Any) -> Allowances | None:
    """The policy file's `allowed` (the chart's admission.allowed); a bad one stops the
    service with the field that is wrong, rather than admitting what it meant to refuse."""
    if data is None:
        return None
    try:
        return Allowances.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in ("allowed", *first["loc"]))
        raise SettingsError(f"policy: {where}: {first['msg']}") from None


def _as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in TRUE or text in FALSE:
        return text in TRUE
    raise ValueError(f"preemption: expected true or false, got {value!r}")
