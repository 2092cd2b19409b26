"""The worker launcher: `shoal worker -- CMD...` or `python -m scheduler.worker -- CMD...`,
the first process of every worker (pod or local process).

It runs the user's command and exits with its exit code. Around it: caps the
framework's GPU memory to SHOAL_GPU_FRACTION (PyTorch through a sitecustomize import
hook; TensorFlow and JAX through their environment), forwards SIGTERM/SIGINT to the
command so it can checkpoint, copies the command's output through while picking up
`SHOAL_PROGRESS` lines, and reports a heartbeat and the latest progress to
SHOAL_API_URL with SHOAL_API_TOKEN. The API being down never stops the training.
Before all that, a share of a GPU reservation on Kubernetes that no init container
checked (`checkin.checks`) checks in: one that sees no GPU exits `checkin.NO_GPU_EXIT`
without running the command.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from scheduler.worker import checkin, progress
from scheduler.worker.supervisor import Supervisor

SITE_DIR = Path(__file__).parent / "_site"


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """The command's environment: the worker's, plus the framework memory caps."""
    out = dict(env)
    fraction = out.get("SHOAL_GPU_FRACTION")
    if fraction:
        # PyTorch: the import hook in _site/sitecustomize.py reads SHOAL_GPU_FRACTION.
        out["PYTHONPATH"] = os.pathsep.join(p for p in (str(SITE_DIR), out.get("PYTHONPATH")) if p)
        # TensorFlow has no fraction variable; growth stops it grabbing the whole GPU.
        out.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
        out.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", fraction)
    return out


class Reporter:
    """Posts heartbeats and progress to the API from a background thread; best effort."""

    def __init__(self, env: Mapping[str, str], interval_s: float = 5.0) -> None:
        self.url = env.get("SHOAL_API_URL", "").rstrip("/")
        self.job_id = env.get("SHOAL_JOB_ID", "")
        self.body: dict[str, Any] = {
            "attempt": int(env.get("SHOAL_ATTEMPT", "0") or 0),
            "worker": int(env.get("SHOAL_WORKER_INDEX", "0") or 0),
        }
        token = env.get("SHOAL_API_TOKEN", "")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.interval_s = interval_s
        self.latest: dict[str, Any] = {}
        self._dirty = threading.Event()
        self._done = threading.Event()
        self.failures = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def enabled(self) -> bool:
        return bool(self.url and self.job_id)

    def start(self) -> None:
        if self.enabled:
            self._thread.start()

    def update(self, data: Mapping[str, Any]) -> None:
        self.latest = dict(data)
        self._dirty.set()

    def stop(self) -> None:
        self._done.set()
        self._dirty.set()
        if self._thread.is_alive():
            self._thread.join(timeout=3)

    def _run(self) -> None:
        with httpx.Client(timeout=2.0, headers=self.headers) as client:
            last = 0.0
            while True:
                self._dirty.wait(self.interval_s)
                self._dirty.clear()
                # At most one post a second however fast the script logs.
                time.sleep(max(0.0, 1.0 - (time.monotonic() - last)))
                last = time.monotonic()
                self._post(client)
                if self._done.is_set():
                    return

    def _post(self, client: httpx.Client) -> None:
        body = {**self.body, "progress": self.latest, "final": self._done.is_set()}
        try:
            client.post(f"{self.url}/api/v1/jobs/{self.job_id}/progress", json=body)
        except httpx.HTTPError:
            self.failures += 1  # the API is away; keep training, try again later


def run(command: list[str], env: Mapping[str, str] | None = None) -> int:
    """Run `command` as the worker; returns its exit code (128+N when killed by N)."""
    if not command:
        print("usage: shoal worker -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    base_env = dict(os.environ if env is None else env)
    if (refused := checkin.check(base_env)) is not None:
        return refused  # before the command: it would train on no GPU
    supervisor = Supervisor()  # a SIGTERM from now on reaches the command
    reporter = Reporter(base_env)
    reporter.start()
    try:
        child = supervisor.start(
            command,
            env=child_env(base_env),
            stdout=subprocess.PIPE,
            stderr=None,  # stderr goes straight through
            bufsize=0,
        )
    except OSError as exc:
        print(f"shoal worker: cannot run {command[0]}: {exc}", file=sys.stderr)
        reporter.stop()
        return 127
    assert child.stdout is not None
    for raw in iter(child.stdout.readline, b""):
        sys.stdout.buffer.write(raw)
        sys.stdout.buffer.flush()
        data = progress.parse(raw.decode(errors="replace"))
        if data is not None:
            reporter.update(data)
    code = supervisor.wait()
    reporter.stop()
    return code


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--"]:
        args = args[1:]
    return run(args)
