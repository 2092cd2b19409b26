"""When will each pending job start (issue 29): the current state replayed forward in
virtual time through the real core.

Called beside the cycle (at most every N seconds) with the loop's snapshot and a
`runtime` callback (`RuntimeModel` below, or a benchmark's known durations). Running
jobs end at `started_at + max_runtime_s` when they declare one, else at `started_at +
runtime(job, elapsed)`; a job with no known runtime never ends in the replay. At each
event (the next end, or the next instant a time rule of the core flips:
`scheduler.core.timing`) `cycle.schedule` runs on the advanced snapshot and its
decisions are applied: placed jobs run from then for their own estimated runtime;
preemption victims drain for their grace period (holding their GPUs, as the loop does)
and then go back to pending with their submission time, so they keep their place, and
rerun their whole runtime when placed again (no checkpoint is assumed). The snapshot's
own stopping entries drain for at most their grace from `now` and then wait again the
same way (the core stops jobs to preempt them; a cancel during the drain is not told
apart), unless another attempt of the job already runs. The replay stops when every
pending job of the snapshot is placed, at the horizon, or after `max_steps` cycles. Jobs
submitted later are unknown to it, so a later arrival of higher priority (or of a queue
further below its share) can delay a job past its estimate; a job whose runtime is
unknown is assumed to keep running, so estimates made beside one are later than they may
turn out.

Cost: one cycle per step, at most `max_steps` of them (docs/benchmarks.md, "Start-time
estimates (issue 29)").
"""

from __future__ import annotations

import bisect
import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from scheduler import model as m
from scheduler.core import cycle, timing

# (runtime in seconds, why) of a job that has run `elapsed` seconds; None: unknown.
Runtime = Callable[[m.JobRequest, float], tuple[float | None, str]]

SHOWN = 3  # ends named in a basis or a reason; the rest are counted


@dataclass(frozen=True, slots=True)
class Estimate:
    """A pending job's forecast start. `start_s` is on the snapshot's clock (None when
    `unknown` says why no estimate is honest); `position` is its 1-based place among its
    queue's pending jobs in the order the cycle tries them (0: its queue does not
    exist); `basis` names the ends it waits for and how their times were estimated."""

    start_s: float | None
    position: int
    basis: str
    unknown: str = ""


@dataclass(slots=True)
class _Live:
    """A running entry of the replay and when it ends (None: never known)."""

    run: m.RunningJob
    end: float | None
    basis: str


def forecast(
    snapshot: m.Snapshot,
    runtime: Runtime,
    *,
    horizon_s: float = 7 * 86400,
    max_steps: int = 2000,
) -> dict[str, Estimate]:
    """Estimated start of every pending job of `snapshot`, by job id."""
    now = snapshot.now
    live = {r.key: _Live(r, *_end(r, now, runtime)) for r in snapshot.running}
    pending = {j.id: j for j in snapshot.pending}
    first = cycle.run(snapshot)
    positions = _positions(first.ordered)
    started: dict[str, tuple[float, str]] = {}
    reasons: dict[str, m.PendingReason] = {}
    result, t, event, steps = first.result, now, "", 1
    stop = ""
    while True:
        # Jobs whose runtime is unknown are assumed to run on: a start after them may
        # come earlier.
        blind = sum(e.end is None for e in live.values()) if result.places else 0
        assumed = f"; assumes {blind} jobs with no known runtime keep running" if blind else ""
        for place in result.places:
            job = pending.pop(place.job_id)
            if job.id in positions and job.id not in started:
                started[job.id] = (t, (event or "it fits now") + assumed)
            run = m.RunningJob(job, place.placements, t)
            live[run.key] = _Live(run, *_end(run, t, runtime))
        for pre in result.preempts:  # victims drain, then wait again (`_advance`)
            for key, entry in live.items():
                if key.job_id == pre.job_id and not entry.run.stopping:
                    run = dataclasses.replace(entry.run, stopping=True)
                    live[key] = _Live(run, t + pre.grace_period_s, f"preempted at {_at(t, now)}")
        for r in result.resizes:  # an elastic job's new size; a shrink's workers drain
            _resize(live, r, t, now)
        reasons = {k.job_id: k.reason for k in result.pending}
        if not any(j in positions for j in pending):
            break
        nxt = _next(snapshot, live, pending, t)
        if nxt is None:
            stop = "no end of a running job lets it start"
            break
        if nxt > now + horizon_s:
            stop = f"not placed within the forecast's {horizon_s / 3600:g} h horizon"
            break
        if steps >= max_steps:
            stop = f"the forecast stopped after {max_steps} cycles, at {_at(t, now)}"
            break
        t, event = nxt, _advance(live, pending, nxt, now)
        snap = dataclasses.replace(
            snapshot,
            running=tuple(e.run for e in live.values()),
            pending=tuple(pending.values()),
            now=t,
        )
        result, steps = cycle.schedule(snap), steps + 1
    return {
        job.id: _estimate(job, positions, started, reasons, live, stop) for job in snapshot.pending
    }


def _resize(live: dict[m.RunKey, _Live], r: m.Resize, t: float, now: float) -> None:
    """Carry a `Resize` out in the replay: the job at its new placements (its end kept),
    the workers a shrink removed as a stopping entry ending after their grace."""
    key = next((k for k, e in live.items() if k.job_id == r.job_id and not e.run.stopping), None)
    if key is None:
        return
    entry = live[key]
    kept = {p.worker for p in r.placements}
    gone = tuple(p for p in entry.run.placements if p.worker not in kept)
    run = dataclasses.replace(entry.run, placements=r.placements, resized_at=t)
    live[key] = _Live(run, entry.end, entry.basis)
    if gone:
        left = dataclasses.replace(run, placements=gone, stopping=True, split_from=gone[0].worker)
        live[left.key] = _Live(left, t + r.grace_period_s, f"shrunk at {_at(t, now)}")


def _end(run: m.RunningJob, now: float, runtime: Runtime) -> tuple[float | None, str]:
    """When a running entry ends and why we think so (never before `now`)."""
    if run.stopping:  # an issued preemption: its workers get at most their grace
        return now + run.job.grace_period_s, "stopping (grace period)"
    if run.job.max_runtime_s is not None:
        return max(now, run.started_at + run.job.max_runtime_s), "maxRuntime"
    seconds, why = runtime(run.job, max(0.0, now - run.started_at))
    if seconds is None:
        return None, why
    return max(now, run.started_at + seconds), why


def _positions(ordered: list[m.JobRequest]) -> dict[str, int]:
    seen: dict[str, int] = {}
    out = {}
    for job in ordered:
        seen[job.queue] = seen.get(job.queue, 0) + 1
        out[job.id] = seen[job.queue]
    return out


def _next(
    snapshot: m.Snapshot, live: dict[m.RunKey, _Live], pending: dict[str, m.JobRequest], t: float
) -> float | None:
    """The next event after `t`: an end, or a time rule of the core flipping."""
    ends = [e.end for e in live.values() if e.end is not None]
    after = dataclasses.replace(
        snapshot,
        running=tuple(e.run for e in live.values()),
        pending=tuple(pending.values()),
        now=t + 1e-6,  # the rules that flip at `t` itself were seen by this cycle
    )
    rule = timing.next_change(after)
    return min([*ends, *([rule] if rule is not None else [])], default=None)


def _advance(
    live: dict[m.RunKey, _Live], pending: dict[str, m.JobRequest], t: float, now: float
) -> str:
    """End what ends by `t` (drained victims wait again); the event's words."""
    gone = sorted(k for k, e in live.items() if e.end is not None and e.end <= t + m.EPS)
    words = []
    for key in gone:
        entry = live.pop(key)
        # A drained victim waits again, unless another attempt of its job runs already.
        again = key.job_id in pending or any(k.job_id == key.job_id for k in live)
        if entry.run.stopping and key.split_from < 0 and not again:  # not a shrink's workers
            pending[key.job_id] = entry.run.job
        words.append(f"{entry.run.job.label} ends at {_at(t, now)} ({entry.basis})")
    if not words:
        return f"a time rule of the core (starvation, minimum runtime) flips at {_at(t, now)}"
    more = f" and {len(words) - SHOWN} more" if len(words) > SHOWN else ""
    return "after " + "; ".join(words[:SHOWN]) + more


def _estimate(
    job: m.JobRequest,
    positions: dict[str, int],
    started: dict[str, tuple[float, str]],
    reasons: dict[str, m.PendingReason],
    live: dict[m.RunKey, _Live],
    stop: str,
) -> Estimate:
    position = positions.get(job.id, 0)
    if job.id in started:
        at, basis = started[job.id]
        return Estimate(at, position, basis)
    reason = reasons.get(job.id)  # the last cycle's
    said = f" (the core: {reason.code}: {reason.message})" if reason is not None else ""
    blockers = [e for e in live.values() if e.end is None]
    if not blockers or positions.get(job.id) is None:
        return Estimate(None, position, "", (stop or "not placed") + said)
    named = "; ".join(f"{e.run.job.label}: {e.basis}" for e in blockers[:SHOWN])
    more = f" and {len(blockers) - SHOWN} more" if len(blockers) > SHOWN else ""
    why = f"{stop}; {len(blockers)} running jobs have no known runtime ({named}{more})"
    return Estimate(None, position, "", why + said)


def _at(t: float, now: float) -> str:
    return f"+{t - now:,.0f} s"


# -- runtimes from finished jobs --------------------------------------------------------
# The `runtime` callback for jobs without a maxRuntime. The caller (the store, a
# benchmark) hands in finished jobs as plain tuples `(queue, gpu per worker, workers,
# runtime_s)`. The estimate is their median runtime for the same queue and shape, else
# for the same queue whatever the shape, and says which. For a job that has already run
# `elapsed` seconds only the finished jobs that ran longer count (the median of the
# tail): runtimes are heavy-tailed, and a job past the plain median would otherwise be
# forecast to end "now" at every refresh.

Shape = tuple[str, float, int]  # (queue, GPUs per worker, workers)


def _shape(job: m.JobRequest) -> Shape:
    # Rounded: 0.46 GPU from a trace and 0.46000000001 from arithmetic are one shape.
    return (job.queue, round(job.gpu, 3), job.workers)


def _words(gpu: float, workers: int) -> str:
    per = f"{gpu:g} GPU" + ("s" if gpu > 1 else "")
    return per if workers == 1 else f"{workers} x {per}"


class RuntimeModel:
    """Median runtimes of finished jobs by queue and shape; `model(job, elapsed)` is the
    `runtime` callback `forecast` takes."""

    def __init__(self, finished: Iterable[tuple[str, float, int, float]]) -> None:
        by_shape: dict[Shape, list[float]] = defaultdict(list)
        by_queue: dict[str, list[float]] = defaultdict(list)
        for queue, gpu, workers, runtime in finished:
            by_shape[(queue, round(gpu, 3), workers)].append(runtime)
            by_queue[queue].append(runtime)
        self._by_shape = {k: sorted(v) for k, v in by_shape.items()}
        self._by_queue = {k: sorted(v) for k, v in by_queue.items()}

    def __call__(self, job: m.JobRequest, elapsed: float = 0.0) -> tuple[float | None, str]:
        """(runtime in seconds, why) for `job` after `elapsed` seconds of running;
        (None, why not) when no finished job of its queue tells."""
        key = _shape(job)
        where = [
            (self._by_shape.get(key, []), f"of queue {job.queue} with {_words(key[1], key[2])}"),
            (self._by_queue.get(job.queue, []), f"of queue {job.queue} (any shape)"),
        ]
        for runtimes, words in where:
            tail = runtimes[bisect.bisect_right(runtimes, elapsed) :]
            if tail:
                return _median(tail), _basis(len(tail), len(runtimes), words, elapsed)
        seen = len(self._by_queue.get(job.queue, []))
        if not seen:
            return None, f"no finished job of queue {job.queue} to estimate its runtime from"
        return None, (
            f"it has run {elapsed:,.0f} s, longer than any of the {seen} finished jobs "
            f"of queue {job.queue}"
        )


def _median(xs: list[float]) -> float:
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def _basis(tail: int, total: int, words: str, elapsed: float) -> str:
    if tail == total:
        return f"median of {total} finished jobs {words}"
    return (
        f"median of the {tail} of {total} finished jobs {words} "
        f"that ran longer than its {elapsed:,.0f} s so far"
    )
