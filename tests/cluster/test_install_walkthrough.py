"""docs/install.md's walkthrough, and the README's `helm install` line, run as they are
written, with the real helm and kubectl, in the order a user types them (issue 35).

The walkthrough installs, uninstalls, deletes the jobs namespace and the CRDs: it gets a
control plane of its own (scripts/controlplane.sh start under its own TMPDIR), so that it
never takes the session's release (the `chart` fixture) away from the other cluster
tests. kubectl and helm reach it as a user's shell does: `eval "$(scripts/controlplane.sh
env)"` sets KUBECONFIG, and `.tools/bin` is on PATH (install.md's `export PATH=...`).
kwok runs no containers: the chart's own pod never runs, so the steps that need Shoal as
the controller have it run on this host (localshoal.launch) with the ServiceAccount token
of the release the doc's `helm install` made, i.e. through exactly its RBAC."""

from __future__ import annotations

import base64
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from api.auth import Role, TokenTable
from scheduler.backends.kubernetes.names import job_base
from scheduler.store.db import open_database

from .conftest import (
    BINARIES,
    JOBS_NS,
    RELEASE_NS,
    RESERVATIONS_NS,
    ROOT,
    SCRIPT,
    ControlPlane,
    eventually,
    token_kubeconfig,
    tool,
)
from .localshoal import chart_env, launch

pytestmark = pytest.mark.cluster

INSTALL_MD = ROOT / "docs" / "install.md"
TOOLS = str(ROOT / ".tools" / "bin")
UUID = "GPU-0c1d2e3f-4a5b-4c6d-8e9f-a0b1c2d3e4f5"


def documented(command: str, doc: Path = INSTALL_MD) -> str:
    """`command` as the doc writes it (whitespace folded): a doc that changes it fails
    here rather than leaving this test running something the doc no longer says."""
    assert " ".join(command.split()) in " ".join(doc.read_text().split()), (
        f"{doc.name} no longer says: {command}"
    )
    return command


def code_block(containing: str) -> str:
    """install.md's fenced shell block that contains `containing`, as written."""
    for block in re.findall(r"```sh\n(.*?)```", INSTALL_MD.read_text(), flags=re.S):
        if containing in block:
            return str(block)
    raise AssertionError(f"no sh block in install.md contains {containing!r}")


@dataclass
class Shell:
    """A user's shell in the repository root, on the walkthrough's control plane."""

    env: dict[str, str]
    cp: ControlPlane

    def run(
        self, command: str, *, ok: bool = True, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["bash", "-ec", command],
            cwd=ROOT,
            env=env or self.env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        if ok:
            assert proc.returncode == 0, (
                f"{command}\n-> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def gone(self, *objects: str) -> None:
        """Wait until each `kind/name` is gone; past the deadline, say what still holds it."""
        for obj in objects:
            try:
                eventually(
                    lambda obj=obj: "NotFound" in self.run(f"kubectl get {obj}", ok=False).stderr,
                    timeout=180,
                    what=f"{obj} gone",
                )
            except AssertionError as exc:
                left = self.run(f"kubectl get {obj} -o yaml", ok=False).stdout
                log = (self.cp.dir / "kube-apiserver.log").read_text(errors="replace")
                said = [line for line in log.splitlines() if obj.split("/")[-1] in line]
                said_here = "\n".join(said[-20:])
                raise AssertionError(f"{exc}\n{left}\napiserver:\n{said_here}") from exc


def _unavailable(why: str) -> None:
    if os.environ.get("SHOAL_REQUIRE_CLUSTER") == "1":
        pytest.fail(f"SHOAL_REQUIRE_CLUSTER=1 but {why}", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="module")
def shell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shell]:
    """A control plane of the walkthrough's own, and a shell that did
    `eval "$(scripts/controlplane.sh env)"` and `export PATH=$PWD/.tools/bin:$PATH`."""
    if not tool("kubectl") or not tool("helm"):
        _unavailable("kubectl/helm not found (scripts/setup.sh puts them in .tools/bin)")
    bin_dir = Path(
        subprocess.run([str(SCRIPT), "bin"], capture_output=True, text=True).stdout.strip()
    )
    absent = [b for b in BINARIES if not (bin_dir / b).exists()]
    if absent:
        _unavailable(f"{', '.join(absent)} not built in {bin_dir} (scripts/controlplane.sh build)")
    tmp = tmp_path_factory.mktemp("walkthrough")
    base = {
        k: v
        for k, v in os.environ.items()
        if k != "KUBECONFIG" and not k.startswith("SHOAL_CONTROLPLANE_")
    }
    base["TMPDIR"] = str(tmp)  # controlplane.sh keeps which one runs under $TMPDIR
    started = subprocess.run(
        [str(SCRIPT), "start"], capture_output=True, text=True, env=base, timeout=300
    )
    if started.returncode != 0:
        pytest.fail(f"scripts/controlplane.sh start failed:\n{started.stderr}", pytrace=False)
    cp_dir = Path(re.findall(r"export SHOAL_CONTROLPLANE_DIR=(\S+)", started.stdout)[0])
    try:
        env = {**base, "PATH": f"{TOOLS}:{base.get('PATH', '')}"}
        # kubernetes.md: `eval "$(scripts/controlplane.sh env)"`, then kubectl by hand.
        command = documented(
            'eval "$(scripts/controlplane.sh env)"', ROOT / "docs" / "kubernetes.md"
        )
        out = Shell(env, ControlPlane(cp_dir, cp_dir / "admin.kubeconfig")).run(
            f'{command}\necho "KUBECONFIG=$KUBECONFIG"\nkubectl get namespace default -o name'
        )
        kubeconfig = re.findall(r"^KUBECONFIG=(.*)$", out.stdout, flags=re.M)[0]
        assert kubeconfig == str(cp_dir / "admin.kubeconfig"), out.stdout
        assert "namespace/default" in out.stdout, out.stdout
        yield Shell({**env, "KUBECONFIG": kubeconfig}, ControlPlane(cp_dir, Path(kubeconfig)))
    finally:
        subprocess.run(
            [str(SCRIPT), "stop"],
            env={**base, "SHOAL_CONTROLPLANE_DIR": str(cp_dir)},
            capture_output=True,
            timeout=120,
        )


def _secret_value(sh: Shell, name: str, key: str, ns: str = RELEASE_NS) -> str:
    got = sh.run(f"kubectl -n {ns} get secret {name} -o jsonpath='{{.data.{key}}}'").stdout
    return base64.b64decode(got).decode()


def _plain_manifests(sh: Shell) -> None:
    """install.md, "Without Helm": the block as written, then what it promised."""
    block = code_block("kubectl apply -f deploy/shoal.yaml")
    for command in (
        "kubectl create namespace shoal-system",
        "kubectl -n shoal-system create secret generic shoal-auth"
        " --from-literal=admin-token=$TOKEN"
        " --from-literal=tokens.yaml=\"$TOKEN: {user: admin, role: admin, queues: ['*']}\"",
        "kubectl apply -f deploy/shoal.yaml",
    ):
        assert " ".join(command.split()) in " ".join(block.replace("\\\n", " ").split())
    sh.run(block)
    admin = _secret_value(sh, "shoal-auth", "admin-token")
    tokens = TokenTable.load(path=None, inline=_secret_value(sh, "shoal-auth", r"tokens\.yaml"))
    principal = tokens.lookup(admin)  # the table Shoal reads authenticates the admin token
    assert principal and principal.role is Role.ADMIN and principal.queues == {"*"}, principal
    deploy = yaml.safe_load(sh.run("kubectl -n shoal-system get deploy shoal -o yaml").stdout)
    secrets = [v["secret"]["secretName"] for v in deploy["spec"]["template"]["spec"]["volumes"]
               if "secret" in v]  # fmt: skip
    assert secrets == ["shoal-auth"], secrets  # tokens from the Secret made above
    crds = sh.run("kubectl get crd -o name").stdout
    assert "trainingjobs.shoal.dev" in crds and "queues.shoal.dev" in crds, crds
    for ns in (JOBS_NS, RESERVATIONS_NS):
        sh.run(f"kubectl get namespace {ns}")
    # Undone for the Helm path (no kubelet: the PVC protection finalizer stays, lift it).
    # The CRDs last, once the namespaces are gone: CI saw the API server's CRD finalizer
    # stall for minutes when they went together.
    rest = [d for d in yaml.safe_load_all((ROOT / "deploy" / "shoal.yaml").read_text())
            if d and d["kind"] != "CustomResourceDefinition"]  # fmt: skip
    (tmp := Path(sh.env["TMPDIR"]) / "shoal-no-crds.yaml").write_text(yaml.safe_dump_all(rest))
    sh.run(f"kubectl delete -f {tmp} --wait=false")
    sh.run("kubectl -n shoal-system patch pvc shoal-data --type merge "
           "-p '{\"metadata\":{\"finalizers\":null}}'", ok=False)  # fmt: skip
    sh.run("kubectl delete namespace shoal-system --wait=false")
    sh.gone(*(f"namespace/{ns}" for ns in (RELEASE_NS, JOBS_NS, RESERVATIONS_NS)))
    sh.run("kubectl delete crd trainingjobs.shoal.dev queues.shoal.dev --wait=false")
    sh.gone("crd/trainingjobs.shoal.dev", "crd/queues.shoal.dev")


def _readme_install(sh: Shell) -> None:
    """The README's line: helm (from .tools/bin, not on PATH before) installs the chart."""
    command = documented(
        "PATH=$PWD/.tools/bin:$PATH helm install shoal helm/shoal", ROOT / "README.md"
    )
    path = ":".join(p for p in sh.env["PATH"].split(":") if p != TOOLS)
    sh.run(command, env={**sh.env, "PATH": path})
    status = sh.run("helm status shoal -o json").stdout
    assert '"status":"deployed"' in status.replace(" ", ""), status
    sh.run("kubectl get deploy shoal -o name")  # in the current namespace, `default`
    # Undone for install.md's release in shoal-system: the kept namespaces go too.
    sh.run("helm uninstall shoal")
    sh.run(f"kubectl delete namespace {JOBS_NS} {RESERVATIONS_NS} --wait=false")
    sh.gone(f"namespace/{JOBS_NS}", f"namespace/{RESERVATIONS_NS}")


def test_install_md_walkthrough_runs_as_written(shell: Shell, tmp_path: Path) -> None:
    sh, cp = shell, shell.cp
    # The cluster: two nodes with GPUs, labelled as the device plugin and GFD would.
    cp.add_node("kw-w1", gpus=8)
    cp.add_node("kw-w2", gpus=8, product="NVIDIA-H100-80GB-HBM3")  # queues.yaml names it
    nodes = sh.run(documented("kubectl get nodes")).stdout
    assert "kw-w1" in nodes and "kw-w2" in nodes, nodes
    eventually(lambda: cp.node_ready("kw-w1") and cp.node_ready("kw-w2"), timeout=120)

    _plain_manifests(sh)
    _readme_install(sh)

    # Install.
    sh.run(documented("kubectl create namespace shoal-system"))
    sh.run(documented("helm install shoal helm/shoal -n shoal-system"))
    can_i = documented(
        "kubectl auth can-i create pods --subresource=binding"
        " --as=system:serviceaccount:shoal-system:shoal"
    )
    # Cluster-wide (the ClusterRole), asked from the context's namespace, `default`;
    # the RBAC cache takes the new ClusterRoleBinding a moment after install.
    eventually(
        lambda: sh.run(can_i, ok=False).stdout.strip() == "yes", timeout=60, every=0.5, what=can_i
    )
    crds = sh.run("kubectl get crd -o name").stdout
    assert "trainingjobs.shoal.dev" in crds and "queues.shoal.dev" in crds, crds

    # Checking GPUs: what the device plugin and GFD put on each node.
    columns = sh.run(documented(
        "kubectl get nodes -o custom-columns='NAME:.metadata.name,"
        "GPUS:.status.allocatable.nvidia\\.com/gpu,"
        "MODEL:.metadata.labels.nvidia\\.com/gpu\\.product,"
        "MEM:.metadata.labels.nvidia\\.com/gpu\\.memory'"
    )).stdout  # fmt: skip
    rows = [line.split() for line in columns.splitlines()]
    assert rows[0] == ["NAME", "GPUS", "MODEL", "MEM"], columns
    assert ["kw-w1", "8", "NVIDIA-A100-SXM4-80GB", "81920"] in rows, columns

    # Shoal as the chart's Deployment runs it (on this host: kwok runs no containers),
    # with the release's ServiceAccount.
    kubeconfig = token_kubeconfig(cp, "shoal", RELEASE_NS, tmp_path / "sa.kubeconfig")
    database = open_database(f"sqlite:///{tmp_path / 'shoal.db'}")
    shoal = launch(database, chart_env(kubeconfig, tmp_path))
    try:
        # First queue, first job.
        sh.run(documented("kubectl apply -f deploy/examples/queues.yaml"))
        sh.run(documented("kubectl get queues"))

        def accepted(name: str) -> bool:
            got = cp.custom.get_cluster_custom_object("shoal.dev", "v1alpha1", "queues", name)
            conds = (got.get("status") or {}).get("conditions") or []
            return any(c["type"] == "Valid" and c["status"] == "True" for c in conds)

        # The controller takes the queues before the jobs that name them.
        eventually(lambda: all(map(accepted, ("research", "vision", "nlp"))), timeout=120)
        sh.run(documented("kubectl apply -f deploy/examples/fractional.yaml"))

        def reservations_reported() -> bool:
            for pod in cp.pods(RESERVATIONS_NS, "app.kubernetes.io/component=gpu-reservation"):
                if pod["spec"].get("nodeName") and not (
                    pod["metadata"].get("annotations") or {}
                ).get("shoal.dev/gpu-uuid"):
                    # What the reserver does on a real node: its GPU's UUID on its pod.
                    ann = {"shoal.dev/gpu-uuid": f"{UUID[:-2]}{pod['metadata']['name'][-2:]}"}
                    cp.core.patch_namespaced_pod(
                        pod["metadata"]["name"], RESERVATIONS_NS, {"metadata": {"annotations": ann}}
                    )
            return cp.tj("finetune-quarter").get("status", {}).get("phase") == "Running"

        try:
            eventually(reservations_reported, timeout=180, every=0.5, what="finetune-quarter runs")
        except AssertionError as e:
            job = cp.tj("finetune-quarter").get("status", {}).get("jobId")
            status = cp.tj("finetune-quarter").get("status")
            raise AssertionError(f"{e}\n{status}\n{shoal.diagnose(job)}") from None
        wide = sh.run(documented("kubectl -n shoal-jobs get tj -o wide")).stdout
        assert "finetune-quarter" in wide and "Running" in wide, wide
        described = sh.run(documented("kubectl -n shoal-jobs describe tj finetune-quarter"))
        text = described.stdout
        assert "Name:         finetune-quarter" in text and "Running" in text, text
        assert "Conditions:" in text and "Placements:" in text, text

        # Troubleshooting: the reservation pod holding the shared GPU, with its UUID.
        listed = sh.run(documented(
            "kubectl -n shoal-reservations get pod -l app.kubernetes.io/component=gpu-reservation"
        )).stdout  # fmt: skip
        assert "shoal-gpu-kw-w" in listed, listed
        # ... out of the jobs namespace's `kubectl get pods` (documented in the values table).
        documented("`kubectl get pods`")
        jobs_pods = sh.run("kubectl -n shoal-jobs get pods").stdout
        # A pod's stem is the job's id where that is a DNS label (ids are random hex).
        stem = job_base(cp.tj("finetune-quarter")["status"]["jobId"], "finetune-quarter")
        assert f"{stem}-a" in jobs_pods and "shoal-gpu-" not in jobs_pods, jobs_pods
        sh.run("kubectl get pods")  # as written: the context's namespace

        # `kubectl delete tj NAME` cancels the job, and its pods go with it.
        job_id = cp.tj("finetune-quarter")["status"]["jobId"]
        assert cp.job_pods(job_id)
        sh.run(
            documented("kubectl -n shoal-jobs delete tj NAME").replace("NAME", "finetune-quarter")
        )
        eventually(lambda: not cp.job_pods(job_id), timeout=120, what="its pods gone")
    finally:
        shoal.stop()
        database.close()

    # Upgrade and uninstall.
    sh.run(documented("helm upgrade shoal helm/shoal -n shoal-system --reuse-values"))
    history = sh.run("helm history shoal -n shoal-system -o json").stdout
    assert '"revision":2' in history.replace(" ", ""), history
    sh.run(documented("kubectl apply -f helm/shoal/crds/"))
    sh.run(documented("helm uninstall shoal -n shoal-system"))
    assert sh.run("helm status shoal -n shoal-system", ok=False).returncode != 0
    # "keeps the CRDs, the jobs namespace and the SQLite PVC" (and so the jobs in it).
    assert "eval-20gib" in sh.run("kubectl -n shoal-jobs get tj -o name").stdout
    sh.run("kubectl get crd trainingjobs.shoal.dev queues.shoal.dev")
    sh.run("kubectl -n shoal-system get pvc shoal-data")
    sh.run(documented("kubectl delete namespace shoal-jobs"))
    assert "NotFound" in sh.run("kubectl get namespace shoal-jobs", ok=False).stderr
    sh.run(documented("kubectl delete crd trainingjobs.shoal.dev queues.shoal.dev"))
    gone = sh.run("kubectl get queues", ok=False)
    assert gone.returncode != 0 and "queues" in gone.stderr, gone.stderr
