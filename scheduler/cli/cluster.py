"""`shoal queues` (a tree) and `shoal nodes`: the cluster as the API sees it."""

from __future__ import annotations

from typing import Any

from scheduler.cli import output
from scheduler.cli.client import Api
from scheduler.cli.output import Format


def quota(q: dict[str, Any] | None) -> str:
    """`{total: 8, H100: 4}` as `8 H100:4`; none as `-`."""
    if not q:
        return "-"
    total = q.get("total")
    parts = [] if total is None else [f"{total:g}"]
    parts += [f"{k}:{v:g}" for k, v in q.items() if k != "total" and v is not None]
    return " ".join(parts) or "-"


def tree(queues: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """Queues in tree order, each with its depth: parents before their children, siblings
    by name. A queue whose parent is not listed (not visible, or gone) is a root."""
    names = {q["name"] for q in queues}
    children: dict[str | None, list[dict[str, Any]]] = {}
    for q in sorted(queues, key=lambda q: q["name"]):
        parent = q.get("parent") if q.get("parent") in names else None
        children.setdefault(parent, []).append(q)
    order: list[tuple[int, dict[str, Any]]] = []
    seen: set[str] = set()

    def walk(parent: str | None, depth: int) -> None:
        for q in children.get(parent, []):
            if q["name"] not in seen:  # a cycle cannot loop forever
                seen.add(q["name"])
                order.append((depth, q))
                walk(q["name"], depth + 1)

    walk(None, 0)
    order += [(0, q) for q in queues if q["name"] not in seen]
    return order


def rolled_up(own: dict[str, int], parents: dict[str, str | None]) -> dict[str, int]:
    """Each queue's count plus its descendants' (as the dashboard shows a department)."""
    total: dict[str, int] = dict.fromkeys(parents, 0)
    for name, n in own.items():
        seen: set[str] = set()
        q: str | None = name
        while q is not None and q not in seen:
            seen.add(q)
            total[q] = total.get(q, 0) + n
            q = parents.get(q)
    return total


def queues_table(api: Api, fmt: Format) -> None:
    """A tree of queues: a parent's ALLOCATED, RUNNING and PENDING include its children's.
    As data, each queue with `usage`: what `/cluster/summary` says of it."""
    queues = api.get("/queues")["data"]
    usage = {u["name"]: u for u in api.get("/cluster/summary")["queues"]}
    if output.items(fmt, [{**q, "usage": usage.get(q["name"])} for q in queues]):
        return
    parents = {q["name"]: q.get("parent") for q in queues}
    running = rolled_up({n: u.get("running", 0) for n, u in usage.items()}, parents)
    pending = rolled_up({n: u.get("pending", 0) for n, u in usage.items()}, parents)
    headers = ["QUEUE", "GUARANTEED", "LIMIT", "WEIGHT", "ALLOCATED", "RUNNING", "PENDING"]
    wide = fmt is Format.WIDE
    if wide:
        headers += ["PRIORITY", "PARENT"]
    rows = []
    for depth, q in tree(queues):
        name = q["name"] if depth == 0 else "  " * (depth - 1) + "└ " + q["name"]
        row = [
            name,
            quota(q["guaranteed"]),
            quota(q.get("limit")),
            f"{q['weight']:g}",
            f"{usage.get(q['name'], {}).get('allocated', 0):g}",
            str(running.get(q["name"], 0)),
            str(pending.get(q["name"], 0)),
        ]
        rows.append([*row, str(q["priority"]), q.get("parent") or "-"] if wide else row)
    output.table(headers, rows)


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


def nodes_map(api: Api, fmt: Format) -> None:
    """One line per GPU: a bar of how much is held, and by whom (job/worker:fraction)."""
    nodes = api.get("/nodes")["data"]
    if output.items(fmt, nodes):
        return
    summary = api.get("/cluster/summary")["gpus"]
    names = {j["id"]: j["name"] for j in api.get("/jobs", limit=500)["data"]}
    for n in nodes:
        output.out.print(
            f"[bold]{n['name']}[/bold]  {n['gpuModel'] or 'no GPU'}  "
            f"cpu {n['cpuMilli'] / 1000:g}  memory {n['memoryMib'] // 1024}Gi"
        )
        rules = _rules(n)
        if rules:
            output.out.print(f"  [dim]{rules}[/dim]", markup=True)
        for g in n["gpus"]:
            shares = ", ".join(
                f"{names.get(s['jobId'], s['jobId']) or 'other'}/w{s['worker']}:{s['fraction']:g}"
                + (f" (draining, {s['stopsInSeconds']}s)" if s.get("draining") else "")
                for s in g["shares"]
            )
            output.out.print(
                f"  gpu{g['index']}  {bar(g['allocated'])} {g['allocated']:.2f}  {shares}"
            )
    output.out.print(
        f"GPUs: {summary['allocated']:g} of {summary['total']:g} allocated, "
        f"{summary['idle']:g} idle"
    )
