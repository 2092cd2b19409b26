"""What the loop reads about pods every cycle, kept up to date from the pod cache's events.

A scan of every cached pod each cycle (pending foreign pods, adopted ones, foreign usage
per node, worker states, what each node's pods hold) cost O(all pods) per read, several
reads a cycle, most of it in parsing resource quantities again and again. `PodIndex` is
the pod reflector's `Listener`: each ADDED/MODIFIED/DELETED event recomputes that one
pod's entries with the same per-pod rules (`status.foreign_pod`, `inventory.foreign_usage`,
`status.adopted`, `status.worker_status`, `podfit.ask`, `gang_member`), so a read costs
O(what it returns). A foreign pod's job id (`pod:<ns>/<name>`, pending or adopted) maps to its cache
key here (`key_of_job`): the backend looks a foreign job up, it never takes the id apart.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.backends.base import WorkerStatus
from scheduler.backends.kubernetes import names
from scheduler.backends.kubernetes.view import inventory, podfit, status
from scheduler.model import RunningJob

log = logging.getLogger(__name__)
Obj = dict[str, Any]
Usage = tuple[int, int, int]  # cpu milli, memory MiB, GPUs


@dataclass(frozen=True, slots=True)
class _Entry:
    uid: str
    settled: bool  # bound, being deleted or finished: no longer waits for a binding
    foreign: status.ForeignPod | None = None
    usage: tuple[str, Usage] | None = None  # (node, what a pod Shoal did not place holds)
    adopted: RunningJob | None = None
    worker: tuple[Obj, WorkerStatus] | None = None
    reservation: Obj | None = None
    foreign_job: str | None = None  # the job id of a foreign pod, pending or adopted
    share_of: str | None = None  # the GPU reservation a share runs (or ran) on
    finished: bool = False
    held: tuple[str, podfit.Ask] | None = None  # (node, what any pod takes there)
    member: tuple[str, str] | None = None  # (its PodGroup, its node): `gang_member`


def held_node(pod: Obj, scheduler_name: str) -> str | None:
    """The node whose room the pod takes, whoever placed it: `inventory.claimed_node`,
    or for a pod Shoal placed and has not bound yet (a worker just created, an adopted
    pod waiting for its GPU's UUID) the node in its annotation."""
    node = inventory.claimed_node(pod, scheduler_name)
    if node is not None or not names.is_shoal_placed(pod):
        return node
    if (
        pod["metadata"].get("deletionTimestamp")
        or (pod.get("status") or {}).get("phase") in inventory.TERMINAL
    ):
        return None
    return names.annotations_of(pod).get(names.NODE) or None


def gang_member(pod: Obj) -> tuple[str, str] | None:
    """(`namespace/name` of its PodGroup, its node) of a pod that names a PodGroup and is
    placed: bound, or about to be bound by Shoal (its node in the annotation), and not
    finished. kube-scheduler counts such members (assigned or assumed) toward the gang's
    minCount, a pod being deleted among them until it is gone."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    group = (spec.get("schedulingGroup") or {}).get("podGroupName")
    if not group or (pod.get("status") or {}).get("phase") in inventory.TERMINAL:
        return None
    node = spec.get("nodeName") or (
        names.annotations_of(pod).get(names.NODE) if names.is_shoal_placed(pod) else None
    )
    return (f"{meta.get('namespace', '')}/{group}", str(node)) if node else None


def _entry(pod: Obj, scheduler_name: str) -> _Entry:
    meta, spec = pod["metadata"], pod.get("spec") or {}
    settled = bool(
        spec.get("nodeName")
        or meta.get("deletionTimestamp")
        or (pod.get("status") or {}).get("phase") in inventory.TERMINAL
    )
    uid = str(meta.get("uid", ""))
    try:
        used = inventory.foreign_usage([pod], scheduler_name)
        adopted = status.adopted([pod])
        foreign = status.foreign_pod(pod, scheduler_name)
        job = names.annotations_of(pod).get(names.JOB_ID)
        on = held_node(pod, scheduler_name)
        return _Entry(
            uid=uid,
            settled=settled,
            foreign=foreign,
            usage=next(iter(used.items()), None),
            adopted=adopted[0] if adopted else None,
            worker=(pod, status.worker_status(pod)) if status.is_worker(pod) else None,
            reservation=pod if names.is_reservation(pod) else None,
            foreign_job=foreign.job_id
            if foreign is not None
            else (job if status.is_worker(pod) and not names.is_managed(pod) else None),
            share_of=names.labels_of(pod).get(names.RESERVATION),
            finished=(pod.get("status") or {}).get("phase") in inventory.TERMINAL,
            held=(on, podfit.ask(pod)) if on is not None else None,
            member=gang_member(pod),
        )
    except Exception as e:  # a malformed pod must not stop the cache; say which
        log.warning("pod %s/%s not indexed: %s", meta.get("namespace"), meta.get("name"), e)
        return _Entry(uid=uid, settled=settled)


class PodIndex:
    """Per-pod entries and per-node foreign totals; thread-safe. `on_new_work` is called
    (under the cache's lock: it must be quick) when a foreign pod starts waiting."""

    def __init__(self, scheduler_name: str, on_new_work: Callable[[], None] | None = None) -> None:
        self.scheduler_name, self.on_new_work = scheduler_name, on_new_work
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._usage: dict[str, Usage] = {}
        self._jobs: dict[str, str] = {}  # foreign pod's job id -> cache key
        self._users: dict[str, int] = {}  # reservation name -> shares not finished on it
        self._held: dict[str, podfit.Held] = {}  # node -> what all its pods hold
        self._members: dict[str, dict[str, int]] = {}  # PodGroup -> node -> placed members

    # ---- the reflector's Listener ----

    def reset(self, items: Mapping[str, Obj]) -> None:
        entries = {key: _entry(pod, self.scheduler_name) for key, pod in items.items()}
        with self._lock:
            self._entries, self._usage, self._users, self._held = entries, {}, {}, {}
            self._members = {}
            self._jobs = {e.foreign_job: k for k, e in entries.items() if e.foreign_job}
            for e in entries.values():
                self._add_usage(e, 1)
        if self.on_new_work is not None and any(e.foreign for e in entries.values()):
            self.on_new_work()

    def update(self, key: str, obj: Obj | None) -> None:
        new = _entry(obj, self.scheduler_name) if obj is not None else None
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._add_usage(old, -1)
                if old.foreign_job and self._jobs.get(old.foreign_job) == key:
                    del self._jobs[old.foreign_job]
            if new is not None:
                self._entries[key] = new
                self._add_usage(new, 1)
                if new.foreign_job:
                    self._jobs[new.foreign_job] = key
        if new is not None and new.foreign and not (old and old.foreign) and self.on_new_work:
            self.on_new_work()

    def _add_usage(self, e: _Entry, sign: int) -> None:
        if e.held is not None:
            node, ask = e.held
            held = self._held.setdefault(node, podfit.Held())
            held.add(ask, sign)
            if held.empty():
                del self._held[node]
        if e.member is not None:
            group, node = e.member
            on = self._members.setdefault(group, {})
            on[node] = on.get(node, 0) + sign
            if on[node] <= 0:
                del on[node]
                if not on:
                    del self._members[group]
        if e.share_of and not e.finished:
            users = self._users.get(e.share_of, 0) + sign
            if users > 0:
                self._users[e.share_of] = users
            else:
                self._users.pop(e.share_of, None)
        if e.usage is None:
            return
        node, (c, m, g) = e.usage
        uc, um, ug = self._usage.get(node, (0, 0, 0))
        total = (uc + sign * c, um + sign * m, ug + sign * g)
        if total == (0, 0, 0):
            self._usage.pop(node, None)
        else:
            self._usage[node] = total

    # ---- reads ----

    def usage(self) -> dict[str, Usage]:
        """node -> what pods Shoal did not place hold there (`inventory.foreign_usage`)."""
        with self._lock:
            return dict(self._usage)

    def held(self) -> dict[str, podfit.Held]:
        """node -> what every pod there holds (`podfit.Held`, copies: the caller's)."""
        with self._lock:
            return {node: h.copy() for node, h in self._held.items()}

    def held_on(self, node: str) -> podfit.Held:
        """What every pod on `node` holds (a copy)."""
        with self._lock:
            h = self._held.get(node)
            return h.copy() if h is not None else podfit.Held()

    def holder(self, key: str) -> tuple[str, str | None] | None:
        """(uid, the node it holds room on or None) of the cached pod `key`; None: gone."""
        with self._lock:
            e = self._entries.get(key)
            return (e.uid, e.held[0] if e.held is not None else None) if e is not None else None

    def members(self, group: str) -> dict[str, int]:
        """node -> how many members of PodGroup `group` (`namespace/name`) are placed
        there (`gang_member`; a copy)."""
        with self._lock:
            return dict(self._members.get(group, {}))

    def foreign_pending(self) -> list[tuple[str, status.ForeignPod]]:
        """(cache key, pod) of every foreign pod waiting for Shoal, by namespace and name."""
        with self._lock:
            found = [(k, e.foreign) for k, e in self._entries.items() if e.foreign is not None]
        return sorted(found, key=lambda kf: (kf[1].namespace, kf[1].name))

    def key_of_job(self, job_id: str) -> str | None:
        """The cache key of the foreign pod (pending or adopted) that is job `job_id`."""
        with self._lock:
            return self._jobs.get(job_id)

    def pending(self, key: str) -> status.ForeignPod | None:
        with self._lock:
            e = self._entries.get(key)
            return e.foreign if e is not None else None

    def adopted(
        self, unsettled: Mapping[str, str] | None = None
    ) -> tuple[list[RunningJob], set[str]]:
        """(adopted foreign pods as running jobs, the keys of `unsettled` (key -> uid)
        that the cache now shows bound, gone, replaced or finished), read together."""
        with self._lock:
            running = [e.adopted for e in self._entries.values() if e.adopted is not None]
            settled = set()
            for key, uid in (unsettled or {}).items():
                e = self._entries.get(key)
                if e is None or e.uid != uid or e.settled:
                    settled.add(key)
        return sorted(running, key=lambda r: r.job.id), settled

    def workers(self) -> list[tuple[Obj, WorkerStatus]]:
        """(pod, its state from the pod alone) of every worker pod (`status.is_worker`)."""
        with self._lock:
            return [e.worker for e in self._entries.values() if e.worker is not None]

    def reservation_pods(self) -> list[Obj]:
        with self._lock:
            return [e.reservation for e in self._entries.values() if e.reservation is not None]

    def share_of(self, key: str) -> str | None:
        """The GPU reservation the cached pod `key` runs (or ran) on as a share, or None."""
        with self._lock:
            e = self._entries.get(key)
            return e.share_of if e is not None else None

    def reservation_users(self) -> list[tuple[Obj, int]]:
        """(GPU reservation pod, how many shares not yet finished run on it), read together."""
        with self._lock:
            return [
                (e.reservation, self._users.get(e.reservation["metadata"]["name"], 0))
                for e in self._entries.values()
                if e.reservation is not None
            ]
