"""Test tiers, by what a test uses. A test is `integration` when it takes a fixture that
starts something outside the test's own thread (a server, a process, a control plane, a
browser, a fake API server on a socket) or reaches PostgreSQL (`postgres`), the control
plane (`cluster`) or a GPU (`gpu`); a module that starts such things inline (local
worker processes, `shoal serve`, threads) says so with `pytestmark =
pytest.mark.integration`. Everything else is the fast tier, `make test-fast`
(`-m "not integration and not slow"`): the core, placement, the life cycle, and the
loop, backend, API and store logic on SQLite files, the sim backend and in-process
clients.

Also puts tests/ on sys.path (this file's directory), so that every tier imports the
shared helpers as `support` (`support.wait.eventually`, `support.pg`, `support.serve`,
`support.builders`)."""

from __future__ import annotations

import pytest

# Fixtures that start something (see above); a test taking any of them is `integration`.
STARTS = frozenset(
    {
        "control_plane",  # tests/cluster: kube-apiserver, etcd, kwok
        "chart",
        "nodes",
        "start_shoal",
        "shoal_env",
        "kube",  # tests/kube: the fake API server, on a loopback socket
        "cluster",
        "make_backend",
        "runtimes",
        "server",  # tests/e2e: `shoal serve` as a process
        "live",  # tests/dashboard: a served app
        "browser",
        "page",
        "http",  # tests/backends: `shoal serve` on this host's GPUs
        "base_url",  # tests/api: uvicorn on a socket
        "pg_app",
        "tier",  # tests/gpu
        "helm",  # tests/chart: helm as a process
        "render",
    }
)
MARKS = ("postgres", "cluster", "gpu", "integration")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        uses = set(getattr(item, "fixturenames", ()))
        if uses & STARTS or any(item.get_closest_marker(m) for m in MARKS):
            item.add_marker(pytest.mark.integration)
