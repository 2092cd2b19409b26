"""The what-if page, /ui/whatif: upload a job trace, replay it on this cluster's nodes with
`shoal simulate`, see the GPU utilisation over virtual time and the simulator's summary.

The replay runs in a child process (`python -m scheduler.cli.main simulate`), as the CLI
runs it: the REST front door does not import the simulator (a sibling layer,
pyproject's import contracts), and a child can be bounded and killed. Bounds: a trace of
at most 256 KiB and its first `MAX_JOBS` jobs, `TIMEOUT_S` seconds of wall time, one
replay at a time per server (another gets 429). The replay reads nothing of the store
but the node inventory, which every dashboard reader sees on the cluster page; it writes
nothing.
"""

from __future__ import annotations

import csv
import itertools
import os
import subprocess
import sys
import tempfile
import threading
from email.parser import BytesParser
from email.policy import HTTP
from pathlib import Path
from typing import Any

import yaml
from fastapi import APIRouter, Request
from fastapi.responses import Response

from api.dashboard import charts, csrf
from api.dashboard.routes import _database, _page, _principal, _to_login
from scheduler.store.cluster import load_inventory

MAX_TRACE_BYTES = 256 * 1024
MAX_JOBS = 500
TIMEOUT_S = 60.0
POLICIES = ("fgd", "binpack", "spread")
_running = threading.Lock()

router = APIRouter(prefix="/ui", include_in_schema=False)


def form_fields(content_type: str, body: bytes) -> dict[str, tuple[str | None, bytes]]:
    """A multipart/form-data body as name -> (filename, bytes), by the standard library's
    MIME parser (the service does not depend on python-multipart)."""
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    message = BytesParser(policy=HTTP).parsebytes(head + body)
    out: dict[str, tuple[str | None, bytes]] = {}
    if not message.is_multipart():
        return out
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if isinstance(name, str):
            payload = part.get_payload(decode=True)
            out[name] = (part.get_filename(), payload if isinstance(payload, bytes) else b"")
    return out


def nodes_yaml(request: Request) -> str | None:
    """This cluster's nodes as a `--cluster` file (None: no inventory, the default one)."""
    with _database(request).session() as session:
        nodes = load_inventory(session=session)
    if not nodes:
        return None
    entries = [
        {
            "name": n.name,
            "cpu": f"{n.cpu_milli}m",
            "memory": f"{n.memory_mib}Mi",
            "gpus": n.gpu_count,
            "gpuModel": n.gpu_model,
            **({"gpuMemory": f"{n.gpu_memory_mib}Mi"} if n.gpu_memory_mib else {}),
        }
        for n in nodes
    ]
    return yaml.safe_dump({"nodes": entries}, sort_keys=False)


def replay(
    trace: bytes, suffix: str, cluster: str | None, jobs: int, policy: str
) -> dict[str, Any]:
    """Run `shoal simulate` on the trace; its text output and utilisation series."""
    with tempfile.TemporaryDirectory(prefix="shoal-whatif-") as tmp:
        d = Path(tmp)
        (d / f"trace{suffix}").write_bytes(trace)
        cmd = [sys.executable, "-m", "scheduler.cli.main", "simulate", str(d / f"trace{suffix}")]
        cmd += ["--limit", str(jobs), "--policy", policy, "--series", str(d / "series.csv")]
        if cluster is not None:
            (d / "cluster.yaml").write_text(cluster)
            cmd += ["--cluster", str(d / "cluster.yaml")]
        env = {**os.environ, "COLUMNS": "110", "NO_COLOR": "1", "TERM": "dumb"}
        try:
            done = subprocess.run(
                cmd, capture_output=True, text=True, timeout=TIMEOUT_S, env=env, check=False
            )
        except subprocess.TimeoutExpired:
            return {"error": f"the replay ran past {TIMEOUT_S:g} s: try fewer jobs"}
        if done.returncode != 0 or not (d / "series.csv").exists():
            why = (done.stderr or done.stdout).strip().splitlines()
            return {"error": "the trace could not be replayed: " + (why[-1] if why else "?")}
        with (d / "series.csv").open(newline="") as f:
            series = [
                (float(r["t_s"]), 100 * float(r["gpu_utilisation"])) for r in csv.DictReader(f)
            ]
    lines = [ln for ln in done.stdout.splitlines() if "series written to" not in ln]
    return {"output": "\n".join(lines).strip(), "series": series}


def chart(series: list[tuple[float, float]]) -> dict[str, Any]:
    hours = [(t / 3600, v) for t, v in series]
    end = hours[-1][0] if hours else 0.0
    return {
        "points": charts.polyline(hours, 0.0, end or 1.0, 100.0),
        "hours": end,
        "mean": _mean(hours, end),
    }


def _mean(points: list[tuple[float, float]], end: float) -> float:
    """Time-weighted mean of a step series (each value holds until the next point)."""
    if not points or end <= 0:
        return points[-1][1] if points else 0.0
    area = sum((t1 - t0) * v for (t0, v), (t1, _) in itertools.pairwise(points))
    return area / end


@router.get("/whatif", response_model=None)
def whatif_form(request: Request) -> Response:
    principal = _principal(request)
    if principal is None:
        return _to_login(request)
    return _page(request, "whatif.html", principal, result=None, **_defaults())


def _defaults(**kw: Any) -> dict[str, Any]:
    base = {"jobs": 200, "policy": "fgd", "policies": POLICIES, "max_jobs": MAX_JOBS}
    return {**base, "max_kib": MAX_TRACE_BYTES // 1024, **kw}


@router.post("/whatif", response_model=None)
async def whatif_run(request: Request) -> Response:
    principal = _principal(request)
    if principal is None:
        return _to_login(request)
    body = await request.body()
    fields = form_fields(request.headers.get("content-type", ""), body)
    sent = fields.get(csrf.FIELD, (None, b""))[1].decode(errors="replace")
    if not csrf.valid(request, {csrf.FIELD: [sent]}):
        refused = {"error": csrf.REFUSED}
        return _page(request, "whatif.html", principal, status=403, result=refused, **_defaults())
    filename, trace = fields.get("trace", (None, b""))
    try:
        jobs = int(fields.get("jobs", (None, b"200"))[1] or 200)
    except ValueError:
        jobs = -1
    policy = fields.get("policy", (None, b"fgd"))[1].decode(errors="replace")
    ctx = _defaults(jobs=jobs, policy=policy)
    error = None
    if not trace.strip():
        error = "trace: choose a trace file (CSV or YAML)"
    elif len(trace) > MAX_TRACE_BYTES:
        error = f"trace: at most {MAX_TRACE_BYTES // 1024} KiB (this one is {len(trace) // 1024})"
    elif not 1 <= jobs <= MAX_JOBS:
        error = f"jobs: a number from 1 to {MAX_JOBS}"
    elif policy not in POLICIES:
        error = f"policy: one of {', '.join(POLICIES)}"
    if error is not None:
        return _page(request, "whatif.html", principal, status=422, result={"error": error}, **ctx)
    if not _running.acquire(blocking=False):
        busy = {"error": "another what-if is running on this server: try again in a minute"}
        return _page(request, "whatif.html", principal, status=429, result=busy, **ctx)
    try:
        suffix = ".yaml" if (filename or "").lower().endswith((".yaml", ".yml")) else ".csv"
        result = replay(trace, suffix, nodes_yaml(request), jobs, policy)
    finally:
        _running.release()
    if "series" in result:
        result["chart"] = chart(result["series"])
    result["name"] = filename or "trace"
    status = 422 if "error" in result else 200
    return _page(request, "whatif.html", principal, status=status, result=result, **ctx)
