"""`shoal queues [create]` and `shoal nodes`: the cluster as the API sees it."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from scheduler.cli.client import Api

out = Console(highlight=False)


def _q(quota: dict[str, Any] | None) -> str:
    if not quota:
        return "-"
    total = quota.get("total")
    parts = [] if total is None else [f"{total:g}"]
    parts += [f"{k}:{v:g}" for k, v in quota.items() if k != "total" and v is not None]
    return " ".join(parts) or "-"


def queues_table(api: Api) -> None:
    queues = api.get("/queues")["data"]
    usage = {u["name"]: u for u in api.get("/cluster/summary")["queues"]}
    t = Table(box=None, header_style="bold")
    for col in (
        "QUEUE",
        "PARENT",
        "GUARANTEED",
        "LIMIT",
        "WEIGHT",
        "ALLOCATED",
        "RUNNING",
        "PENDING",
    ):
        t.add_column(col)
    for q in queues:
        u = usage.get(q["name"], {})
        t.add_row(
            q["name"],
            q.get("parent") or "-",
            _q(q["guaranteed"]),
            _q(q.get("limit")),
            f"{q['weight']:g}",
            f"{u.get('allocated', 0):g}",
            str(u.get("running", 0)),
            str(u.get("pending", 0)),
        )
    out.print(t)


def bar(allocated: float, width: int = 8) -> str:
    filled = round(min(1.0, allocated) * width)
    colour = "green" if allocated < 0.999 else "red"
    return f"[{colour}]{'█' * filled}[/{colour}][dim]{'░' * (width - filled)}[/dim]"


def _rules(node: dict[str, Any]) -> str:
    """Its labels (but the hostname every node has) and taints, as kubectl writes them."""
    labels = [
        f"{k}={v}" for k, v in (node.get("labels") or {}).items() if k != "kubernetes.io/hostname"
    ]
    taints = [
        f"{t['key']}={t['value']}:{t['effect']}" if t["value"] else f"{t['key']}:{t['effect']}"
        for t in node.get("taints") or []
    ]
    return "  ".join(
        part
        for part in (
            "labels " + ",".join(labels) if labels else "",
            "taints " + ",".join(taints) if taints else "",
        )
        if part
    )


def nodes_map(api: Api) -> None:
    """One line per GPU: a bar of how much is held, and by whom (job/worker:fraction)."""
    nodes = api.get("/nodes")["data"]
    summary = api.get("/cluster/summary")["gpus"]
    names = {j["id"]: j["name"] for j in api.get("/jobs", limit=500)["data"]}
    for n in nodes:
        out.print(
            f"[bold]{n['name']}[/bold]  {n['gpuModel'] or 'no GPU'}  "
            f"cpu {n['cpuMilli'] / 1000:g}  memory {n['memoryMib'] // 1024}Gi"
        )
        rules = _rules(n)
        if rules:
            out.print(f"  [dim]{rules}[/dim]", markup=True)
        for g in n["gpus"]:
            shares = ", ".join(
                f"{names.get(s['jobId'], s['jobId']) or 'other'}/w{s['worker']}:{s['fraction']:g}"
                for s in g["shares"]
            )
            out.print(f"  gpu{g['index']}  {bar(g['allocated'])} {g['allocated']:.2f}  {shares}")
    out.print(
        f"GPUs: {summary['allocated']:g} of {summary['total']:g} allocated, "
        f"{summary['idle']:g} idle"
    )
