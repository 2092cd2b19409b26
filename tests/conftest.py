"""Test tiers. The pure layer (the scheduling core, placement, the job life cycle's
`decide`, the snapshot builder) runs with no process, thread, server or database (about
10 s of CPU); everything else
is marked `integration` here, so `make test-fast` (`-m "not integration and not slow"`)
runs the pure layer alone. A test elsewhere that is pure may say so by living in a pure
module below; a test in a pure directory that starts something must be marked
`@pytest.mark.integration` itself.

Also puts tests/ on sys.path (this file's directory), so that every tier imports the
shared helpers as `support` (`support.wait.eventually`, `support.pg`, `support.serve`,
`support.builders`)."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PURE_DIRS = {"core", "placement"}
PURE_MODULES = {"loop/test_decide.py", "loop/test_snapshot.py"}


def _pure(path: Path) -> bool:
    try:
        rel = path.resolve().relative_to(HERE)
    except ValueError:
        return False
    return rel.parts[0] in PURE_DIRS or rel.as_posix() in PURE_MODULES


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if not _pure(item.path):
            item.add_marker(pytest.mark.integration)
