"""`shoal explain JOB`: the API's full account of a job's fate (`GET /jobs/{id}/explain`):
the decision and the reason with its numbers, its place in the order, the fair-share
arithmetic of its queue and the queue's ancestors, the jobs it would preempt, and the
best candidate nodes with why each does or does not fit."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from scheduler.cli import output
from scheduler.cli.client import Api
from scheduler.cli.output import Format


def _get(d: dict[str, Any], camel: str, snake: str) -> Any:
    """A key as the API documents it (camelCase), or as older servers wrote it."""
    return d.get(camel, d.get(snake))


def _n(x: float | None) -> str:
    return "-" if x is None else f"{x:g}"


def _details(details: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in details.items() if not isinstance(v, (dict, list)))


def fits(c: dict[str, Any]) -> str:
    """yes: the whole job fits on the node; part: some of its workers (a gang's others
    must fit elsewhere at once); no."""
    return "yes" if c["fits"] else "part" if c.get("workers") else "no"


def show(api: Api, name: str, fmt: Format) -> None:
    job = api.find_job(name)
    e = api.get(f"/jobs/{job['id']}/explain")
    if output.data(fmt, e):
        return
    output.out.print(
        f"[bold]{job['name']}[/bold]  id {job['id']}  queue {e['queue']}  phase {job['phase']}"
        f"  decision [bold]{e['decision']}[/bold]  policy {e.get('policy', '-')}"
    )
    position, in_queue = e.get("position"), _get(e, "queuePosition", "queue_position")
    if position is not None or in_queue is not None:
        output.out.print(
            f"  place: {position or '-'} in the cycle's order of pending jobs, "
            f"{in_queue or '-'} in queue {e['queue']}"
        )
    reason = e.get("reason")
    if reason:
        output.out.print(
            f"  [yellow]reason:[/yellow] {reason.get('code')}: {reason.get('message')}"
        )
        numbers = _details(reason.get("details") or {})
        if numbers:
            output.out.print(f"  [dim]{numbers}[/dim]")
    shares = _get(e, "fairShare", "fair_share") or []
    if shares:
        t = Table(title="fair share (its queue, then its ancestors)", box=None)
        cols = ("QUEUE", "RESOURCE", "GUARANTEED", "LIMIT", "WEIGHT", "USAGE", "DEMAND")
        for col in (*cols, "ENTITLED", "SHARE"):
            t.add_column(col, header_style="bold", no_wrap=True)
        for s in shares:
            t.add_row(
                s["queue"],
                s["resource"],
                _n(s["guaranteed"]),
                _n(s.get("limit")),
                _n(s["weight"]),
                _n(s["usage"]),
                _n(s["demand"]),
                _n(s["entitled"]),
                _n(s["share"]),
            )
        output.out.print(t)
    for p in e.get("placements") or []:
        gpus = ",".join(map(str, p.get("gpus") or [])) or "-"
        output.out.print(f"  would place w{p.get('worker')} on {p.get('node')} gpus {gpus}")
    for p in e.get("preempts") or []:
        victim = _get(p, "jobId", "job_id")
        output.out.print(f"  [red]would preempt[/red] {victim}: {p.get('reason', '')}")
    candidates = e.get("candidates") or []
    if candidates:
        t = Table(title="candidate nodes", box=None)
        t.add_column("NODE", header_style="bold", no_wrap=True)
        t.add_column("FITS", header_style="bold", no_wrap=True)
        t.add_column("WHY", header_style="bold", overflow="fold")
        for c in candidates:
            t.add_row(c["node"], fits(c), c["reason"])
        output.out.print(t)
    elif e["decision"] == "pending":
        output.out.print("  no candidate node")
