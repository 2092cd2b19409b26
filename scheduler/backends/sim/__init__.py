"""The `sim` backend: a simulated cluster in virtual time, no processes. Trace replay
(`shoal simulate`) lives in `scheduler.sim`."""

from scheduler.backends.sim.backend import SimBackend

__all__ = ["SimBackend"]
