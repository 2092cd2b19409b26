"""The chart, the CRDs and the example manifests on a real kube-apiserver."""

from __future__ import annotations

import pytest

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
