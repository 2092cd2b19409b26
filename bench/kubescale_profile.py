"""The child of kube_scale `--profile`: `shoal serve` with its loop under cProfile, each
cycle's step times, each foreign pod's marks and each inventory write recorded to files."""

from __future__ import annotations

import atexit
import cProfile
import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def profiled_serve() -> None:
    """`shoal serve` (argv as given) with `Loop.run_once` profiled: the child of
    `--profile`. cProfile follows one thread; the loop's cycles run on one thread."""
    from scheduler.cli.main import main as shoal_main

    out = os.environ["SHOAL_BENCH_PROFILE"]
    prof = cProfile.Profile()
    cycles = _profile_cycles(prof)
    marks = _mark_foreign_pods()
    saves = _record_saves()

    def dump() -> None:
        Path(out + ".saves.json").write_text(json.dumps(saves))
        prof.dump_stats(out)
        Path(out + ".cycles.json").write_text(json.dumps(cycles))
        Path(out + ".pods.json").write_text(json.dumps(marks))

    atexit.register(dump)
    sys.argv = ["shoal", *sys.argv[1:]]
    shoal_main()


def _profile_cycles(prof: cProfile.Profile) -> list[dict[str, Any]]:
    """Profile every `Loop.run_once`; the list fills with each cycle's step times."""
    from scheduler.loop.service import Loop

    cycles: list[dict[str, Any]] = []
    inner = Loop.run_once

    def run_once(self: Loop) -> Any:
        prof.enable()
        try:
            report = inner(self)
        finally:
            prof.disable()
        if report is not None:
            placed = len(report.result.places)
            cycles.append({"t": round(time.monotonic(), 3),
                           "seconds": round(report.seconds, 4), "placed": placed,
                           **{k: round(v, 4) for k, v in report.steps.items()}})  # fmt: skip
        return report

    Loop.run_once = run_once  # type: ignore[method-assign]
    return cycles


def _mark_foreign_pods() -> dict[str, dict[str, float]]:
    """When each foreign pod was first seen waiting, placed (bind_foreign) and bound."""
    from scheduler.backends.kubernetes.backend import KubernetesBackend
    from scheduler.backends.kubernetes.foreignpods.foreign import ForeignBindings
    from scheduler.backends.kubernetes.view.podindex import PodIndex

    marks: dict[str, dict[str, float]] = {}
    update, bind_foreign = PodIndex.update, KubernetesBackend.bind_foreign
    bind = ForeignBindings.bind  # both the pool's bindings and the backend's go through it

    def mark(key: str, what: str) -> None:
        marks.setdefault(key, {}).setdefault(what, time.monotonic())

    def on_update(self: PodIndex, key: str, obj: Any) -> None:
        update(self, key, obj)
        if self.pending(key) is not None:
            mark(key, "seen")

    def on_bind_foreign(self: KubernetesBackend, job_id: str, placement: Any) -> None:
        mark(job_id.removeprefix("pod:"), "placed")
        bind_foreign(self, job_id, placement)

    def on_bind(self: ForeignBindings, pod: Any, placement: Any) -> bool:
        mark(f"{pod.namespace}/{pod.name}", "start")
        done = bind(self, pod, placement)
        mark(f"{pod.namespace}/{pod.name}", "bound")
        return done

    PodIndex.update = on_update  # type: ignore[method-assign]
    KubernetesBackend.bind_foreign = on_bind_foreign  # type: ignore[method-assign]
    ForeignBindings.bind = on_bind  # type: ignore[method-assign]
    return marks


def _record_saves() -> list[dict[str, Any]]:
    """Each inventory write: when, how long, and a few of the nodes that changed."""
    from scheduler.store import cluster

    saves: list[dict[str, Any]] = []
    save = cluster.save_inventory
    last: dict[str, Any] = {}

    def on_save(**kw: Any) -> None:
        t = time.monotonic()
        save(**kw)
        now = {n.name: n for n in kw["nodes"]}
        diff = [repr((last.get(k), n)) for k, n in now.items() if last.get(k) != n]
        saves.append({"t": round(t, 3), "s": round(time.monotonic() - t, 3),
                      "changed": len(diff), "some": diff[:2]})  # fmt: skip
        last.clear()
        last.update(now)

    cluster.save_inventory = on_save
    return saves
