"""Trace replay for `shoal simulate`: drives the real loop, core and store in virtual time
against the simulated cluster (`scheduler.backends.sim`). It is not a backend itself, so it
lives outside `scheduler/backends/`."""
