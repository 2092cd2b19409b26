"""The chart, the CRDs and the example manifests on a real kube-apiserver."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace

import pytest
from support.builders import launch_request

from scheduler.backends.kubernetes.config import KubeConfig, restricted_security_context
from scheduler.backends.kubernetes.pods import workerpod

from .conftest import JOBS_NS, RELEASE_NS, ROOT, ControlPlane, eventually

pytestmark = pytest.mark.cluster


def test_the_chart_installs_and_its_rbac_is_what_shoal_gets(cluster: ControlPlane) -> None:
    # `helm install` ran (the `chart` fixture); what it made is on the server.
    assert (
        cluster.core.read_namespace(JOBS_NS).metadata.labels["pod-security.kubernetes.io/enforce"]
        == "baseline"
    )
    assert cluster.core.read_namespaced_service_account("shoal", RELEASE_NS)
    sa = f"system:serviceaccount:{RELEASE_NS}:shoal"

    def can(verb: str, resource: str, ns: str | None = None) -> bool:
        args = ["auth", "can-i", verb, resource, "--as", sa]
        args += ["-n", ns] if ns else ["--all-namespaces"]
        return cluster.kubectl(*args, check=False).stdout.strip() == "yes"

    assert can("list", "nodes") and can("watch", "pods")
    assert can("create", "pods/binding", JOBS_NS)
    assert can("create", "pods", JOBS_NS) and can("create", "services", JOBS_NS)
    assert can("patch", "trainingjobs.shoal.dev/status", JOBS_NS)
    assert not can("delete", "nodes") and not can("create", "secrets", JOBS_NS)


def test_crds_and_every_example_apply_and_print_their_columns(cluster: ControlPlane) -> None:
    cluster.kubectl("apply", "-f", str(ROOT / "deploy" / "crds"))
    # Queues first (cluster-scoped), then the TrainingJobs that name them.
    cluster.kubectl("apply", "-f", str(ROOT / "deploy" / "examples" / "queues.yaml"))
    cluster.kubectl("apply", "-f", str(ROOT / "deploy" / "examples"))
    tjs = cluster.kubectl("get", "tj", "-n", JOBS_NS).stdout
    header = tjs.splitlines()[0].split()
    assert header[0] == "NAME" and len(header) > 2, tjs
    assert "resnet50-ddp" in tjs and "finetune-quarter" in tjs
    row = next(line for line in tjs.splitlines() if line.startswith("resnet50-ddp"))
    assert "vision" in row.split(), tjs  # the queue column is filled
    queues = cluster.kubectl("get", "queues").stdout
    assert {"research", "vision", "nlp"} <= {line.split()[0] for line in queues.splitlines()[1:]}
    assert len(queues.splitlines()[0].split()) > 2, queues


@pytest.mark.parametrize(
    "spec, field",
    [
        ({"queue": "vision", "image": "x", "workers": 0, "gpu": 1}, "workers"),
        ({"queue": "vision", "image": "x", "workers": 5000}, "workers"),
        ({"queue": "vision", "image": "x", "workers": {"min": 2}}, "workers"),
        ({"queue": "vision", "image": "x", "workers": {"min": 0, "max": 2}}, "workers"),
        # min > max and a count as text pass the schema: Shoal's controller marks them
        # Invalid (tests/crd, tests/controller), as it does every check a schema cannot make.
        ({"queue": "vision", "image": "x", "framework": "caffe"}, "framework"),
        ({"image": "x", "gpu": 1}, "queue"),
    ],
)
def test_the_crd_schema_refuses_invalid_trainingjobs(
    cluster: ControlPlane, spec: dict[str, object], field: str
) -> None:
    manifest = {
        "apiVersion": "shoal.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "bad", "namespace": JOBS_NS},
        "spec": spec,
    }
    import json

    proc = cluster.kubectl("create", "-f", "-", input=json.dumps(manifest), check=False)
    assert proc.returncode != 0 and field in proc.stderr, proc.stderr
    assert "bad" not in cluster.kubectl("get", "tj", "-n", JOBS_NS).stdout


def test_unknown_fields_are_pruned(cluster: ControlPlane) -> None:
    import json

    manifest = {
        "apiVersion": "shoal.dev/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": "pruned"},
        "spec": {"guaranteed": {"total": 1}, "weight": 1},
    }
    cluster.kubectl("create", "-f", "-", input=json.dumps(manifest))
    patched = cluster.kubectl(
        "patch", "queue", "pruned", "--type", "merge", "-p",
        json.dumps({"spec": {"colour": "blue"}}), check=False,
    )  # fmt: skip
    got = eventually(
        lambda: cluster.custom.get_cluster_custom_object(
            "shoal.dev", "v1alpha1", "queues", "pruned"
        )
    )
    assert "colour" not in got["spec"], (patched.stderr, got)


def test_a_trainingjob_spec_is_immutable_and_conditions_are_metav1(
    cluster: ControlPlane,
) -> None:
    """The CRD's CEL rule refuses a spec edit at the API server; metadata stays editable;
    the status schema refuses a condition without metav1.Condition's required fields."""
    import json

    cluster.kubectl("apply", "-f", str(ROOT / "deploy" / "crds"))
    manifest = {
        "apiVersion": "shoal.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "frozen", "namespace": JOBS_NS},
        "spec": {"queue": "vision", "image": "x:1", "workers": 2, "gpu": 1},
    }
    cluster.kubectl("create", "-f", "-", input=json.dumps(manifest))
    edit = cluster.kubectl(
        "patch", "tj", "frozen", "-n", JOBS_NS, "--type", "merge",
        "-p", json.dumps({"spec": {"workers": 3}}), check=False,
    )  # fmt: skip
    assert edit.returncode != 0 and "spec is immutable" in edit.stderr, edit.stderr
    assert cluster.tj("frozen")["spec"]["workers"] == 2
    cluster.kubectl("label", "tj", "frozen", "-n", JOBS_NS, "team=a")  # metadata: fine
    bad = {"status": {"conditions": [{"type": "Valid", "status": "True"}]}}
    refused = cluster.kubectl(
        "patch", "tj", "frozen", "-n", JOBS_NS, "--subresource", "status", "--type", "merge",
        "-p", json.dumps(bad), check=False,
    )  # fmt: skip
    assert refused.returncode != 0 and "reason" in refused.stderr, refused.stderr
    good = {
        "status": {
            "conditions": [
                {
                    "type": "Valid",
                    "status": "True",
                    "reason": "Accepted",
                    "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                    "observedGeneration": 1,
                }
            ]
        }
    }
    cluster.kubectl(
        "patch", "tj", "frozen", "-n", JOBS_NS, "--subresource", "status", "--type", "merge",
        "-p", json.dumps(good),
    )  # fmt: skip
    cluster.kubectl("delete", "tj", "frozen", "-n", JOBS_NS)


def test_the_restricted_option_passes_pod_security_restricted_with_priority_and_shm(
    cluster: ControlPlane,
) -> None:
    """Issue 24 item 6, on the real API server's admission: in a namespace enforcing Pod
    Security `restricted`, the default (baseline) worker is refused for `runAsNonRoot`;
    with the chart's `workerRestricted` context, a GPU worker with its /dev/shm emptyDir
    (medium Memory) and its PriorityClass (resolved by the Priority plugin) is admitted,
    and so is an MPI worker with its hostfile ConfigMap volume."""
    ns = "shoal-restricted"
    cluster.kubectl("create", "namespace", ns, check=False)
    cluster.kubectl(
        "label", "--overwrite", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted"
    )
    cluster.kubectl("create", "priorityclass", "shoal-test-training", "--value=1000", check=False)

    def dry_run(
        cfg: KubeConfig, framework: str = "pytorch", gpu: float = 2
    ) -> subprocess.CompletedProcess[str]:
        req = launch_request("r-job", framework=framework, gpu=gpu)
        (p,) = req.placements
        pod = workerpod.worker_pod(req, p, "r-job", ns, ["r-job-a0-w0"], cfg)
        return cluster.kubectl(
            "create",
            "--dry-run=server",
            "-o",
            "json",
            "-f",
            "-",
            input=json.dumps(pod),
            check=False,
        )

    refused = dry_run(KubeConfig(namespace=ns))
    assert refused.returncode != 0 and "violates PodSecurity" in refused.stderr, refused.stderr
    assert "runAsNonRoot" in refused.stderr, refused.stderr
    cfg = KubeConfig(
        namespace=ns,
        security_context=restricted_security_context(1000),
        priority_class="shoal-test-training",
        shm_mib=4096,
    )
    admitted = dry_run(cfg)
    assert admitted.returncode == 0, admitted.stderr
    got = json.loads(admitted.stdout)
    assert got["spec"]["priority"] == 1000  # the PriorityClass resolved
    (shm,) = [v for v in got["spec"]["volumes"] if v["name"] == "dshm"]
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "4Gi"}
    (mount,) = [m for m in got["spec"]["containers"][0]["volumeMounts"] if m["name"] == "dshm"]
    assert mount["mountPath"] == "/dev/shm"
    assert got["spec"]["containers"][0]["securityContext"]["runAsUser"] == 1000
    mpi = dry_run(cfg, framework="mpi")
    assert mpi.returncode == 0, mpi.stderr
    # A reservation's share: its check-in init container passes `restricted` too.
    share = dry_run(cfg, gpu=0.5)
    assert share.returncode == 0, share.stderr
    (check,) = json.loads(share.stdout)["spec"]["initContainers"]
    assert check["name"] == "share-check" and check["securityContext"]["runAsUser"] == 1000
    # A job's own priorityClassName (a TrainingJob field) wins over the chart's default.
    cluster.kubectl("create", "priorityclass", "shoal-test-urgent", "--value=5000", check=False)
    req = launch_request("r-own", gpu=1)
    req = replace(
        req, spec=req.spec.model_copy(update={"priority_class_name": "shoal-test-urgent"})
    )
    (p,) = req.placements
    own = workerpod.worker_pod(req, p, "r-own", ns, ["r-own-a0-w0"], cfg)
    proc = cluster.kubectl(
        "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(own), check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["spec"]["priority"] == 5000
    # A PriorityClass that does not exist is refused at admission: the name reaches the pod.
    missing = dry_run(
        KubeConfig(namespace=ns, security_context=cfg.security_context, priority_class="nope")
    )
    assert missing.returncode != 0 and "nope" in missing.stderr, missing.stderr


def test_a_trainingjob_keeps_its_priority_class_name(cluster: ControlPlane) -> None:
    """The CRD carries `priorityClassName` (not pruned) and its pattern refuses a bad one."""
    cluster.kubectl("apply", "-f", str(ROOT / "deploy" / "crds"))

    def tj(name: str, pc: str) -> subprocess.CompletedProcess[str]:
        manifest = {
            "apiVersion": "shoal.dev/v1alpha1",
            "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": JOBS_NS},
            "spec": {"queue": "vision", "image": "x", "gpu": 1, "priorityClassName": pc},
        }
        return cluster.kubectl("create", "-f", "-", input=json.dumps(manifest), check=False)

    assert tj("pc-ok", "shoal-test-urgent").returncode == 0
    got = cluster.custom.get_namespaced_custom_object(
        "shoal.dev", "v1alpha1", JOBS_NS, "trainingjobs", "pc-ok"
    )
    assert got["spec"]["priorityClassName"] == "shoal-test-urgent"
    bad = tj("pc-bad", "Not_A_Name")
    assert bad.returncode != 0 and "priorityClassName" in bad.stderr, bad.stderr
    cluster.kubectl("delete", "tj", "pc-ok", "-n", JOBS_NS, "--wait=false")
