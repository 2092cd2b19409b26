"""A real `shoal serve` (local backend, SQLite) on a free port for the end-to-end tests
(`support.serve`, shared with the dashboard tests)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from support import serve

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


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with (
        serve.serving(tmp_path) as s,
        httpx.Client(
            base_url=s.url + "/api/v1", headers={"Authorization": f"Bearer {s.token}"}, timeout=60
        ) as http,
    ):
        yield Server(s.url, s.state, s.env, http)
