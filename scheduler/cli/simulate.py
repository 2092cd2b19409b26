"""`shoal simulate TRACE`: replay a trace in virtual time and print what happened."""

from __future__ import annotations

import csv
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from scheduler import model
from scheduler.backends.local import cluster
from scheduler.sim import replay, trace
from scheduler.spec.queue import QueueSpec

out = Console(highlight=False)


def alibaba_nodes(path: Path, limit: int | None) -> tuple[model.Node, ...]:
    nodes = []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            nodes.append(
                model.Node(
                    name=row["sn"],
                    cpu_milli=int(row["cpu_milli"]),
                    memory_mib=int(row["memory_mib"]),
                    gpu_count=int(row["gpu"]),
                    gpu_model=row["model"],
                    gpu_memory_mib=32768 if "32" in row["model"] else 16384,
                )
            )
            if limit is not None and len(nodes) >= limit:
                break
    return tuple(nodes)


def run(
    trace_file: Path,
    *,
    cluster_file: Path | None,
    alibaba_node_file: Path | None,
    node_limit: int | None,
    queues_file: Path | None,
    limit: int | None,
    policy: str,
    tick_s: float,
    arrival_scale: float,
    max_duration_s: float,
    series_out: Path | None,
    plot_out: Path | None = None,
    every_tick: bool = False,
) -> None:
    jobs = trace.load(trace_file, limit=limit, max_duration_s=max_duration_s)
    if alibaba_node_file is not None:
        nodes = alibaba_nodes(alibaba_node_file, node_limit)
    else:
        try:
            nodes = cluster.load_nodes(cluster_file)
        except ValueError as e:
            raise SystemExit(f"{cluster_file}: {e}") from None
    queues = _queues(queues_file)
    gpus = sum(n.gpu_count for n in nodes)
    out.print(
        f"replaying {len(jobs)} GPU jobs from {trace_file.name} on {len(nodes)} nodes "
        f"({gpus} GPUs), policy {policy}"
    )
    rep, wall = _replay(
        jobs,
        nodes,
        queues=queues,
        config=model.Config(policy=model.Policy(policy)),
        tick_s=tick_s,
        arrival_scale=arrival_scale,
        every_tick=every_tick,
    )
    _summary(rep, wall)
    out.print(_utilisation_table(rep))
    out.print(_queue_table(rep))
    out.print(_waits_table(rep))
    if series_out is not None:
        _write_series(rep, series_out)
    if plot_out is not None:
        from scheduler.sim import plot

        plot.write(rep, plot_out, title=f"{trace_file.name}: {len(jobs)} jobs, {len(nodes)} nodes")
        out.print(f"plot written to {plot_out}")


def _queues(path: Path | None) -> list[QueueSpec] | None:
    if path is None:
        return None
    data = yaml.safe_load(path.read_text())
    return [QueueSpec.model_validate(q) for q in (data.get("queues", data) or [])]


def _replay(
    jobs: Sequence[trace.TraceJob],
    nodes: Sequence[model.Node],
    *,
    queues: list[QueueSpec] | None,
    config: model.Config,
    tick_s: float,
    arrival_scale: float,
    every_tick: bool,
) -> tuple[replay.SimReport, float]:
    """The replay under a progress bar; returns the report and its wall time (s)."""
    # The replay prints nothing until it ends; the bar counts jobs that have left the system.
    with Progress(
        "jobs done",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=out,
        transient=True,
    ) as bar:
        task = bar.add_task("replay", total=len(jobs))
        wall = time.perf_counter()
        rep = replay.simulate(
            jobs,
            nodes,
            queues=queues,
            config=config,
            tick_s=tick_s,
            arrival_scale=arrival_scale,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
            every_tick=every_tick,
        )
        return rep, time.perf_counter() - wall


def _summary(rep: replay.SimReport, wall: float) -> None:
    span = rep.end - rep.start
    skipped = f" (+{rep.skipped_ticks} idle ticks skipped)" if rep.skipped_ticks else ""
    out.print(
        f"virtual time {span / 3600:.1f} h in {rep.cycles} cycles{skipped}, {wall:.1f} s; "
        f"placed {rep.placed}, "
        f"finished {rep.finished}, never placed {rep.never_placed}"
        + (
            f"; {rep.dropped_gpu_types} GPU-type constraints dropped (no such model here)"
            if rep.dropped_gpu_types
            else ""
        )
    )
    out.print(
        f"mean utilisation: GPU {rep.mean_utilisation():.1%}, CPU {rep.mean_of(rep.cpu):.1%}, "
        f"memory {rep.mean_of(rep.memory):.1%} (what the jobs held of the cluster's)"
    )
    if span > 0:
        out.print(
            f"some job was waiting during {rep.waiting_s / span:.0%} of the replay (the rest "
            "of the time every job that had arrived ran: low use there is the trace's load)"
        )
    top = max(rep.waited.items(), key=lambda kv: kv[1], default=("", 0.0))[0]
    if top == "NoFittingNode (CPU or memory)":
        out.print(
            "jobs waited mostly for CPU or memory, not GPUs (GPUs stay idle while CPU-heavy "
            "pods queue): give the nodes more CPU per GPU (--cluster), or replay on the "
            "trace's own nodes (--alibaba-nodes)"
        )
    never = Counter(kind for j, (kind, _) in rep.last_reason.items() if j not in rep.placed_ids)
    if never:
        out.print(
            "never placed, by their last reason: "
            + ", ".join(f"{k} x{n}" for k, n in never.most_common())
        )
    if rep.invariant_reports:
        kinds = ", ".join(f"{k} x{n}" for k, n in sorted(rep.invariant_reports.items()))
        out.print(f"core invariant reports (cycles): {kinds}")


def _spans(rep: replay.SimReport, buckets: int) -> list[tuple[float, float]]:
    span = rep.end - rep.start
    width = span / buckets if span > 0 else 1.0
    return [(rep.start + b * width, rep.start + (b + 1) * width) for b in range(buckets)]


def _utilisation_table(rep: replay.SimReport, buckets: int = 10) -> Table:
    """Share of the cluster's GPUs, CPU and memory held, and the main reason jobs
    waited, time-weighted, in `buckets` equal spans."""
    t = Table(title="utilisation over time", box=None, header_style="bold")
    for col in ("FROM (h)", "GPUs HELD", "CPU", "MEMORY", "WAITING MOSTLY FOR"):
        t.add_column(col)
    gpu = [u for _, u in rep.utilisation]
    waiting = {k: [w.get(k, 0.0) for w in rep.waited_at] for k in rep.waited}
    for lo, hi in _spans(rep, buckets):
        share = rep.mean_of(gpu, lo, hi)
        mean = {k: rep.mean_of(series, lo, hi) for k, series in waiting.items()}
        top = sorted(((v, k) for k, v in mean.items() if v > 0), reverse=True)[:1]
        t.add_row(
            f"{(lo - rep.start) / 3600:.1f}",
            f"{'█' * round(share * 20):<20} {share:.0%}",
            f"{rep.mean_of(rep.cpu, lo, hi):.0%}",
            f"{rep.mean_of(rep.memory, lo, hi):.0%}",
            f"{top[0][1]} ({top[0][0]:.1f} jobs)" if top else "-",
        )
    return t


def _waits_table(rep: replay.SimReport) -> Table:
    """Why jobs waited: each reason's share of all job-hours spent pending."""
    t = Table(title="why jobs waited (share of waiting job-hours)", box=None, header_style="bold")
    for col in ("REASON", "JOB-HOURS", "SHARE", "FOR EXAMPLE"):
        t.add_column(col)
    total = sum(rep.waited.values())
    for kind, secs in sorted(rep.waited.items(), key=lambda kv: -kv[1]):
        t.add_row(
            kind, f"{secs / 3600:.1f}", f"{secs / total:.0%}", rep.examples.get(kind, "")[:120]
        )
    return t


def _queue_table(rep: replay.SimReport) -> Table:
    q = Table(title="per queue", box=None, header_style="bold")
    for col in (
        "QUEUE",
        "GUAR",
        "HELD",  # time-weighted mean GPUs
        "PLACED",
        "MEAN WAIT (s)",
        "P95 WAIT (s)",
        "PREEMPTIONS",
        "GUARANTEE VIOLATION (s)",
    ):
        q.add_column(col)
    held = rep.mean_usage()
    names = set(rep.delays) | set(rep.preemptions) | set(rep.violation_s) | set(rep.guaranteed)
    for name in sorted(names):
        d = sorted(rep.delays.get(name, []))
        p95 = d[min(len(d) - 1, int(0.95 * len(d)))] if d else 0.0
        q.add_row(
            name,
            f"{rep.guaranteed.get(name, 0.0):g}",
            f"{held.get(name, 0.0):.2f}",
            str(len(d)),
            f"{statistics.fmean(d):.0f}" if d else "-",
            f"{p95:.0f}",
            str(rep.preemptions.get(name, 0)),
            f"{rep.violation_s.get(name, 0.0):.0f}",
        )
    return q


def _write_series(rep: replay.SimReport, path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t_s", "gpu_utilisation"])
        for ts, u in rep.utilisation:
            w.writerow([f"{ts - rep.start:.1f}", f"{u:.4f}"])
    out.print(f"utilisation series written to {path}")
