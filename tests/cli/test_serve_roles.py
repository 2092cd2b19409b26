"""`shoal serve --role` and `--api-workers` refuse what cannot work, naming the flag and
why, before anything starts (no state directory claimed, no port taken); SHOAL_ROLE and
SHOAL_API_WORKERS reach the same checks."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from scheduler.cli import serve
from scheduler.cli.main import app


def _serve(tmp: Path, **kw: Any) -> None:
    args: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": 1,  # never bound: every case stops before the port
        "state_dir": str(tmp / "state"),
        "database_url": None,
        "cluster": None,
        "backend_kind": "local",
        "policy": "fgd",
        "interval_s": 1.0,
        "min_runtime_s": 0.0,
    }
    serve.serve(**(args | kw))


@pytest.mark.parametrize("role", ["api", "scheduler"])
def test_a_split_role_with_the_local_backend_is_refused(tmp_path: Path, role: str) -> None:
    with pytest.raises(SystemExit, match=rf"--role {role} needs --backend kubernetes.*local"):
        _serve(tmp_path, role=role)
    assert not (tmp_path / "state").exists()  # refused before anything was claimed


def test_several_api_workers_on_sqlite_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"--api-workers 3 needs PostgreSQL.*SQLite"):
        _serve(tmp_path, role="api", backend_kind="kubernetes", api_workers=3)


def test_several_api_workers_beside_the_loop_are_refused(tmp_path: Path) -> None:
    url = "postgresql+psycopg://x@127.0.0.1:1/x"
    with pytest.raises(SystemExit, match=r"--api-workers 2 is for --role api"):
        _serve(tmp_path, database_url=url, backend_kind="kubernetes", api_workers=2)


def test_zero_api_workers_an_unknown_role_and_an_unknown_backend_are_refused(
    tmp_path: Path,
) -> None:
    with pytest.raises(SystemExit, match=r"--api-workers 0: at least 1"):
        _serve(tmp_path, role="api", backend_kind="kubernetes", api_workers=0)
    with pytest.raises(SystemExit, match=r"--role 'both': expected one of all, api, scheduler"):
        _serve(tmp_path, role="both")
    with pytest.raises(SystemExit, match=r"--backend 'slurm': expected one of local, kubernetes"):
        _serve(tmp_path, backend_kind="slurm")
    assert not (tmp_path / "state").exists()


@pytest.fixture
def umask() -> Iterator[None]:
    """`shoal serve` sets umask 077 first thing: this process's is put back."""
    old = os.umask(0o022)
    os.umask(old)
    yield
    os.umask(old)


def test_the_environment_sets_the_role_and_the_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask: None
) -> None:
    monkeypatch.setenv("SHOAL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SHOAL_ROLE", "scheduler")
    result = CliRunner().invoke(app, ["serve", "--port", "1"])
    assert result.exit_code != 0
    assert "--role scheduler needs --backend kubernetes" in str(result.exception)
    monkeypatch.setenv("SHOAL_ROLE", "api")
    monkeypatch.setenv("SHOAL_BACKEND", "kubernetes")
    monkeypatch.setenv("SHOAL_API_WORKERS", "4")
    result = CliRunner().invoke(app, ["serve", "--port", "1"])
    assert "--api-workers 4 needs PostgreSQL" in str(result.exception)


@pytest.mark.integration
def test_the_kubernetes_backend_without_a_kubeconfig_says_so(tmp_path: Path) -> None:
    """issue 35: `shoal serve --role scheduler --backend kubernetes` with no kubeconfig
    died with a 70-line traceback."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHOAL_", "KUBE"))}
    env |= {"HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "none")}
    argv = ["serve", "--role", "scheduler", "--backend", "kubernetes", "--port", "1"]
    done = subprocess.run(
        [sys.executable, "-m", "scheduler.cli.main", *argv, "--state-dir", str(tmp_path / "s")],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    said = done.stderr.strip().splitlines()
    assert said[-1].startswith("no Kubernetes API server to use: not in a pod"), done.stderr
    assert str(tmp_path / "none") in said[-1] and "KUBECONFIG" in said[-1]
