"""`shoal submit | jobs | job | logs | cancel`: jobs through the REST API."""

from __future__ import annotations

import secrets
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from scheduler.cli import output
from scheduler.cli.client import Api, die
from scheduler.cli.output import Format
from scheduler.spec import JobSpec
from scheduler.worker import progress

err = Console(stderr=True, highlight=False)
FINISHED = ("Succeeded", "Failed", "Cancelled")


def span(s: float) -> str:
    return f"{s:.0f}s" if s < 120 else f"{s / 60:.0f}m" if s < 7200 else f"{s / 3600:.0f}h"


def age(ts: str | None) -> str:
    if not ts:
        return "-"
    return span((datetime.now(UTC) - datetime.fromisoformat(ts)).total_seconds())


def build_spec(
    file: Path | None,
    flags: dict[str, Any],
    command: list[str],
    more: dict[str, list[Any]] | None = None,
) -> dict[str, Any]:
    """The job body: the file's fields, overridden by the flags that were given; `more`:
    list fields the flags add to the file's (`--volume`: volumes and their mounts)."""
    body: dict[str, Any] = {}
    if file is not None:
        try:
            loaded = yaml.safe_load(file.read_text())
        except (OSError, yaml.YAMLError) as exc:
            die(f"cannot read {file}: {exc}")
        if isinstance(loaded, dict) and loaded.get("kind") == "TrainingJob":
            loaded = {"name": loaded["metadata"]["name"], **loaded.get("spec", {})}
        if not isinstance(loaded, dict):
            die(f"{file} must hold one job (a mapping)")
        body.update(loaded)
    body.update({k: v for k, v in flags.items() if v is not None})
    for key, items in (more or {}).items():
        if items:
            body[key] = [*(body.get(key) or []), *items]
    if command:
        body["command"] = command
        body.pop("args", None)
    body.setdefault("image", "local")
    if "name" not in body:
        body["name"] = f"job-{secrets.token_hex(3)}"
    try:  # the same validation as the API, so mistakes are caught before any request
        return JobSpec.model_validate(body).model_dump(
            mode="json", by_alias=True, exclude_none=True
        )
    except ValidationError as exc:
        lines = [f"{'.'.join(str(x) for x in e['loc']) or 'job'}: {e['msg']}" for e in exc.errors()]
        die("invalid job: " + "; ".join(lines))


def submit(api: Api, body: dict[str, Any]) -> dict[str, Any]:
    job: dict[str, Any] = api.post("/jobs", body)
    output.out.print(
        f"job [bold]{job['name']}[/bold] submitted (id {job['id']}, queue {job['queue']})"
    )
    return job


def gpu_of(j: dict[str, Any]) -> str:
    """Its GPUs now: workers x each one's (`2x0.5`, `3x1`, `2x16Gi`)."""
    spec = j["spec"]
    each = f"{spec['gpu']:g}" if spec.get("gpu") is not None else spec.get("gpuMemory")
    return f"{size(j)}x{each}" if each else "-"


def size(j: dict[str, Any]) -> int:
    """Its workers now; a finished job's, the size it ended at (the API's `workers`)."""
    w = j["spec"]["workers"]
    return int(j.get("workers") or (w["min"] if isinstance(w, dict) else w))


def most_workers(spec: dict[str, Any]) -> int:
    """The most workers it can have: a rigid job's count, an elastic job's `max`."""
    w = spec["workers"]
    return int(w["max"] if isinstance(w, dict) else w)


def workers_of(j: dict[str, Any]) -> str:
    """Its size; an elastic job's with its range (`3 (2-8)`)."""
    w = j["spec"]["workers"]
    return f"{size(j)} ({w['min']}-{w['max']})" if isinstance(w, dict) else str(size(j))


def why(j: dict[str, Any]) -> str:
    """A Pending job's reason; a Failed (or Preempted) one's last condition: what went wrong."""
    if j["phase"] == "Pending":
        return str((j.get("pendingReason") or {}).get("message", ""))
    if j["phase"] in ("Failed", "Preempted") and j.get("conditions"):
        last = j["conditions"][-1]
        return ": ".join(x for x in (last.get("reason"), last.get("message")) if x)
    return ""


def eta(j: dict[str, Any]) -> str:
    """A Pending job's estimated start, as `#position ~in 2h`; `#position overdue` once
    that time has passed while it still waits (never "now": issue 35, it read `#1 now`
    while the job stayed blocked); `#position ?` when no estimate is honest (no `#` while
    its position is not known either); '-' for a job that is not pending or has none."""
    e = j.get("estimatedStart")
    if j["phase"] != "Pending" or not e:
        return "-"
    place = f"#{e['position']} " if e.get("position") else ""
    if not e.get("at"):
        return f"{place}?"
    left = datetime.fromisoformat(e["at"]).timestamp() - time.time()
    if e.get("overdue") or left <= 0:  # the server's word, or this clock's
        return f"{place}overdue"
    return f"{place}~in {span(max(left, 1.0))}"


def eta_line(j: dict[str, Any]) -> str:
    """The estimate in words, with what it rests on or why there is none."""
    e = j.get("estimatedStart")
    if j["phase"] != "Pending" or not e:
        return ""
    place = f"position {e['position']} in its queue; " if e.get("position") else ""
    if not e.get("at"):
        return f"{place}start unknown: {e['unknown']}"
    when = eta(j)
    if when.endswith("overdue"):
        ago = span(max(0.0, time.time() - datetime.fromisoformat(e["at"]).timestamp()))
        return f"{place}estimated start {when}: it was due {ago} ago ({e['basis']})"
    return f"{place}estimated start {when} ({e['basis']})"


def jobs_table(api: Api, queue: str | None, phase: str | None, limit: int, fmt: Format) -> None:
    """The jobs, newest first. The table fits the width (the reason gives way); `wide`
    adds the id, submitter, restarts and estimate, and shows reasons whole."""
    page = api.get("/jobs", queue=queue, phase=phase, limit=limit)
    if output.items(fmt, page["data"]):
        return
    wide = fmt is Format.WIDE
    headers = ["NAME", "QUEUE", "PHASE", "WORKERS", "GPU", "AGE", "REASON"]
    if wide:
        headers[1:1] = ["ID"]
        headers[3:3] = ["SUBMITTER"]
        headers[-1:-1] = ["RESTARTS", "ETA"]
    rows = []
    for j in page["data"]:
        when, reason = eta(j), why(j)
        row = [
            j["name"],
            j["queue"],
            colour(j["phase"]),
            workers_of(j),
            gpu_of(j),
            age(j["createdAt"]),
        ]
        if wide:
            row[1:1] = [j["id"]]
            row[3:3] = [j.get("submitter") or "-"]
            rows.append([*row, str(j["restarts"]), when, reason])
        else:
            rows.append([*row, f"{when} {reason}" if when != "-" else reason])
    output.table(headers, rows, plain="REASON", fold=wide)


def colour(phase: str) -> str:
    c = {
        "Running": "green",
        "Succeeded": "cyan",
        "Failed": "red",
        "Pending": "yellow",
        "Cancelled": "magenta",
        "Preempted": "red",
        "Scheduled": "blue",
    }.get(phase, "white")
    return f"[{c}]{phase}[/{c}]"


def show_job(api: Api, name: str, fmt: Format) -> None:
    j = api.find_job(name)
    if output.data(fmt, j):
        return
    spec = j["spec"]
    ns = f"  namespace {spec['namespace']}" if spec.get("namespace") else ""
    output.out.print(
        f"[bold]{j['name']}[/bold]  id {j['id']}  queue {j['queue']}{ns}"
        f"  phase {colour(j['phase'])}  attempt {j['attempt']}  restarts {j['restarts']}"
    )
    argv = " ".join(spec.get("command", []) + spec.get("args", []))
    output.out.print(f"  workers {workers_of(j)}  gpu {gpu_of(j)}  command {argv}")
    for r in j.get("resizes", [])[-5:]:
        output.out.print(f"  resized {age(r['at'])} ago: {r['message']}")
    if j.get("pendingReason") and j["phase"] == "Pending":
        r = j["pendingReason"]
        output.out.print(f"  [yellow]pending:[/yellow] {r['code']}: {r['message']}")
    if line := eta_line(j):
        output.out.print(f"  {line}")
    if j["placements"]:
        t = Table(title="placement", box=None, header_style="bold")
        for col in ("WORKER", "NODE", "GPUS", "FRACTION"):
            t.add_column(col)
        for p in j["placements"]:
            t.add_row(
                str(p["worker"]),
                p["node"],
                ",".join(map(str, p["gpus"])) or "-",
                f"{p['fraction']:g}",
            )
        output.out.print(t)
    # The newest page (the history is paginated), shown oldest first.
    events = api.get(f"/jobs/{j['id']}/events?order=desc&limit=200")["data"][::-1]
    t = Table(title="events", box=None, header_style="bold")
    for col in ("AGE", "KIND", "REASON", "MESSAGE"):
        t.add_column(col)
    shown = [e for e in events if e["kind"] != "Progress"]
    last = [e for e in events if e["kind"] == "Progress"][-1:]
    for e in shown[-15:] + last:
        t.add_row(age(e["at"]), e["kind"], e["reason"], e["message"])
    output.out.print(t)


def follow_logs(
    api: Api, name: str, *, follow: bool, worker: int | None, attempt: int | None
) -> int:
    """Print the logs (all of them: the API gives 256 KiB a call); with `follow`, until the
    job finishes: 0 if it Succeeded, else 1. A line cut by a call's limit is held until
    its end comes, so it is printed whole."""
    j = api.find_job(name)
    offsets: dict[tuple[int, int], int] = {}
    partial: dict[tuple[int, int], str] = {}  # the unfinished last line of each worker
    current = attempt
    said: tuple[Any, ...] = ()
    while True:
        if follow:
            said = say_waiting(j, said)
        starts = None
        if current is not None:
            starts = ",".join(
                str(offsets.get((current, w), 0)) for w in range(most_workers(j["spec"]))
            )
        resp = api.get(f"/jobs/{j['id']}/logs", attempt=current, offsets=starts)
        current = resp["attempt"]
        new_text = False
        for c in resp["chunks"]:
            if worker is not None and c["worker"] != worker:
                continue
            key = (c["attempt"], c["worker"])
            offsets[key] = c["nextOffset"]
            new_text = new_text or bool(c["text"])
            # Split at newlines only: a "\r" (a progress bar) is the worker's to keep.
            *lines, partial[key] = (partial.get(key, "") + c["text"]).split("\n")
            for line in lines:
                print_line(c["worker"], line)
        if not new_text:  # nothing more for now: what a worker left unfinished is shown
            flush(partial)
        if not follow:
            if new_text:
                continue  # more than one call's worth: read on to the end
            return 0
        j = api.get(f"/jobs/{j['id']}")
        if attempt is None and j["attempt"] and current is not None and j["attempt"] > current:
            current = j["attempt"]
            flush(partial)
            output.out.print(f"[bold]--- attempt {current} (restarts {j['restarts']}) ---[/bold]")
            continue
        if j["phase"] in FINISHED and not new_text:
            output.out.print(f"job {j['name']}: {colour(j['phase'])}")
            return 0 if j["phase"] == "Succeeded" else 1
        time.sleep(0.5)


def flush(partial: dict[tuple[int, int], str]) -> None:
    """Print the unfinished last lines held back, by worker, and forget them."""
    for (_, w), line in sorted(partial.items()):
        if line:
            print_line(w, line)
    partial.clear()


def waiting_line(j: dict[str, Any]) -> str:
    """What a job that has no output yet is waiting for: its phase and reason."""
    phase = j["phase"]
    if phase == "Pending":
        r = j.get("pendingReason") or {}
        why = f"{r['code']}: {r['message']}" if r.get("code") else "waiting for the scheduler"
        later = eta_line(j)
        return f"job {j['name']}: Pending - {why}" + (f"; {later}" if later else "")
    if phase == "Scheduled":
        return f"job {j['name']}: Scheduled - starting {size(j)} worker(s)"
    return ""


def say_waiting(j: dict[str, Any], said: tuple[Any, ...]) -> tuple[Any, ...]:
    """Print the job's waiting line (to stderr, so the worker output on stdout stays
    clean) when something a user cares about changed since the last one: its phase, its
    reason, its position, whether its start is known or overdue, or the estimate moving by
    more than a minute and a tenth of the time it had left. Not because "~in 59s" became
    "~in 58s", and on one line however narrow the terminal or pipe (issue 35: piped, rich
    wrapped it at 80 columns and it was reprinted, 3 lines, every second). Returns what
    is now said (`()`: nothing yet)."""
    line = waiting_line(j)
    if not line:
        return said
    pending = j["phase"] == "Pending"
    r = (j.get("pendingReason") or {}) if pending else {}
    e = (j.get("estimatedStart") or {}) if pending else {}
    at = datetime.fromisoformat(e["at"]).timestamp() if e.get("at") else None
    overdue = eta(j).endswith("overdue")
    state = "none" if not e else "unknown" if at is None else "overdue" if overdue else "ahead"
    # The words of an unknown quote times ("+3,600 s") that move with every forecast.
    gist = " ".join(w for w in str(e.get("unknown", "")).split() if not any(map(str.isdigit, w)))
    now = (j["phase"], r.get("code"), r.get("message"), e.get("position"), state, gist)
    if said and said[:-1] == now:  # the same but for when: news only if it moved a lot
        before = said[-1]
        if (
            at is None
            or before is None
            or abs(at - before) <= max(60.0, (before - time.time()) / 10)
        ):
            return said  # kept as said, so that small moves add up against it
    err.print(line, style="dim", markup=False, highlight=False, soft_wrap=True)
    return (*now, at)


def print_line(worker: int, line: str) -> None:
    """One line of worker output, written as it is: never wrapped to the terminal's (or,
    piped, rich's default 80) width, never read as markup or emoji codes."""
    data = progress.parse(line)
    if data is not None:
        loss = data.get("loss")
        extra = f"  loss {loss:.4f}" if isinstance(loss, (int, float)) else ""
        line = f"step {data.get('step')}{extra}"
    tag = f"w{worker}"
    if sys.stdout.isatty():
        tag = f"\x1b[2m{tag}\x1b[0m"
    sys.stdout.write(f"{tag} {line}\n")
    sys.stdout.flush()
