"""Every command the README, CONTRIBUTING.md, docs/ (docs/design/ too) or an example's
header tells a user to type is run by a test (issue 35: a command quoted in the docs
that no test runs is a defect). Fast tier: it reads files and starts nothing.

The rule, one for every file. A command is a piece of shell that starts with a PROGRAM
(`shoal`, `make`, `helm`, `kubectl`, `curl`, `python`, `pip`, `.venv/bin/X`, a path under
`scripts/`, `.ci/run`), once `nice [-n N]`, `/usr/bin/time`, `env -u X`, `NAME=value`
assignments, `eval "$(` and `(` in front of it are passed over. It is found in
- code blocks: fenced ```sh/```bash, fenced without a language, or indented by four
  spaces; a line continued with `\\` is one line, comments are dropped, and `&&`/`;`
  split a line into pieces (drawings, lines with box-drawing characters, are not shell);
- inline code spans (`...`) in the prose, when the span is such a command with at least
  one argument, or a script's path (`scripts/setup.sh`): a bare `shoal` names the CLI;
- backticked spans in an example's leading comment (examples/*/job.yaml).

COVERED maps each command, as the doc writes it (whitespace folded), to the tests that run
it, or the same command with its placeholders (NAME|ID, <id>, [--opt X]) filled or other
sizes; `path::name` must name a `def name` (a test, or the fixture that runs it) in that
file. A CI script (`.ci/run`, `scripts/test.sh`) counts where CI runs the command itself.
EXCLUDED lists what no CI tier can run, each with why. A command added to the docs with
neither fails here, naming it and where it is."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = re.compile(
    r"(shoal|make|helm|kubectl|curl|python3?|pip|(\S*/)?\.venv/bin/\S+|scripts/\S+|\.ci/run)$"
)
WRAPPER = re.compile(
    r"^(?:\(|eval \"\$\(|nice(?: -n \d+)? |/usr/bin/time |env(?: -u \S+)* |[A-Z_]+=\S* )"
)
DRAWING = re.compile(r"[\u2500-\u257f\u25b2-\u25c0]")
CI_SCRIPTS = (".ci/run", "scripts/test.sh")


def program_of(piece: str) -> str | None:
    rest = piece
    while m := WRAPPER.match(rest):
        rest = rest[m.end() :].lstrip()
    word = rest.split(" ", 1)[0]
    return word if word and PROGRAM.match(word) else None


def pieces(line: str) -> list[str]:
    out = []
    for piece in re.split(r"\s*(?:&&|;)\s*", line):
        piece = piece.strip().rstrip("&").strip()
        if piece.startswith("("):
            piece = piece[1:]
        if piece.count(")") > piece.count("("):
            piece = piece[: piece.rindex(")")]
        if piece.strip():
            out.append(" ".join(piece.split()))
    return out


def logical_lines(block: str) -> list[str]:
    out, held = [], ""
    for raw in block.splitlines():
        line = raw.strip()
        if not held and (not line or line.startswith("#")):
            continue
        line = re.sub(r"\s+#\s.*$", "", line)
        if line.endswith("\\"):
            held += line[:-1] + " "
            continue
        out.append(held + line)
        held = ""
    return out


def code_blocks(text: str) -> list[tuple[int, str, str]]:
    """(first line, body, language: a fence's, "" for none, "indented")."""
    lines, blocks = text.splitlines(), []
    i, blank_before, in_list = 0, True, False
    while i < len(lines):
        line = lines[i]
        if fence := re.match(r"^\s*```(\w*)", line):
            start, body = i, []
            i += 1
            while i < len(lines) and not re.match(r"^\s*```", lines[i]):
                body.append(lines[i])
                i += 1
            blocks.append((start + 1, "\n".join(body), fence.group(1)))
            i, blank_before = i + 1, True
            continue
        if line.startswith("    ") and line.strip() and blank_before and not in_list:
            start, body = i, []
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                body.append(lines[i][4:])
                i += 1
            blocks.append((start + 1, "\n".join(body), "indented"))
            blank_before = False
            continue
        if line.strip():
            item = re.match(r"^\s*([-*+]|\d+\.)\s", line)
            in_list = bool(item) or (in_list and line.startswith(" "))
        blank_before = not line.strip()
        i += 1
    return blocks


def commands_in(text: str) -> list[tuple[str, int]]:
    found = []
    for lineno, body, lang in code_blocks(text):
        if lang not in ("sh", "bash", "shell", "", "indented"):
            continue
        for line in logical_lines(body):
            if not DRAWING.search(line):
                found += [(p, lineno) for p in pieces(line) if program_of(p)]
    prose = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    for m in re.finditer(r"`([^`\n]+)`", prose):
        span = " ".join(m.group(1).split())
        word = program_of(span)
        if word and (" " in span or "/" in word):
            found.append((span, prose[: m.start()].count("\n") + 1))
    return found


def header_of(example: Path) -> str:
    head = []
    for line in example.read_text().splitlines():
        if not line.startswith("#"):
            break
        head.append(line.lstrip("# "))
    return " ".join(head)


def documented() -> dict[str, list[str]]:
    """Each command and where it is (file:line)."""
    where: dict[str, list[str]] = {}
    docs = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for doc in docs:
        for command, line in commands_in(doc.read_text()):
            where.setdefault(command, []).append(f"{doc.relative_to(ROOT)}:{line}")
    for example in sorted((ROOT / "examples").glob("*/job.yaml")):
        for command, _ in commands_in(header_of(example)):
            where.setdefault(command, []).append(str(example.relative_to(ROOT)))
    return where


DEMO = "tests/e2e/test_user_path.py::test_make_demo_exits_0_and_trains"
EXAMPLES = "tests/e2e/test_user_path.py::test_an_example_runs_as_its_header_says"
CLI = "tests/api/test_cli_readme.py::test_the_everyday_block_runs_as_the_readme_writes_it"
FIRST = "tests/api/test_cli_readme.py::test_the_auth_block_and_the_first_steps_run_as_written"
BENCH = "tests/e2e/test_bench_commands.py::test_a_benchmark_runs_small"
TRACE = "tests/e2e/test_bench_commands.py::test_a_benchmark_on_the_trace_runs_small"
SIMULATE = "tests/e2e/test_bench_commands.py::test_simulate_on_the_trace_runs_as_loop_md_writes_it"
SERVE = "tests/support/serve.py::serving"  # `shoal serve` for tests/e2e, tests/dashboard
SERVE_APART = (
    "tests/cli/test_serve_apart.py::test_the_api_runs_apart_and_a_submission_wakes_the_loop"
)
CP = "tests/cluster/conftest.py::control_plane"  # controlplane.sh start, then stop
MANIFESTS = (
    "tests/cluster/test_manifests.py::test_crds_and_every_example_apply_and_print_their_columns"
)
HELM = "tests/cluster/helmchart.py::install"  # helm upgrade --install helm/shoal, shoal-system
GPU_TIER = "tests/gpu/test_tier.py::test_the_inventory_matches_nvidia_smi"
MAKE = "tests/e2e/test_bench_commands.py::test_a_make_target_runs"
WALK = "tests/cluster/test_install_walkthrough.py::test_install_md_walkthrough_runs_as_written"
CP_ENV = "tests/cluster/test_install_walkthrough.py::shell"  # eval "$(... env)", then kubectl
TEAMS = (
    "tests/cluster/test_team_namespaces.py::test_a_team_runs_in_its_namespace_charged_to_its_quota"
)
KUBE_SCALE = "bench.kube_scale: no test runs it yet (a control plane per scheduler)"

COVERED: dict[str, tuple[str, ...]] = {
    "make demo": (DEMO,),
    "make test": (".ci/run",),
    ".ci/run": (".ci/run",),
    "scripts/setup.sh": (DEMO,),  # `make demo` runs it first
    "scripts/test.sh": (".ci/run",),  # `make test` is scripts/test.sh
    ".venv/bin/shoal serve": (DEMO, SERVE),
    "shoal serve": (DEMO, SERVE),
    "shoal serve --backend local": (SERVE,),  # the default backend
    ".venv/bin/shoal queues create default --guaranteed 8": (FIRST, EXAMPLES),
    ".venv/bin/shoal submit -f examples/pytorch-ddp/job.yaml": (EXAMPLES,),
    "shoal submit -f examples/pytorch-ddp/job.yaml": (EXAMPLES,),
    "shoal submit -f examples/pytorch-elastic/job.yaml": (EXAMPLES,),
    ".venv/bin/shoal jobs": (FIRST, EXAMPLES),
    ".venv/bin/shoal nodes": (FIRST,),
    ".venv/bin/shoal logs ddp-example -f": (EXAMPLES,),
    ".venv/bin/shoal simulate --help": (FIRST,),
    "shoal submit --queue vision --workers 2 --gpu 0.5 --gpu-type H100 --grace 120"
    " --no-preemptible --node-selector zone=a --toleration gpu=shared:NoSchedule"
    " -- python train.py": (CLI,),
    "shoal submit --queue vision --image img:1 --volume pvc:datasets:/data:ro"
    " --volume secret:creds:/etc/creds -- python train.py": (
        "tests/api/test_job_volumes.py::test_shoal_submit_volume_as_the_docs_write_it",
    ),
    "shoal jobs [--queue Q] [--phase Failed]": (CLI,),
    "shoal jobs -o wide": (CLI,),
    "shoal job NAME|ID [-o json|yaml]": (CLI,),
    "shoal explain NAME|ID": (CLI,),
    "shoal logs NAME|ID [-f] [--worker N]": (CLI, EXAMPLES),
    "shoal cancel NAME|ID": (CLI,),
    "shoal delete NAME|ID": (CLI,),
    "shoal queues": (CLI,),
    "shoal queues create vision --guaranteed 8 --guaranteed H100=4 --limit 12 [--parent dept]": (
        CLI,
    ),
    "shoal queues update vision --guaranteed H100=6 --limit none --weight 2": (CLI,),
    "shoal queues delete vision": (CLI,),
    "shoal tokens create alice -q vision": (CLI,),
    "shoal tokens create prometheus --role metrics": (CLI,),
    ".venv/bin/shoal tokens create alice --role member -q vision": (FIRST,),
    ".venv/bin/shoal tokens list": (FIRST,),
    ".venv/bin/shoal tokens revoke <id>": (FIRST,),
    "shoal tokens create": (CLI, FIRST),
    "shoal tokens create/list/revoke": (FIRST,),
    "shoal simulate": (SIMULATE, "tests/cli/test_cli.py::test_simulate_prints_the_report"),
    "shoal simulate --queues/--cluster": (
        "tests/cli/test_cli.py::test_simulate_names_a_bad_label_or_taint_of_the_cluster_file",
    ),
    "shoal COMMAND --help": (FIRST,),
    "shoal job NAME -o json": (CLI, EXAMPLES),
    "shoal job NAME": (CLI,),
    "shoal job": (CLI,),
    "shoal jobs": (CLI, EXAMPLES),
    "shoal nodes": (FIRST,),
    "shoal logs -f": (EXAMPLES,),
    "shoal queues create": (CLI,),
    "shoal submit": (CLI, EXAMPLES),
    "shoal submit --follow": (EXAMPLES,),
    "shoal serve --gpus auto": (GPU_TIER, "tests/backends/test_gpu_serve.py::http"),
    "shoal serve --role scheduler --backend kubernetes --interval 5": (
        "tests/kube/test_roles_apart.py::test_the_api_process_wakes_the_scheduler_process_on_sqlite",
    ),
    "shoal serve --role api": (
        "tests/kube/test_roles_apart.py::test_the_api_process_wakes_the_scheduler_process_on_sqlite",
    ),
    "shoal serve --backend kubernetes": ("tests/kube/test_serve_kubernetes.py::chart_env",),
    "shoal serve --role api|scheduler": (
        "tests/cli/test_serve_roles.py::test_the_environment_sets_the_role_and_the_workers",
    ),
    "shoal serve --role all|api|scheduler": (
        "tests/cli/test_serve_roles.py::test_the_environment_sets_the_role_and_the_workers",
    ),
    "make lint": (MAKE,),
    "make typecheck": (MAKE,),
    "make test-fast": (MAKE,),
    "make chart-check": (MAKE,),
    # benchmarks: the docs' flags at small sizes (tests/e2e/test_bench_commands.py)
    "nice .venv/bin/python -m bench.fgd_inflation --data ../shared/data/alibaba-gpu-2023"
    " --seeds 10 --out bench/out --plot docs/img/fgd-inflation.png": (TRACE,),
    ".venv/bin/python -m bench.fgd_inflation --data ../shared/data/alibaba-gpu-2023"
    " --seeds 3 --out bench/out": (TRACE,),
    "nice -n 15 .venv/bin/python -m bench.fgd_inflation --seeds 10 --policies fgd-learned"
    " --jobs 2 --out /tmp/h3s19/final": (TRACE,),
    ".venv/bin/python -m bench.core_speed --data ../shared/data/alibaba-gpu-2023": (TRACE,),
    "nice -n 5 .venv/bin/python -m bench.core_speed --skip-cycle": (TRACE,),
    "nice -n 19 .venv/bin/python -m bench.fgd_drops gpushare80 fgd-learned 42": (TRACE,),
    ".venv/bin/python tests/e2e/bench_submit_to_running.py 10": (
        "tests/e2e/test_bench_commands.py::test_submit_to_running_runs_small",
    ),
    "nice .venv/bin/python -m bench.api_load --rates 50,200,600 --duration 10": (BENCH,),
    "nice -n 5 .venv/bin/python -m bench.api_load --rates 0,50,200 --duration 10": (BENCH,),
    "nice -n 10 .venv/bin/python -m bench.api_load --rates 0,50,200,600 --duration 10"
    " --json all.json": (BENCH,),
    "nice .venv/bin/python -m bench.api_fuzz --requests 2000": (BENCH,),
    "nice -n 5 .venv/bin/python -m bench.api_fuzz --requests 10000 --databases sqlite"
    " --max-seconds 1500": (BENCH,),
    ".venv/bin/python -m bench.reserve_rss": (BENCH,),
    ".venv/bin/python -m bench.kube_reads --nodes 1000 --pods 10000": (BENCH,),
    "nice -n 15 .venv/bin/python -m bench.cycle_scale --repeat 3": (BENCH,),
    "nice -n 15 .venv/bin/python -m bench.cycle_scale --skip-core --loop --state /tmp/cs": (BENCH,),
    "nice -n 15 .venv/bin/python -m bench.cycle_scale --skip-core --loop --state /tmp/cs"
    " --gc-threshold 50000": (BENCH,),
    ".venv/bin/python -m bench.cycle_scale --nodes 500 --pending 250 --loop --skip-core"
    " --warm 3 --cycles 10": (BENCH,),
    "nice -n 15 .venv/bin/python -m bench.cycle_scale --skip-core --loop --state /tmp/cs1000"
    " --warm 4 --cycles 3 --churn 0": (BENCH,),
    "nice -n 5 .venv/bin/python -m bench.cycle_scale --nodes 1000 --pending 500 --skip-core"
    " --loop --state /tmp/run --cycles 8 --churn 0.01": (BENCH,),
    "nice .venv/bin/python -m bench.inventory_write": (BENCH,),
    "nice -n 10 .venv/bin/python -m bench.eta_accuracy"
    " ../shared/data/alibaba-gpu-2023/openb_pod_list_default.csv --limit 300"
    " --max-duration 7200 --arrival-scale 0.02 --every 10": (TRACE,),
    "nice -n 10 .venv/bin/python -m bench.eta_accuracy x --scale 1000 --pending 500"
    " --max-steps 10": (BENCH,),
    "nice -n 10 .venv/bin/python -m bench.eta_overhead --nodes 200 --pending 100 --cycles 40"
    " [--cpu-share 1] [--on-thread]": (BENCH,),
    "nice -n 10 .venv/bin/python -m bench.elastic_reclaim"
    " ../shared/data/alibaba-gpu-2023/openb_pod_list_default.csv [--json]": (TRACE,),
    "nice -n 5 .venv/bin/python -m bench.sim_speed <same trace and flags>": (TRACE,),
    "nice .venv/bin/python -m bench.sim_store"
    " ../shared/data/alibaba-gpu-2023/openb_pod_list_default.csv --limit 300"
    " --max-duration 7200 --arrival-scale 0.02": (TRACE,),
    ".venv/bin/python -m bench.job_modules --list": (BENCH,),
    "nice .venv/bin/python -m bench.api_load --rates 0,200,600 --duration 10 --databases sqlite": (
        BENCH,
    ),
    # What plain `shoal serve` starts as its API process (docs/loop.md), not typed by a user.
    "python -m scheduler.cli.apiproc": (SERVE_APART,),
    "nice .venv/bin/python -m bench.cycle_curve --nodes 1000,2000,5000,10000,20000"
    " --plot docs/img/cycle-curve.png": (BENCH,),
    "nice .venv/bin/python -m bench.cycle_curve --nodes 1000,2000,5000 --starving 1000": (BENCH,),
    "/usr/bin/time nice -n 5 /work/main/.venv/bin/python -m scheduler.cli.main simulate"
    " ../shared/data/alibaba-gpu-2023/openb_pod_list_default.csv --limit 300"
    " --max-duration 7200 --arrival-scale 0.02": (SIMULATE,),
    "shoal simulate ../shared/data/alibaba-gpu-2023/openb_pod_list_default.csv --limit 300"
    " --max-duration 7200 --arrival-scale 0.02": (SIMULATE,),
    # CI's own scripts: scripts/test.sh (`make test`) starts PostgreSQL and the control plane
    "scripts/postgres.sh": ("scripts/test.sh",),
    "scripts/postgres.sh start": ("scripts/test.sh",),
    "scripts/postgres.sh stop": ("scripts/test.sh",),
    "scripts/postgres.sh start|stop": ("scripts/test.sh",),
    'eval "$(scripts/postgres.sh start)"': ("scripts/test.sh",),
    'eval "$(TMPDIR=/tmp/h6 scripts/postgres.sh start)"': ("scripts/test.sh",),
    'eval "$(TMPDIR=/tmp/h4 scripts/postgres.sh start)"': ("scripts/test.sh",),
    "scripts/controlplane.sh": ("scripts/test.sh", CP),
    "scripts/controlplane.sh build": ("scripts/test.sh",),
    "scripts/controlplane.sh start": ("scripts/test.sh", CP),
    'eval "$(scripts/controlplane.sh start)"': ("scripts/test.sh",),
    "scripts/controlplane.sh stop": ("scripts/test.sh", CP),
    "scripts/install-tools.sh": (DEMO,),  # scripts/setup.sh runs it
    # the docs' pytest lines: the same files CI's pytest runs (scripts/test.sh)
    ".venv/bin/pytest tests/dashboard -q": ("scripts/test.sh",),
    '.venv/bin/pytest -o addopts="" tests/cluster/test_elastic_pods.py': ("scripts/test.sh",),
    '.venv/bin/pytest -o addopts="" -s tests/backends/test_local_elastic.py': ("scripts/test.sh",),
    ".venv/bin/pytest tests/cluster -m cluster": ("scripts/test.sh",),
    'env -u PYTHONDONTWRITEBYTECODE /usr/bin/time .venv/bin/pytest -m "not integration and'
    ' not slow" tests -p no:cacheprovider -q': ("scripts/test.sh",),
    # the GPU tier: scripts/gpu-tier.sh runs tests/gpu on a GPU machine
    "scripts/gpu-tier.sh": (GPU_TIER,),
    "scripts/gpu-tier.sh fetch": (GPU_TIER,),
    "pip install 'shoal[gpu]'": (GPU_TIER,),
    # processes Shoal starts itself, run by the tests of what starts them
    "python -m scheduler.backends.kubernetes.reservations.reserve": (
        "tests/kube/test_fractional.py::run_reserve",
    ),
    "shoal reserve": ("tests/kube/test_fractional.py::run_reserve",),
    "python -m scheduler.worker.checkin": (
        "tests/cli/test_share_checkin.py::test_the_init_containers_command_checks_alone",
    ),
    "python -m scheduler.worker -- CMD": (
        "tests/cli/test_worker.py::test_exit_code_and_progress_with_the_api_down",
    ),
    "python -m scheduler.worker -- python train.py": (
        "tests/cli/test_worker.py::test_exit_code_and_progress_with_the_api_down",
    ),
    "shoal worker -- CMD": (
        "tests/cli/test_worker.py::test_exit_code_and_progress_with_the_api_down",
    ),
    "python -m scheduler.backends.local.shim ... -- ARGV": (DEMO, SERVE),
    'python -c "import scheduler.worker.launcher"': (
        "tests/backends/test_serve_isolation.py::"
        "test_as_root_by_default_team_jobs_run_as_its_own_user_apart_from_the_state",
    ),
    # the control plane (kwok): what tests/cluster runs with kubectl and helm
    "kubectl apply -f deploy/examples/queues.yaml": (MANIFESTS, WALK),
    "kubectl apply -f deploy/examples/fractional.yaml": (MANIFESTS, WALK),
    "kubectl get queues": (MANIFESTS,),
    "kubectl -n shoal-jobs get tj -o wide": (MANIFESTS,),
    "helm upgrade --install": (HELM,),
    "helm uninstall": ("tests/cluster/helmchart.py::uninstall",),
    "helm template": ("tests/chart/conftest.py::render",),
    # docs/install.md's walkthrough, as written, in a user's order (and the README's line)
    'eval "$(scripts/controlplane.sh env)"': (CP_ENV,),
    "kubectl create namespace shoal-system": (WALK,),
    "helm install shoal helm/shoal -n shoal-system": (WALK,),
    "helm install": (WALK,),
    "PATH=$PWD/.tools/bin:$PATH helm install shoal helm/shoal": (WALK,),
    "kubectl -n shoal-system create secret generic shoal-auth --from-literal=admin-token=$TOKEN"
    " --from-literal=tokens.yaml=\"$TOKEN: {user: admin, role: admin, queues: ['*']}\"": (WALK,),
    "kubectl apply -f deploy/shoal.yaml": (WALK,),
    "helm upgrade shoal helm/shoal -n shoal-system --reuse-values": (WALK,),
    "kubectl apply -f helm/shoal/crds/": (WALK,),
    "helm uninstall shoal -n shoal-system": (WALK,),
    "kubectl -n shoal-jobs describe tj finetune-quarter": (WALK,),
    "kubectl -n vision describe quota gpus": (TEAMS,),
    "kubectl describe quota": (TEAMS,),
    "shoal submit -n vision": (
        "tests/api/test_cli_everyday.py::test_submit_names_the_namespace_and_the_queue_bounds_it",
    ),
    "kubectl -n shoal-jobs delete tj NAME": (WALK,),
    "kubectl delete namespace shoal-jobs": (WALK,),
    "kubectl delete crd trainingjobs.shoal.dev queues.shoal.dev": (WALK,),
    "kubectl get nodes": (WALK,),
    "kubectl get nodes -o custom-columns='NAME:.metadata.name,GPUS:.status.allocatable."
    "nvidia\\.com/gpu,MODEL:.metadata.labels.nvidia\\.com/gpu\\.product,MEM:.metadata.labels."
    "nvidia\\.com/gpu\\.memory'": (WALK,),
    "kubectl auth can-i create pods --subresource=binding"
    " --as=system:serviceaccount:shoal-system:shoal": (WALK,),
    "kubectl -n shoal-reservations get pod -l app.kubernetes.io/component=gpu-reservation": (WALK,),
    "kubectl get pods": (WALK,),
}

# Commands no test runs yet (issue 35 stays open for them); each says what running it
# takes. Shrink this: a command moved from here to COVERED needs the test that runs it.
NOT_YET_RUN: dict[str, str] = {
    cmd: KUBE_SCALE
    for cmd in (
        "TMPDIR=/tmp/ks nice -n 10 .venv/bin/python -m bench.kube_scale --nodes 200 --pods 1500"
        " --gangs 20 --fractions 100 --timeout 600 --json /tmp/ks/out.json",
        ".venv/bin/python bench/kube_scale.py --timeout 600 --json out.json",
        ".venv/bin/python bench/kube_scale.py --nodes 200 --pods 400 --gangs 20 --fractions 400"
        " --timeout 200",
        "TMPDIR=/tmp/h5 nice .venv/bin/python -m bench.kube_scale --nodes 50 --pods 300"
        " --gangs 0 --fractions 0 --timeout 300 --shoal-only --profile /tmp/h5/before.prof",
        "SHOAL_BENCH_PODS=/tmp/h5/a4.pods.json TMPDIR=/tmp/h5 nice .venv/bin/python -m"
        " bench.kube_scale --nodes 50 --pods 300 --gangs 0 --fractions 0 --timeout 300"
        " --profile /tmp/h5/after4.prof",
        "TMPDIR=/tmp/h5 nice .venv/bin/python -m bench.kube_scale --nodes 1000 --pods 5000"
        " --gangs 0 --fractions 0 --timeout 600 --json /tmp/h5/full_a.json",
        "TMPDIR=/tmp/h5 nice -n 15 .venv/bin/python -m bench.kube_scale --nodes 200 --pods 1500"
        " --gangs 0 --fractions 0 --timeout 300 --peer-only --creators C",
        "TMPDIR=/tmp/h5 .venv/bin/python -m bench.kube_scale --timeout 900 --json"
        " /tmp/h5/full.json",
        "TMPDIR=/tmp/ksd nice -n 10 .venv/bin/python -m bench.kube_scale --dra --nodes 200"
        " --pods 1000 --timeout 600 --json /tmp/ksd/runN.json",
        "nice -n 5 .venv/bin/python -m bench.kube_scale --gangs 0 --fractions 0 --timeout 600"
        " --json /tmp/ks/a.json",
        "nice -n 5 /work/main/.venv/bin/python -m bench.kube_scale --gangs 0 --fractions 0"
        " --timeout 600 --shoal-only --json /tmp/ks/a_before.json",
        "python -m bench.kube_scale --timeout 900",
    )
} | {
    "nice -n 10 .venv/bin/python -m bench.api_load --rates 0,50,200,600 --duration 10 --split"
    " --json split.json": "--split needs PostgreSQL (tests run --databases sqlite)",
    "nice -n 10 .venv/bin/python -m bench.api_fuzz --requests 10000 --max-seconds 540": (
        "both databases: needs PostgreSQL (tests run --databases sqlite)"
    ),
    "shoal serve --job-retention": "the flag as serve takes it: not yet",
    "nice -n 19 .venv/bin/python -m bench.fgd_inflation --lists all --policies"
    " fgd-learned,fgd-paper --seeds 10 --jobs 2 --out /tmp/h6/all": "--lists: not yet",
    "nice .venv/bin/python -m bench.elastic_resize_timing [--wait-load 2.0] [--json]": (
        "a minute of torch restarts; tests/e2e/test_elastic_e2e.py runs the same scenario"
    ),
    "make bench": "the full inflation benchmark (minutes); bench.fgd_inflation runs small",
}

# What no CI tier can run, and why.
EXCLUDED: dict[str, str] = {
    "helm test shoal -n shoal-system": "its test pod must run the image: kwok runs no containers",
    "kubectl -n shoal-system port-forward svc/shoal 8080:80": "needs a running pod (kwok: none)",
    "shoal submit --queue vision --workers 2 --gpu 0.5 --image"
    " pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime -- python train.py": (
        "a CUDA image on a real cluster's GPU nodes"
    ),
    'curl -H "Authorization: Bearer $SHOAL_TOKEN" $SHOAL_URL/api/v1/nodes': (
        "through the port-forward above: a running pod"
    ),
    "kubectl -n shoal-system logs deploy/shoal": "a container's logs: kwok runs no containers",
    "kubectl logs": "a container's logs: kwok runs no containers",
    "kubectl -n shoal-system create secret generic shoal-db --from-literal=database-url="
    "'postgresql+psycopg://shoal:PASSWORD@postgres.db:5432/shoal'": (
        "an external PostgreSQL the chart's pod would reach: none in CI"
    ),
    "helm install shoal helm/shoal -n shoal-system --set database.type=postgres --set"
    " database.postgres.existingSecret=shoal-db --set serviceMonitor.enabled=true": (
        "an external PostgreSQL and the ServiceMonitor CRD (Prometheus operator)"
    ),
    "kubectl create secret docker-registry": "a private registry's credentials",
    "pip install shoal": "Shoal is not published on PyPI; images copy the wheel",
}


def referenced_exists(ref: str, command: str) -> str | None:
    """Why `ref` does not run `command`, or None."""
    path, _, name = ref.partition("::")
    file = ROOT / path
    if not file.is_file():
        return f"{path} does not exist"
    if not name:
        if path not in CI_SCRIPTS:
            return f"{path} is not a CI script ({', '.join(CI_SCRIPTS)})"
        return None
    if not re.search(rf"^\s*(async )?def {re.escape(name)}\(", file.read_text(), re.M):
        return f"{path} has no def {name}"
    return None


def test_every_documented_command_is_run_by_a_named_test() -> None:
    where = documented()
    missing = [
        f"{cmd!r} ({', '.join(places[:3])})"
        for cmd, places in where.items()
        if cmd not in COVERED and cmd not in NOT_YET_RUN and cmd not in EXCLUDED
    ]
    assert not missing, "documented commands no test runs (map them in COVERED):\n" + "\n".join(
        missing
    )


def test_every_named_test_exists() -> None:
    wrong = [
        f"{cmd!r}: {why}"
        for cmd, refs in COVERED.items()
        for ref in refs
        if (why := referenced_exists(ref, cmd))
    ]
    assert not wrong, "\n".join(wrong)


def test_the_table_names_only_documented_commands() -> None:
    """A command dropped from the docs leaves the table, so the table stays the list."""
    where = documented()
    stale = [c for c in (*COVERED, *NOT_YET_RUN, *EXCLUDED) if c not in where]
    assert not stale, "no longer in the docs: " + "\n".join(map(repr, stale))
    both = set(COVERED) & (set(NOT_YET_RUN) | set(EXCLUDED))
    assert not both, both
