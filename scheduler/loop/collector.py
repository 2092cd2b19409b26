"""The garbage collector held off while a cycle runs (`paused`).

A cycle at scale allocates about a million objects that live exactly as long as the
cycle (the snapshot, the core's working set, the rows read). With the collector on,
they survive its young generations mid-cycle, are promoted, and push it into full
collections of the whole heap: at 1,000 nodes / 10,000 pods one to two a cycle, about
250 ms each (bench/cycle_scale.py, docs/benchmarks.md). Paused, reference counting frees
them when the cycle drops them, and the collector's next run, between cycles, finds
only what outlived the cycle. Nested and threaded uses (two loops in one process) count:
the collector comes back on when the last one ends, and only if it was on before.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextmanager
def paused() -> Iterator[None]:
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
