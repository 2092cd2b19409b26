"""A real `shoal serve` (local backend, SQLite) on a free port for the end-to-end tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).parents[2]


@dataclass
class Server:
    url: str
    state: Path
    env: dict[str, str]
    http: httpx.Client

    def shoal(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "scheduler.cli.main", *args]
        proc = subprocess.run(
            cmd, env=self.env, cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"shoal {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
            )
        return proc


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    port = _free_port()
    state = tmp_path / "state"
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "SHOAL_STATE_DIR": str(state), "SHOAL_URL": url, "PYTHONPATH": str(ROOT)}
    env.pop("SHOAL_TOKEN", None)
    log = open(tmp_path / "serve.log", "w")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scheduler.cli.main",
            "serve",
            "--port",
            str(port),
            "--min-runtime",
            "0",
            "--interval",
            "0.5",
        ],
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        for _ in range(150):
            try:
                if (state / "admin-token").exists() and httpx.get(
                    f"{url}/healthz"
                ).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            time.sleep(0.1)
        token = (state / "admin-token").read_text().strip()
        with httpx.Client(
            base_url=url + "/api/v1", headers={"Authorization": f"Bearer {token}"}
        ) as http:
            yield Server(url, state, env, http)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()
        # The server leaves workers running by design; the test cleans them up.
        from scheduler.backends.local import LocalBackend

        backend = LocalBackend(state)
        backend.kill_all()
        backend.close()
