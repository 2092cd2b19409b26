"""What the API benchmarks share: a fresh `shoal serve` on a loopback port, waited for
until `/healthz` answers, and a PostgreSQL schema of its own per run."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def pg_schema(pg: str, prefix: str = "bench") -> Iterator[str]:
    """A URL whose search_path is a fresh schema on the server `pg`, dropped after."""
    from sqlalchemy import create_engine, text

    schema = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin = create_engine(pg, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        sep = "&" if "?" in pg else "?"
        yield f"{pg}{sep}options=-csearch_path%3D{schema}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@contextmanager
def serving(
    cmd: list[str], env: dict[str, str], state: Path, port: int
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Run `cmd` with exactly `env` (a server on `port`, logging into `state`); yield
    (url, process) once `/healthz` answers; stop it and remove `state` afterwards."""
    log = (state / "serve.log").open("wb")
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                log.flush()
                tail = (state / "serve.log").read_text()[-2000:]
                raise RuntimeError(f"server did not start:\n{tail}")
            time.sleep(0.2)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(state, ignore_errors=True)
