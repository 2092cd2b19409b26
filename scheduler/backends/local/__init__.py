"""The embedded default backend: simulated nodes from YAML, workers as local processes."""

from scheduler.backends.local.backend import LocalBackend
from scheduler.backends.local.cluster import DEFAULT_CLUSTER, load_nodes, parse_nodes

__all__ = ["DEFAULT_CLUSTER", "LocalBackend", "load_nodes", "parse_nodes"]
