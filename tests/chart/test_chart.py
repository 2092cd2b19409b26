"""Chart checks: `helm lint`, `helm template` with default and non-default values, every
rendered object validated strictly with kubernetes-validate, and unit assertions on the
rendered YAML (security contexts, env, leader election); RBAC verbs in test_rbac_chart.py."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import kubernetes_validate
import pytest

from scheduler.backends.kubernetes.config import KubeConfig, restricted_security_context
from scheduler.backends.kubernetes.runtime import with_options

from .conftest import CHART, Render, by_kind, role_rules, run_helm

# The oldest and newest Kubernetes the chart is tested on (kubernetes-validate has both).
K8S_VERSIONS = ("1.35.0", "1.37.0")
# The one kind kubernetes-validate has no schema for (a prometheus-operator CRD).
UNKNOWN_KINDS = {"ServiceMonitor", "PodMonitor"}
POSTGRES = "database.postgres.url=postgresql+psycopg://shoal:pw@db.example:5432/shoal"

VARIANTS = {
    "default": (),
    "postgres-ha": ("database.type=postgres", POSTGRES, "api.replicas=3", "api.workers=4"),
    "servicemonitor": ("serviceMonitor.enabled=true",),
    "servicemonitor-postgres": ("serviceMonitor.enabled=true", "database.type=postgres", POSTGRES),
    "existing-secrets": (
        "auth.existingSecret=my-tokens",
        "database.type=postgres",
        "database.postgres.existingSecret=my-db",
        "rbac.foreignPods=false",
    ),
    "tokens-and-policy": (
        "auth.tokens[0].token=0123456789abcdef0123",
        "auth.tokens[0].user=alice",
        "auth.tokens[0].queues[0]=vision",
        "policy.placement=binpack",
        "jobsNamespace.create=false",
    ),
}


def _env(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The scheduler's container (the one pod of both on SQLite)."""
    container = by_kind(docs, "Deployment", "shoal")["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_lint(helm: str) -> None:
    out = run_helm(helm, "lint", "--strict", str(CHART))
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("k8s_version", K8S_VERSIONS)
@pytest.mark.parametrize("values", VARIANTS.values(), ids=VARIANTS.keys())
def test_rendered_objects_are_valid(
    render: Render, values: tuple[str, ...], k8s_version: str
) -> None:
    docs = render(*values, crds=True)
    assert docs
    for doc in docs:
        if doc["kind"] in UNKNOWN_KINDS:
            continue
        kubernetes_validate.validate(doc, k8s_version, strict=True)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (("replicaCount=2",), "needs database.type=postgres"),
        (("database.type=postgres",), "needs database.postgres.url"),
        (("policy.placement=random",), "placement"),
        (("auth.tokens[0].token=short", "auth.tokens[0].user=a"), "token"),
        (("kubeClient.burst=0",), "burst"),
    ],
    ids=["ha-needs-postgres", "postgres-needs-url", "bad-policy", "short-token", "zero-burst"],
)
def test_bad_values_are_refused(helm: str, values: tuple[str, ...], message: str) -> None:
    args = [a for v in values for a in ("--set", v)]
    out = run_helm(helm, "template", "shoal", str(CHART), *args)
    assert out.returncode != 0
    assert message in out.stderr


def test_secure_defaults(render: Render) -> None:
    docs = render()
    pod = by_kind(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = pod["containers"][0]["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    # SQLite by default: on a PVC, one replica, Recreate so two never share the file.
    assert "persistentVolumeClaim" in volumes[mounts["/var/lib/shoal"]]
    assert by_kind(docs, "Deployment")["spec"]["strategy"]["type"] == "Recreate"


def test_worker_security_context_reaches_the_service(render: Render) -> None:
    docs = render("workerSecurityContext.runAsNonRoot=true")
    cm = by_kind(docs, "ConfigMap")
    worker = json.loads(cm["data"]["worker-security-context.json"])
    assert worker["runAsNonRoot"] is True
    assert worker["allowPrivilegeEscalation"] is False
    assert worker["capabilities"] == {"drop": ["ALL"]}
    env = _env(docs)
    assert env["SHOAL_WORKER_SECURITY_CONTEXT_FILE"].startswith("/etc/shoal/policy/")
    assert env["SHOAL_POLICY_FILE"] == "/etc/shoal/policy/policy.yaml"
    assert "policy: fgd" in cm["data"]["policy.yaml"]


def test_leader_election_with_replicas(render: Render) -> None:
    assert _env(render())["SHOAL_LEADER_ELECTION"] == "false"
    docs = render("database.type=postgres", POSTGRES)  # a leading scheduler and a standby
    env = _env(docs)
    assert env["SHOAL_LEADER_ELECTION"] == "true"
    assert env["SHOAL_POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    deployment = by_kind(docs, "Deployment", "shoal")
    assert deployment["spec"]["replicas"] == 2
    assert "strategy" not in deployment["spec"]  # RollingUpdate: the Lease hands over


def test_database_url_comes_from_a_secret(render: Render) -> None:
    docs = render("database.type=postgres", POSTGRES)
    ref = _env(docs)["SHOAL_DATABASE_URL"]["secretKeyRef"]
    secret = by_kind(docs, "Secret", ref["name"])
    assert secret["stringData"][ref["key"]].startswith("postgresql+psycopg://")
    assert not [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    docs = render("database.type=postgres", "database.postgres.existingSecret=my-db")
    assert _env(docs)["SHOAL_DATABASE_URL"]["secretKeyRef"]["name"] == "my-db"
    assert not [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == "my-db"]


def test_tokens_secret_and_existing_secret(render: Render) -> None:
    docs = render("auth.tokens[0].token=0123456789abcdef0123", "auth.tokens[0].user=alice")
    secret = by_kind(docs, "Secret", "shoal-auth")
    assert len(secret["stringData"]["admin-token"]) == 40
    assert '0123456789abcdef0123: {user: "alice"' in secret["stringData"]["tokens.yaml"]
    docs = render("auth.existingSecret=my-tokens")
    assert not [d for d in docs if d["kind"] == "Secret"]
    pod = by_kind(docs, "Deployment")["spec"]["template"]["spec"]
    tokens = next(v for v in pod["volumes"] if v["name"] == "tokens")
    assert tokens["secret"]["secretName"] == "my-tokens"


def test_service_monitor(render: Render) -> None:
    assert not [d for d in render() if d["kind"] == "ServiceMonitor"]
    monitor = by_kind(render("serviceMonitor.enabled=true"), "ServiceMonitor")
    endpoint = monitor["spec"]["endpoints"][0]
    assert endpoint["path"] == "/metrics" and endpoint["port"] == "http"
    assert endpoint["bearerTokenSecret"]["name"] == "shoal-auth"


def test_helm_test_pod_checks_readyz_and_auth(render: Render) -> None:
    pod = by_kind(render(), "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    script = pod["spec"]["containers"][0]["command"][-1]
    assert "/readyz" in script and "Bearer" in script and "401" in script
    assert pod["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


def test_uninstall_keeps_the_jobs_namespace(render: Render) -> None:
    ns = by_kind(render(), "Namespace", "shoal-jobs")
    assert ns["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_reservation_pods_options_reach_the_service(render: Render) -> None:
    docs = render("imagePullSecrets[0].name=regcred", "rbac.foreignPods=false")
    cm = by_kind(docs, "ConfigMap", "shoal-policy")
    opts = json.loads(cm["data"]["kube-options.json"])
    assert opts["reserveImagePullSecrets"] == ["regcred"]
    assert opts["foreignNamespaces"] == ["shoal-jobs"]  # only where RBAC allows writes
    assert opts["reservePriorityClass"] == "shoal-gpu-reservation"
    assert opts["reserveMemoryMiB"] >= 24 and opts["reservationUuidTimeoutSeconds"] > 0
    pc = by_kind(docs, "PriorityClass", "shoal-gpu-reservation")
    assert pc["value"] == 1_000_000_000 and pc["globalDefault"] is False
    assert _env(docs)["SHOAL_KUBE_OPTIONS_FILE"] == "/etc/shoal/policy/kube-options.json"
    assert "foreignNamespaces" not in json.loads(
        by_kind(render(), "ConfigMap", "shoal-policy")["data"]["kube-options.json"]
    )
    docs = render("reservations.priorityClass.create=false", "reservations.priorityClass.name=")
    assert not [d for d in docs if d["kind"] == "PriorityClass"]


def test_api_client_knobs_reach_the_backend_config(render: Render) -> None:
    def config(*values: str) -> KubeConfig:
        cm = by_kind(render(*values), "ConfigMap", "shoal-policy")
        return with_options(KubeConfig(), json.loads(cm["data"]["kube-options.json"]))

    default = config()
    assert (default.qps, default.burst, default.bind_workers) == (200, 400, 48)
    tuned = config("kubeClient.qps=50", "kubeClient.burst=80", "kubeClient.bindWorkers=0")
    assert (tuned.qps, tuned.burst, tuned.bind_workers) == (50, 80, 0)
    # Issue 28: DRA and the gang objects, on by default; classes as the driver names them.
    assert (default.dra, default.workloads) == (True, True)
    assert (default.dra_gpu_class, default.dra_mig_class) == ("gpu.nvidia.com", "mig.nvidia.com")
    off = config("dra.enabled=false", "workloads.enabled=false", "dra.gpuClass=gpu.example.com")
    assert (off.dra, off.workloads, off.dra_gpu_class) == (False, False, "gpu.example.com")
    # Issue 36: Shoal allocates DRA devices on its own node pool only, by default.
    assert (default.pool_key, default.pool_value) == ("shoal.dev/pool", "shoal")
    assert default.dra_outside_pool is False
    pool = config("nodePool.key=example.com/gpus", "nodePool.value=train", "dra.outsidePool=true")
    assert (pool.pool_key, pool.pool_value, pool.dra_outside_pool) == (
        "example.com/gpus",
        "train",
        True,
    )


@pytest.mark.parametrize("name", ["shoal", "shoal-api"])  # the scheduler's, the API's
def test_replicas_get_a_disruption_budget_and_spread(render: Render, name: str) -> None:
    assert not [d for d in render() if d["kind"] == "PodDisruptionBudget"]
    docs = render("database.type=postgres", POSTGRES)
    pdb = by_kind(docs, "PodDisruptionBudget", name)
    assert pdb["spec"]["maxUnavailable"] == 1
    deployment = by_kind(docs, "Deployment", name)
    assert deployment["spec"]["selector"]["matchLabels"] == pdb["spec"]["selector"]["matchLabels"]
    spec = deployment["spec"]["template"]["spec"]
    term = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert (
        term[0]["podAffinityTerm"]["labelSelector"]["matchLabels"]
        == (pdb["spec"]["selector"]["matchLabels"])
    )


def test_reservation_pods_get_a_namespace_of_their_own(render: Render) -> None:
    docs = render()
    ns = by_kind(docs, "Namespace", "shoal-reservations")
    assert ns["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    opts = json.loads(by_kind(docs, "ConfigMap", "shoal-policy")["data"]["kube-options.json"])
    assert opts["reserveNamespace"] == "shoal-reservations"
    for kind in ("ServiceAccount", "Role", "RoleBinding"):
        assert by_kind(docs, kind, "shoal-reserve")["metadata"]["namespace"] == (
            "shoal-reservations"
        )
    assert by_kind(docs, "RoleBinding", "shoal-reserve")["subjects"][0]["namespace"] == (
        "shoal-reservations"
    )
    role = by_kind(docs, "Role", "shoal-reservations")
    assert role["metadata"]["namespace"] == "shoal-reservations"
    # Reservation pods and nominees; a nominee's status names the node kept for a preemptor.
    assert role_rules(docs, "Role", "shoal-reservations") == {
        ("", "pods"): {"create", "delete"},
        ("", "pods/status"): {"patch"},
    }
    # Named empty: the jobs namespace, as before, and no second Role.
    docs = render("reservations.namespace.name=")
    opts = json.loads(by_kind(docs, "ConfigMap", "shoal-policy")["data"]["kube-options.json"])
    assert opts["reserveNamespace"] == "shoal-jobs"
    assert by_kind(docs, "Role", "shoal-reserve")["metadata"]["namespace"] == "shoal-jobs"
    assert not [d for d in docs if d["metadata"]["name"] == "shoal-reservations"]


def test_worker_restricted_priority_class_and_shm_reach_the_backend_config(render: Render) -> None:
    """Issue 24 item 6: the chart's worker options become the backend's KubeConfig."""

    def config(*values: str) -> KubeConfig:
        cm = by_kind(render(*values), "ConfigMap", "shoal-policy")
        cfg = with_options(KubeConfig(), json.loads(cm["data"]["kube-options.json"]))
        sc = json.loads(cm["data"]["worker-security-context.json"])
        return replace(cfg, security_context=sc)

    default = config()
    assert "runAsNonRoot" not in default.security_context
    assert default.priority_class is None and default.shm_mib is None
    tuned = config(
        "workerRestricted.enabled=true",
        "workerPriorityClassName=training",
        "workerShmMiB=4096",
    )
    assert tuned.security_context == restricted_security_context(1000)
    assert (tuned.priority_class, tuned.shm_mib) == ("training", 4096)
    own_user = config("workerRestricted.enabled=true", "workerRestricted.runAsUser=null")
    assert own_user.security_context == restricted_security_context(None)
    assert config("workerShmMiB=0").shm_mib == 0
    # Issue 24 item 4: the workers' RuntimeClass (reservations' too, unless their own).
    gpu_runtime = config(
        "workerRuntimeClassName=nvidia", "reservations.shareCdiKind=nvidia.com/gpu"
    )
    assert (gpu_runtime.runtime_class, gpu_runtime.reservation_runtime_class) == ("nvidia",) * 2
    assert gpu_runtime.share_cdi_kind == "nvidia.com/gpu" and default.runtime_class is None
