"""Where an elastic resize's time goes (issue 35): one grow and one shrink of the elastic
example through the real service, each broken into its stages, from the resize's record
to the first training step at the new size.

    nice .venv/bin/python -m bench.elastic_resize_timing [--max 4] [--wait-load 2.0] [--json]

The scenario is tests/e2e/test_elastic_e2e.py's: `shoal serve` (local backend, its default
8 GPUs, `--interval 0.5 --min-runtime 0`, a policy with `resizeIntervalSeconds: 5`),
queues `research` (guaranteed 2) and `prod` (guaranteed 6). A prod holder of 6 GPUs runs
while examples/pytorch-elastic/job.yaml (in research, `workers: {min: 2, max: --max}`,
torchrun, the example's env with STEPS large) starts at 2; the holder ends, and the job
grows into the idle GPUs; then a prod job of 6 GPUs comes back for its guarantee, and
the job is shrunk to 2. The job's env adds SHOAL_TIMING=1 (train.py's timestamped
start stages) and LOGLEVEL=INFO (torchrun's agent log lines, glog-style, with times).

Each stage's time is read from where it happens, never inferred:
- `recorded`: the `Resized` event's time (GET /jobs/{id}/events), the loop's cycle time;
- `backend call returned`: `shoal serve`'s log line `job <id>: <reason>`, written just
  after `grow`/`shrink` returned;
- grow: the new workers' shims created (their /proc start time, in the attempt record)
  and ready (their line in the launch ledger); shrink: the removed workers' stop files
  written (mtime) and their exit files (mtime: torchrun's agent has ended);
- torchrun's agents (their worker logs): the new agent up (its first log line: torch
  imported), a running agent noticing the change (`Detected N new nodes`, or its worker
  group `FAILED`), its rendezvous (`attempts to join`, `has joined round` of the new
  size, `Rendezvous complete`), `Starting worker group`;
- the training processes (train.py's SHOAL_TIMING lines, all ranks of the new size):
  `start` (before `import torch`), `imported`, `joined` (the gloo group formed),
  `loaded` (the checkpoint read and broadcast), then rank 0's first SHOAL_PROGRESS step
  at the new size.
Where several workers do a stage, the last one is shown (the stage is done when all
are), and `first` marks the first one. The load (1-minute average of /proc/loadavg) is
sampled every 2 s throughout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.serving import ROOT, free_port

EXAMPLE = ROOT / "examples" / "pytorch-elastic"
WAIT = "import os, time\nwhile not os.path.exists({!r}): time.sleep(0.2)"
# glog-style lines of torch.distributed.elastic: `I1206 04:05:25.626000 14332 path:line] msg`
GLOG = re.compile(r"^[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6}) +\d+ \S+\] (.*)$")
RDZV = "torch.distributed.elastic.rendezvous.dynamic_rendezvous"  # its INFO lines: rounds
SERVE_LOG = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) \S+ (\S+): (.*)$")


def load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def wait_for_quiet(below: float, most_s: float = 900, every_s: float = 30) -> float:
    """Poll the 1-minute load every `every_s` until it is below `below` (at most `most_s`);
    returns the load it measures at."""
    deadline = time.monotonic() + most_s
    while (now := load1()) >= below and time.monotonic() < deadline:
        print(f"load {now:.2f} >= {below}: waiting", file=sys.stderr, flush=True)
        time.sleep(every_s)
    return now


class LoadSampler(threading.Thread):
    """The 1-minute load average every 2 s while the measurement runs."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[float] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.samples.append(load1())
            self.done.wait(2.0)


# -- the service --------------------------------------------------------------------------


@dataclass
class Service:
    url: str
    state: Path
    work: Path  # flags, the checkpoint directory, the policy (readable by any worker user)
    http: httpx.Client
    log: Path


@contextmanager
def serve(keep: bool) -> Iterator[Service]:
    """`shoal serve` as tests/support/serve.py runs it (local backend, SQLite), with the
    policy's short resize interval; its workers killed and its files removed after."""
    state = Path(tempfile.mkdtemp(prefix="shoal-resize-state-"))
    work = Path(tempfile.mkdtemp(prefix="shoal-resize-work-"))
    work.chmod(0o755)  # workers may run as shoal-worker: they read the flags in here
    (work / "checkpoints").mkdir(mode=0o777)
    (work / "checkpoints").chmod(0o777)
    policy = work / "policy.yaml"
    policy.write_text("resizeIntervalSeconds: 5\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "SHOAL_STATE_DIR": str(state), "SHOAL_URL": url,
           "SHOAL_POLICY_FILE": str(policy), "PYTHONPATH": str(ROOT)}  # fmt: skip
    env.pop("SHOAL_TOKEN", None)
    cmd = [sys.executable, "-m", "scheduler.cli.main", "serve", "--port", str(port)]
    cmd += ["--min-runtime", "0", "--interval", "0.5"]
    log_path = state / "serve.log"
    log = log_path.open("w")
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"shoal serve did not start:\n{log_path.read_text()[-3000:]}")
            try:
                token = state / "admin-token"
                if token.exists() and httpx.get(f"{url}/healthz", timeout=30).is_success:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        headers = {"Authorization": f"Bearer {token.read_text().strip()}"}
        with httpx.Client(base_url=f"{url}/api/v1", headers=headers, timeout=60) as http:
            yield Service(url, state, work, http, log_path)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        from scheduler.backends.local import LocalBackend

        backend = LocalBackend(state)  # the server leaves workers running by design
        backend.kill_all()
        backend.close()
        if keep:
            print(f"kept: {state} {work}", file=sys.stderr)
        else:
            shutil.rmtree(state, ignore_errors=True)
            shutil.rmtree(work, ignore_errors=True)


def submit(svc: Service, body: dict[str, Any]) -> str:
    r = svc.http.post("/jobs", json=body)
    r.raise_for_status()
    return str(r.json()["id"])


def holder(name: str, workers: int, flag: Path) -> dict[str, Any]:
    """A rigid prod job of `workers` whole GPUs that runs until `flag` exists."""
    argv = ["python", "-c", WAIT.format(str(flag))]
    return {"name": name, "queue": "prod", "image": "local", "framework": "generic",
            "workers": workers, "gpu": 1, "command": argv}  # fmt: skip


def elastic(svc: Service, most: int) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    doc.update(queue="research", gpu=1, workers={"min": 2, "max": most})
    doc["args"] = [str(EXAMPLE / "train.py")]
    doc["env"].update(STEPS="100000", CHECKPOINT_DIR=str(svc.work / "checkpoints"),
                      SHOAL_TIMING="1", LOGLEVEL="INFO", TORCH_LOGS=RDZV)  # fmt: skip
    return doc


def until(what: str, check: Any, most_s: float = 300, every_s: float = 0.5) -> Any:
    deadline = time.monotonic() + most_s
    while time.monotonic() < deadline:
        if got := check():
            return got
        time.sleep(every_s)
    raise TimeoutError(f"waited {most_s:.0f} s for {what}")


# -- what the files say -------------------------------------------------------------------


@dataclass
class Line:
    t: float
    worker: int
    text: str


@dataclass
class Files:
    """The attempt's records, the launch ledger and every worker's log, read on from
    where the last read stopped."""

    state: Path
    job_id: str
    offsets: dict[Path, int] = field(default_factory=dict)
    lines: list[Line] = field(default_factory=list)  # glog lines, with their worker
    marks: list[dict[str, Any]] = field(default_factory=list)  # SHOAL_TIMING
    progress: list[dict[str, Any]] = field(default_factory=list)  # SHOAL_PROGRESS

    def record(self) -> dict[str, Any]:
        found = sorted(self.state.rglob("attempts/*.json"))
        recs = [json.loads(f.read_text()) for f in found]
        mine = [r for r in recs if r["job_id"] == self.job_id]
        return max(mine, key=lambda r: r["attempt"]) if mine else {}

    def read(self) -> None:
        for w in self.record().get("workers", []):
            path = Path(w["log"])
            if not path.exists():
                continue
            with path.open("rb") as f:
                f.seek(self.offsets.get(path, 0))
                chunk = f.read()
            end = chunk.rfind(b"\n") + 1
            self.offsets[path] = self.offsets.get(path, 0) + end
            for raw in chunk[:end].decode(errors="replace").splitlines():
                self._line(int(w["worker"]), raw)

    def _line(self, worker: int, raw: str) -> None:
        for tag, into in (("SHOAL_TIMING ", self.marks), ("SHOAL_PROGRESS ", self.progress)):
            if raw.startswith(tag):
                with contextlib.suppress(ValueError):  # a line a kill cut short
                    into.append({**json.loads(raw.removeprefix(tag)), "worker": worker})
                return
        if m := GLOG.match(raw):
            month, day, hh, mm, ss, us, text = m.groups()
            year = datetime.now().year  # glog leaves the year out; local time, as here
            at = datetime(year, int(month), int(day), int(hh), int(mm), int(ss), int(us))
            self.lines.append(Line(at.timestamp(), worker, text))

    def at_world(self, world: int, count: int = 3) -> bool:
        self.read()
        last = self.progress[-count:]
        return len(last) == count and all(p["world"] == world for p in last)


def serve_lines(log: Path, job_id: str) -> list[tuple[float, str]]:
    """`shoal serve`'s log lines that name the job (asctime is local time)."""
    out = []
    for raw in log.read_text(errors="replace").splitlines():
        if (m := SERVE_LOG.match(raw)) and job_id in m.group(4):
            at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp()
            out.append((at + int(m.group(2)) / 1000, m.group(4)))
    return out


def ledger(state: Path) -> dict[str, float]:
    """The launch ledger: each shim's key and the time it wrote its line."""
    out = {}
    for f in state.rglob("launches.log"):
        for raw in f.read_text().splitlines():
            key, _pid, at = raw.split()
            out[key] = float(at)
    return out


def _worker_of(key: str, job_id: str) -> int | None:
    """The worker index of a shim key (`instance:job:attempt:worker[.generation]`) of
    this job, or None."""
    job, _attempt, worker = key.split(":", 1)[1].rsplit(":", 2)
    return int(worker.split(".")[0]) if job == job_id else None


def proc_start(ticks: int) -> float:
    """A /proc start time (clock ticks since boot) as wall-clock time (through
    /proc/uptime: /proc/stat's btime is rounded to the second)."""
    booted = time.time() - float(Path("/proc/uptime").read_text().split()[0])
    return booted + ticks / os.sysconf("SC_CLK_TCK")


def mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


# -- one resize's stages ------------------------------------------------------------------


@dataclass
class Stage:
    name: str
    t: float | None  # wall clock
    note: str = ""


def _each(
    items: Sequence[tuple[int, float]], who: set[int] | None, per: str, over: str
) -> float | None:
    """Of (who, time) pairs: each one's first or last time (`per`), then the earliest or
    the latest of those (`over`: "first" is when the first one did it, "all" when the
    last one had)."""
    by: dict[int, list[float]] = {}
    for k, t in items:
        if who is None or k in who:
            by.setdefault(k, []).append(t)
    each = [min(ts) if per == "first" else max(ts) for ts in by.values()]
    if not each:
        return None
    return min(each) if over == "first" else max(each)


def stages(
    files: Files,
    svc: Service,
    *,
    kind: str,
    before: int,
    after: int,
    recorded: float,
    shrink_files: dict[int, tuple[float | None, float | None]],
) -> list[Stage]:
    """The stages of the resize recorded at `recorded` from `before` to `after` workers,
    until rank 0's first step at `after` (`shrink_files`: the removed workers' stop file
    and exit file times, read before the teardown removed the run directory)."""
    files.read()
    first_step = next(p for p in files.progress if p["world"] == after and p["t"] >= recorded)
    end = float(first_step["t"])
    window = [x for x in files.lines if recorded <= x.t <= end]
    new = set(range(before, after))  # empty for a shrink
    kept = set(range(min(before, after)))

    def agent(pattern: str, who: set[int], per: str = "first", over: str = "all") -> float | None:
        found = [(x.worker, x.t) for x in window if re.search(pattern, x.text)]
        return _each(found, who, per, over)

    out = [Stage("recorded (Resized event)", recorded)]
    called = [t for t, _ in serve_lines(svc.log, files.job_id) if t >= recorded - 1]
    out.append(Stage(f"{kind} call returned (serve log)", min(called, default=None)))
    rec = files.record()
    if kind == "grow":
        ws = [w for w in rec["workers"] if w["worker"] in new]
        created = [(w["worker"], proc_start(w["start_ticks"])) for w in ws if w.get("start_ticks")]
        keys = ledger(svc.state)
        ready = [(i, at) for key, at in keys.items() if (i := _worker_of(key, files.job_id)) in new]
        out += [
            Stage("new workers' shims created (/proc)", _each(created, None, "last", "all")),
            Stage("new workers' shims ready (ledger)", _each(ready, None, "last", "all")),
            Stage("new agents up: torch imported", agent(r"Starting elastic_operator", new)),
            Stage("new agents ask to join", agent(r"attempts to join the next round", new)),
            Stage("running agents see them (Detected)", agent(r"Detected \d+ new nodes", kept)),
        ]
    else:
        gone = set(range(after, before))
        stops = [(i, t) for i, (t, _) in shrink_files.items() if t is not None]
        ends = [(i, t) for i, (_, t) in shrink_files.items() if t is not None]
        out += [
            Stage("removed workers' stop files written", _each(stops, None, "last", "all")),
            Stage("removed agents get SIGTERM (log)", agent(r"death signal", gone)),
            Stage("removed agents ended (exit files)", _each(ends, None, "last", "all")),
            Stage(
                "a kept group FAILED (peer gone)", agent(r"Worker group FAILED", kept, over="first")
            ),
        ]
    every = kept | new
    size = f"in a world of size {after}\\."
    joined = [x for x in window if re.search("has joined round", x.text)]
    rounds = sorted({int(m.group(1)) for x in joined if (m := re.search(r"round (\d+)", x.text))})
    olds = [p for p in files.progress if p["world"] == before and p["t"] < end]
    last_old = float(olds[-1]["t"]) if olds else None
    out += [
        Stage("kept agents stop their groups", agent(r"Stopping worker group", kept)),
        Stage(f"last step at world {before} (rank 0)", last_old),
        Stage("kept agents ask to join", agent(r"attempts to join the next round", kept)),
        Stage("round of the new size: first joined", agent(size, every, "last", "first")),
        Stage("round of the new size: all joined", agent(size, every, "last"), f"rounds {rounds}"),
        Stage("rendezvous complete (all agents)", agent(r"Rendezvous complete for", every, "last")),
        Stage("worker groups started (all agents)", agent(r"Starting worker group", every, "last")),
    ]
    marks = [m for m in files.marks if m["world"] == after and recorded <= m["t"] <= end]

    def mark(at: str, over: str = "all") -> float | None:
        return _each(
            [(m["rank"], float(m["t"])) for m in marks if m["at"] == at], None, "last", over
        )

    out += [
        Stage("processes: first started", mark("start", "first")),
        Stage("processes: all started", mark("start")),
        Stage("processes: torch imported", mark("imported")),
        Stage("processes: gloo group formed", mark("joined")),
        Stage("processes: model, optimizer built", mark("built")),
        Stage("processes: checkpoint loaded", mark("loaded")),
        Stage(f"first step at world {after} (rank 0)", end, f"step {first_step['step']}"),
    ]
    if last_old is not None:
        out[-1].note += f"; no step for {end - last_old:.2f} s"
    return out


def table(title: str, got: list[Stage], recorded: float) -> str:
    rows = [f"{title}", f"  {'stage':<44} {'at (s)':>7} {'+ (s)':>7}"]
    prev = recorded
    for s in got:
        if s.t is None:
            rows.append(f"  {s.name:<44} {'-':>7} {'-':>7}  {s.note}".rstrip())
            continue
        rows.append(f"  {s.name:<44} {s.t - recorded:7.2f} {s.t - prev:7.2f}  {s.note}".rstrip())
        prev = max(prev, s.t)
    return "\n".join(rows)


# -- the run ------------------------------------------------------------------------------


def resized_at(svc: Service, job_id: str, after: int) -> float:
    events = svc.http.get(f"/jobs/{job_id}/events").json()["data"]
    for e in events:
        if e["kind"] == "Resized" and (e["data"] or {}).get("to") == after:
            at = datetime.fromisoformat(e["at"].replace("Z", "+00:00"))
            return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()  # the store's
    raise LookupError(f"no Resized event to {after} workers: {[e['kind'] for e in events]}")


def phase(svc: Service, job_id: str) -> str:
    return str(svc.http.get(f"/jobs/{job_id}").json()["phase"])


def run(most: int, keep: bool) -> dict[str, Any]:
    with serve(keep) as svc:
        for name, guaranteed in (("research", 2), ("prod", 6)):
            r = svc.http.post("/queues", json={"name": name, "guaranteed": guaranteed})
            r.raise_for_status()
        released, done = svc.work / "holder-may-finish", svc.work / "owner-may-finish"
        first = submit(svc, holder("holder", 6, released))
        until("the holder to run", lambda: phase(svc, first) == "Running", 180)
        job_id = submit(svc, elastic(svc, most))
        files = Files(svc.state, job_id)
        until("steps at world size 2", lambda: files.at_world(2), 300)
        released.touch()
        until(f"steps at world size {most}", lambda: files.at_world(most), 300)
        grown = resized_at(svc, job_id, most)
        owner = submit(svc, holder("owner", 6, done))
        until("steps at world size 2 again", lambda: files.at_world(2), 300)
        until("the owner to run", lambda: phase(svc, owner) == "Running", 120)
        shrunk = resized_at(svc, job_id, 2)
        rec = files.record()
        removed = {
            int(w["worker"]): (mtime(w["stop_file"]), mtime(w["exit_file"]))
            for w in rec["workers"]
            if w["worker"] >= 2 and w.get("stop_reason")
        }
        grow = stages(files, svc, kind="grow", before=2, after=most, recorded=grown,
                      shrink_files={})  # fmt: skip
        shrink = stages(files, svc, kind="shrink", before=most, after=2, recorded=shrunk,
                        shrink_files=removed)  # fmt: skip
        done.touch()
        svc.http.post(f"/jobs/{job_id}/cancel")
        return {"grow": (grown, grow), "shrink": (shrunk, shrink)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max", type=int, default=4, help="the job's max workers (grow 2 -> max)")
    ap.add_argument("--wait-load", type=float, default=None,
                    help="first wait (up to 15 min) for a 1-minute load below this")  # fmt: skip
    ap.add_argument("--keep", action="store_true", help="keep the state and work directories")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.wait_load is not None:
        wait_for_quiet(a.wait_load)
    sampler = LoadSampler()
    sampler.start()
    began = time.monotonic()
    got = run(a.max, a.keep)
    sampler.done.set()
    sampler.join()
    load = sampler.samples or [load1()]
    said = {"start": load[0], "mean": sum(load) / len(load), "max": max(load), "end": load[-1]}
    if a.json:
        out = {k: [{"stage": s.name, "s": None if s.t is None else round(s.t - t0, 3),
                    "note": s.note} for s in ss] for k, (t0, ss) in got.items()}  # fmt: skip
        print(json.dumps({"max": a.max, "load1": said, "resizes": out}, indent=2))
        return 0
    print(f"elastic example, grow 2 -> {a.max} and shrink {a.max} -> 2, {os.cpu_count()} CPUs; "
          f"1-minute load: {said['start']:.2f} at the start, mean {said['mean']:.2f}, "
          f"max {said['max']:.2f} ({time.monotonic() - began:.0f} s in all)")  # fmt: skip
    for kind, (t0, ss) in got.items():
        before, after = (2, a.max) if kind == "grow" else (a.max, 2)
        print()
        title = f"{kind} {before} -> {after}: seconds since the record, and since the stage before"
        print(table(title, ss, t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
