"""Shoal on this host, built as `shoal serve --backend kubernetes` builds it (minus the
HTTP server): the chart Deployment's environment, and the KubeRuntime and loop in a
thread, with a way to stop it and to say what it sees when a test fails."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

from scheduler.backends.kubernetes.runtime import KubeRuntime, from_settings
from scheduler.cli import settings
from scheduler.controller import watcher
from scheduler.loop.service import Loop, LoopConfig
from scheduler.store.db import Database

from .controlplane_client import JOBS_NS, RELEASE_NS, RESERVATIONS_NS


@dataclass
class Shoal:
    """One Shoal replica as `shoal serve --backend kubernetes` builds it (minus the HTTP
    server): the KubeRuntime from the chart's environment and the loop, in a thread."""

    runtime: KubeRuntime
    loop: Loop
    database: Database
    stop_event: threading.Event
    thread: threading.Thread

    stopped: bool = False

    def diagnose(self, job_id: str | None = None) -> str:
        """What Shoal sees, for a failing test's message."""
        from scheduler.store.events import list_events
        from scheduler.store.rows import get_job

        lines = [
            f"nodes: {[n.name for n in self.runtime.backend.nodes()]}",
            f"excluded: {self.runtime.backend.excluded_nodes()}",
            f"errors: {self.runtime.backend.errors()}",
            f"workers: {self.runtime.backend.workers()}",
        ]
        if job_id:
            with self.database.session() as session:
                row = get_job(session=session, job_id=job_id)
                lines.append(f"job {job_id}: {row.phase} {getattr(row, 'reason', '')}")
                for e in list_events(session=session, job_id=job_id):
                    lines.append(f"  event: {e.__dict__}")
        return "\n".join(lines)

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        self.stop_event.set()
        self.loop.wake()
        self.thread.join(timeout=30)
        self.runtime.close()


def chart_env(kubeconfig: Path, tmp_path: Path) -> dict[str, str]:
    """The environment the chart's Deployment gives the container, with KUBECONFIG in
    place of the in-cluster credentials."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "policy: binpack\nminRuntimeSeconds: 0\nstarvationSeconds: 600\n"
        "preemption: true\nintervalSeconds: 0.2\n"
    )
    sc = {
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    (tmp_path / "sc.json").write_text(json.dumps(sc))
    (tmp_path / "kube-options.json").write_text(json.dumps({"reserveNamespace": RESERVATIONS_NS}))
    return {
        "SHOAL_KUBE_OPTIONS_FILE": str(tmp_path / "kube-options.json"),
        "KUBECONFIG": str(kubeconfig),
        "SHOAL_POLICY_FILE": str(policy),
        "SHOAL_WORKER_SECURITY_CONTEXT_FILE": str(tmp_path / "sc.json"),
        "SHOAL_JOBS_NAMESPACE": JOBS_NS,
        "SHOAL_SCHEDULER_NAME": "shoal",
        "SHOAL_RESERVE_IMAGE": "ghcr.io/shoal-dev/shoal:test",
        "SHOAL_LEADER_ELECTION": "false",
        "SHOAL_LEADER_ELECTION_NAMESPACE": RELEASE_NS,
        "SHOAL_LEADER_ELECTION_LEASE": "shoal-scheduler",
        "SHOAL_POD_NAME": "shoal-0",
    }


def launch(database: Database, env: dict[str, str], resync_s: int = 1) -> Shoal:
    """Start Shoal on `database` with the environment `env`; its loop runs in a thread."""
    s = settings.from_env(env)
    pol = settings.load_policy(
        s.policy_file,
        policy="fgd",
        min_runtime_s=0,
        interval_s=0.2,
        worker_tolerations=s.worker_tolerations,
    )
    # A quick CR relist by default (serve: 30 s); status follows the store poll anyway
    # (test_status_follows.py runs with a long relist to show it).
    task = watcher.leader_task(database.session, resync_s=resync_s, chart_limits=pol.allowed)
    rt = from_settings(s, leader_tasks=[task])
    loop = Loop(
        database,
        rt.backend,
        config=LoopConfig(
            holder=f"serve-{s.pod_name}",
            interval_s=pol.interval_s,
            core=pol.core,
            is_leader=rt.is_leader,
        ),
    )
    stop = threading.Event()
    thread = threading.Thread(target=loop.run_forever, args=(stop,), daemon=True)
    thread.start()
    return Shoal(rt, loop, database, stop, thread)
