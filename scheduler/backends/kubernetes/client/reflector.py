"""List-then-watch caches of cluster objects, kept fresh by a background thread.

A `Reflector` lists a resource, then watches from the list's resourceVersion, applying
ADDED/MODIFIED/DELETED to an in-memory map. A watch that ends (server timeout) resumes
from the last version seen; an expired version (410 Gone, as an HTTP status or an ERROR
event) triggers a fresh list; other failures back off (bounded) and relist. The
backend keeps one reflector for Nodes and one for Pods in all namespaces.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Mapping
from typing import Any, Protocol

from scheduler.backends.kubernetes.client.api import Kube
from scheduler.backends.kubernetes.client.apierrors import ApiError

log = logging.getLogger(__name__)
Obj = dict[str, Any]


class Gone(Exception):
    """The watch's resourceVersion is too old: list again."""


def key_of(obj: Obj) -> str:
    meta = obj["metadata"]
    ns = meta.get("namespace") or ""
    return f"{ns}/{meta['name']}" if ns else str(meta["name"])


def slim(obj: Obj) -> Obj:
    """`obj` without what Shoal never reads and that dominates a pod's size:
    `managedFields` and kubectl's last-applied-configuration annotation."""
    meta = obj.get("metadata") or {}
    meta.pop("managedFields", None)
    ann = meta.get("annotations")
    if ann:
        ann.pop("kubectl.kubernetes.io/last-applied-configuration", None)
    return obj


class Listener(Protocol):
    """Told of every change to the cache, in order, under the cache's lock (so what it
    derives is always consistent with `items()`): indexes kept incrementally instead of
    a scan of every object each cycle. Must be quick and must not call the reflector."""

    def reset(self, items: Mapping[str, Obj]) -> None: ...

    def update(self, key: str, obj: Obj | None) -> None:  # None: deleted
        ...


class Reflector:
    def __init__(
        self,
        kube: Kube,
        resource: str,
        max_backoff_s: float = 5.0,
        listener: Listener | None = None,
    ) -> None:
        self.kube, self.resource, self.max_backoff_s = kube, resource, max_backoff_s
        self.listener = listener
        self._items: dict[str, Obj] = {}
        self._lock = threading.Lock()
        self._moved = threading.Condition(self._lock)  # the version moved (`wait_for`)
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.resource_version = ""
        self.last_error: str | None = None
        self.relists = 0

    # ---- reading ----

    def items(self) -> list[Obj]:
        """The cached objects, READ-ONLY: the list is new, the objects are shared (an
        event replaces an object whole, never mutates it, so a caller's view stays
        consistent). No deep copy: at 10,000 pods that cost seconds per read, several
        times a cycle. Use `get()` for a copy to modify."""
        with self._lock:
            return list(self._items.values())

    def get(self, key: str) -> Obj | None:
        with self._lock:
            obj = self._items.get(key)
            return copy.deepcopy(obj) if obj else None

    def wait_synced(self, timeout_s: float) -> bool:
        return self._synced.wait(timeout_s)

    def wait_for(self, version: int, timeout_s: float) -> bool:
        """Wait until the cache is at `version` or later (etcd's versions are one
        counter: it then holds every write committed up to that one, as a consistent
        LIST made after it would); False when it is not after `timeout_s`."""
        with self._moved:
            return self._moved.wait_for(
                lambda: as_version(self.resource_version) >= version, timeout_s
            )

    # ---- running ----

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"shoal-reflector-{self.resource}", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def relist(self) -> None:
        items, rv = self.kube.list(self.resource)  # paginated (`list_page_size`)
        with self._lock:
            self._items = {key_of(o): slim(o) for o in items}
            self.resource_version = rv
            if self.listener is not None:
                self.listener.reset(self._items)
            self._moved.notify_all()
        self.relists += 1
        self._synced.set()

    def _run(self) -> None:
        backoff = 0.1
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self.relist()
                    need_list = False
                self._watch_once()
                backoff, self.last_error = 0.1, None
            except Gone:
                log.info("%s watch expired at %s; relisting", self.resource, self.resource_version)
                need_list = True
            except Exception as e:  # keep the cache alive whatever happens; say why
                self.last_error = f"{type(e).__name__}: {e}"
                log.warning(
                    "%s watch failed: %s; retrying in %.1fs",
                    self.resource,
                    self.last_error,
                    backoff,
                )
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff_s)
                need_list = True  # events may have been missed: rebuild from a list

    def _watch_once(self) -> None:
        try:
            for event in self.kube.watch(self.resource, self.resource_version):
                if self._stop.is_set():
                    return
                self._apply(event)
        except ApiError as e:
            if e.status == 410:
                raise Gone() from None
            raise

    def _apply(self, event: Obj) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone()
            raise ApiError(
                int(obj.get("code") or 500), str(obj.get("reason")), str(obj.get("message"))
            )
        rv = str(obj.get("metadata", {}).get("resourceVersion", ""))
        with self._lock:
            if kind in ("ADDED", "MODIFIED"):
                key = key_of(obj)
                self._items[key] = slim(obj)
                if self.listener is not None:
                    self.listener.update(key, self._items[key])
            elif kind == "DELETED":
                key = key_of(obj)
                self._items.pop(key, None)
                if self.listener is not None:
                    self.listener.update(key, None)
            if rv:  # BOOKMARK carries only a version
                self.resource_version = rv
                self._moved.notify_all()


def as_version(text: object) -> int:
    """A resourceVersion as etcd's integer (the API calls it opaque; 0 when it is not)."""
    try:
        return int(str(text))
    except ValueError:
        return 0
