"""The CLI without a server: job bodies from files and flags, exit codes, simulate."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from scheduler.cli import jobs
from scheduler.cli.main import app

runner = CliRunner()
ROOT = Path(__file__).parents[2]


def test_flags_override_the_file_and_the_command_follows_dashes() -> None:
    body = jobs.build_spec(
        ROOT / "examples/pytorch-ddp/job.yaml",
        {"queue": "vision", "workers": 4},
        ["python", "t.py"],
    )
    assert body["queue"] == "vision" and body["workers"] == 4 and body["gpu"] == 0.5
    assert body["command"] == ["python", "t.py"] and not body.get("args")


def test_flags_alone_make_a_job_with_a_generated_name() -> None:
    body = jobs.build_spec(None, {"queue": "q", "gpu": 0.25}, ["python", "x.py"])
    assert body["name"].startswith("job-") and body["image"] == "local"


def test_invalid_job_is_refused_before_any_request() -> None:
    with pytest.raises(typer.Exit) as exc:
        jobs.build_spec(None, {"queue": "q", "gpu": 1.5}, ["x"])
    assert exc.value.exit_code == 1


def test_unreachable_api_exits_2() -> None:
    result = runner.invoke(app, ["jobs", "--url", "http://127.0.0.1:9", "--token", "t"])
    assert result.exit_code == 2
    assert "cannot reach Shoal" in result.output


def test_submit_with_flags_validates_locally() -> None:
    args = ["submit", "--url", "http://127.0.0.1:9", "--queue", "Bad_Name", "--", "python", "x"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1 and "queue" in result.output


def test_simulate_prints_the_report(tmp_path: Path) -> None:
    f = tmp_path / "trace.csv"
    rows = [f"j{i},{'ab'[i % 2]},{i * 30},600,1,0.5" for i in range(8)]
    f.write_text("name,queue,submit,duration,workers,gpu\n" + "\n".join(rows) + "\n")
    result = runner.invoke(app, ["simulate", str(f)])
    assert result.exit_code == 0, result.output
    assert "per queue" in result.output and "mean utilisation: GPU" in result.output


def test_simulate_says_what_jobs_waited_for_and_the_cpu_they_held(tmp_path: Path) -> None:
    """Issue 25 item 11: GPUs idle while jobs wait is explained: CPU and memory held, and
    the dominant pending reason (here every pod asks all of a node's 16 CPUs)."""
    f = tmp_path / "trace.csv"
    rows = [f"j{i},a,{i},3600,1,1,16,1024" for i in range(6)]
    f.write_text("name,queue,submit,duration,workers,gpu,cpu,memoryMib\n" + "\n".join(rows))
    result = runner.invoke(app, ["simulate", str(f)], terminal_width=200)
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "mean utilisation: GPU 25.0%, CPU 100.0%" in out, out  # 2 of 8 GPUs, all CPU
    assert "why jobs waited" in out and "NoFittingNode (CPU or memory)" in out
    assert "jobs waited mostly for CPU or memory, not GPUs" in out


def test_simulate_refuses_an_unknown_policy_by_name(tmp_path: Path) -> None:
    f = tmp_path / "trace.csv"
    f.write_text("name,queue,submit,duration,workers,gpu\nj0,a,0,600,1,0.5\n")
    result = runner.invoke(app, ["simulate", str(f), "--policy", "best-fit"])
    assert result.exit_code == 2
    assert "--policy" in result.output and "'best-fit' is not one of" in result.output
    assert "Traceback" not in result.output


def test_simulate_names_a_bad_label_or_taint_of_the_cluster_file(tmp_path: Path) -> None:
    f = tmp_path / "trace.csv"
    f.write_text("name,queue,submit,duration,workers,gpu\nj0,a,0,600,1,0.5\n")
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text("nodes:\n  - {name: lab, gpus: 8, taints: [{key: k, effect: Never}]}\n")
    result = runner.invoke(app, ["simulate", str(f), "--cluster", str(nodes)])
    assert result.exit_code == 1 and result.exception is not None
    assert str(result.exception) == (
        f"{nodes}: nodes[0] (lab): taints[0].effect: must be one of NoSchedule, "
        "PreferNoSchedule, NoExecute, not 'Never'"
    )


@pytest.mark.parametrize(
    "args",
    [["job", "x"], ["logs", "x"], ["cancel", "x"], ["delete", "x"], ["explain", "x"]],
)
def test_every_command_says_the_server_is_unreachable(args: list[str]) -> None:
    """issue 25 item 7: one error path: these printed a 60-line traceback."""
    result = runner.invoke(app, [*args, "--url", "http://127.0.0.1:9", "--token", "t"])
    assert result.exit_code == 2, (result.output, result.exception)
    assert "cannot reach Shoal" in result.output
