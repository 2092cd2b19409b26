"""The one supervisor of a worker's command (`scheduler.worker.supervisor`), shared by the
launcher and the local shim: a SIGTERM that comes before the command exists is kept and
reaches it once it starts (with the default handler it would kill the supervisor and
orphan the command), and a command killed by signal N exits 128 + N."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator

import pytest

from scheduler.worker.supervisor import FORWARDED, Supervisor, exit_code

pytestmark = pytest.mark.integration  # starts a process


@pytest.fixture
def handlers() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in FORWARDED}
    yield
    for s, h in saved.items():
        signal.signal(s, h)


def test_a_sigterm_before_the_command_starts_reaches_it(handlers: None) -> None:
    supervisor = Supervisor()
    os.kill(os.getpid(), signal.SIGTERM)  # the command does not exist yet
    supervisor.start([sys.executable, "-c", "import time; time.sleep(60)"])
    assert supervisor.wait() == 128 + signal.SIGTERM


def test_a_sigterm_while_it_runs_is_forwarded_and_its_exit_code_kept(handlers: None) -> None:
    supervisor = Supervisor()
    child = supervisor.start(
        [
            sys.executable,
            "-c",
            "import signal, sys, time; "
            "signal.signal(signal.SIGTERM, lambda *_: sys.exit(7)); print(1, flush=True); "
            "time.sleep(60)",
        ],
        stdout=-1,
    )
    assert child.stdout is not None and child.stdout.readline() == b"1\n"  # handler set
    os.kill(os.getpid(), signal.SIGTERM)
    assert supervisor.wait() == 7


@pytest.mark.parametrize(("returncode", "code"), [(0, 0), (3, 3), (-9, 137), (-15, 143)])
def test_exit_codes_read_as_a_shell_reports_them(returncode: int, code: int) -> None:
    assert exit_code(returncode) == code
