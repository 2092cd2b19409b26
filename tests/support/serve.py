"""The one live `shoal serve` for the end-to-end and dashboard tests: the real CLI in
a subprocess (local backend, SQLite) on a free loopback port, waited for generously,
stopped with its workers afterwards."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from support.wait import eventually

ROOT = Path(__file__).resolve().parents[2]
START_S = 120.0  # a cold start on a loaded machine imports a lot


@dataclass(frozen=True)
class Serve:
    url: str
    state: Path
    env: dict[str, str]
    token: str  # the admin token `shoal serve` wrote into its state directory
    log: Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(
    tmp: Path, env: Mapping[str, str] | None = None, python: Path | None = None
) -> Iterator[Serve]:
    """`shoal serve --min-runtime 0 --interval 0.5` with state under `tmp`, run by `python`
    (default: this one), which is also what its workers' `python` is.

    Its workers run as the server's own user unless `env` names a worker user setting
    (SHOAL_WORKER_USER, SHOAL_SHARED_USER_OK): as root, the default would run them as
    `shoal-worker`, who cannot enter pytest's 0700 `tmp_path`, where tests keep the files
    their jobs wait for. tests/backends/test_serve_isolation.py tests that default."""
    port, state = free_port(), tmp / "state"
    url = f"http://127.0.0.1:{port}"
    chosen = {"SHOAL_WORKER_USER", "SHOAL_SHARED_USER_OK"} & set(env or {})
    full = {
        **os.environ,
        "SHOAL_STATE_DIR": str(state),
        "SHOAL_URL": url,
        "PYTHONPATH": str(ROOT),
        **({} if chosen else {"SHOAL_SHARED_USER_OK": "1"}),
        **(env or {}),
    }
    full.pop("SHOAL_TOKEN", None)
    log_path = tmp / "serve.log"
    log = open(log_path, "w")  # noqa: SIM115 (closed below)
    cmd = [str(python or sys.executable), "-m", "scheduler.cli.main", "serve", "--port", str(port)]
    cmd += ["--min-runtime", "0", "--interval", "0.5"]
    proc = subprocess.Popen(cmd, env=full, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:

        def up() -> bool:
            assert proc.poll() is None, log_path.read_text()
            token = state / "admin-token"
            return token.exists() and httpx.get(f"{url}/healthz", timeout=30).is_success

        what = "shoal serve to answer"
        eventually(up, START_S, every=0.1, what=what, retry_on=(httpx.HTTPError,))
        token = (state / "admin-token").read_text().strip()
        yield Serve(url, state, full, token, log_path)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
        # The server leaves workers running by design; stop them here.
        from scheduler.backends.local import LocalBackend

        backend = LocalBackend(state)
        backend.kill_all()
        backend.close()
