"""The `sim` backend (virtual time, no processes) and trace replay for `shoal simulate`."""

from scheduler.backends.sim.backend import SimBackend

__all__ = ["SimBackend"]
