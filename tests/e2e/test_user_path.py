"""The user's path, as the README and the examples tell it (issue 35): `make demo` exits 0
and says so, and every example in `examples/` runs with the command its header gives,
then again with `--follow`, on the local backend, to Succeeded.

A green CI once shipped a red first command: `make demo` read the phase from a column
of `shoal jobs` that had become another, and nothing ran it; the elastic example's own
command ended in a traceback. These tests run them as a user types them."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from support import serve

from .conftest import ROOT, Server

pytestmark = pytest.mark.slow

EXAMPLES = sorted((ROOT / "examples").glob("*/job.yaml"))


def header_commands(path: Path) -> list[list[str]]:
    """The `shoal ...` commands quoted (in backticks) in a file's leading comment."""
    head = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        head.append(line.lstrip("# "))
    quoted = re.findall(r"`(shoal [^`]+)`", " ".join(head))
    return [shlex.split(q) for q in quoted]


def test_make_demo_exits_0_and_trains(tmp_path: Path) -> None:
    """The README's first command, as typed (the set-up it runs first only checks here)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")}
    env |= {"SHOAL_STATE_DIR": str(tmp_path / "state"), "SHOAL_DEMO_PORT": str(serve.free_port())}
    done = subprocess.run(
        ["make", "demo"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert "demo ok: ddp-example Succeeded" in done.stdout, said
    assert "Traceback" not in said, said
    # The followed worker's own lines (the events table's last Progress is whatever the
    # throttled reports had stored by then).
    losses = [float(x) for x in re.findall(r"^w0 step \d+\s+loss (\d+\.\d+)", done.stdout, re.M)]
    assert len(losses) >= 5 and losses[-1] < losses[0], said


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.parent.name)
def test_an_example_runs_as_its_header_says(server: Server, example: Path) -> None:
    commands = header_commands(example)
    assert commands, f"{example}: its header quotes no `shoal ...` command"
    spec = yaml.safe_load(example.read_text())
    server.shoal("queues", "create", spec["queue"], "--guaranteed", "8")
    for argv in commands:  # as the header says, then following it to the end
        for follow in ([], ["--follow"]):
            run = server.shoal(*argv[1:], *follow, check=False)
            said = run.stdout + run.stderr
            assert run.returncode == 0 and "Traceback" not in said, said
            job_id = re.search(r"submitted \(id (\w+)", run.stdout).group(1)  # type: ignore[union-attr]
            if not follow:  # the README's way to follow it, by name
                logs = server.shoal("logs", spec["name"], "-f", check=False)
                said = logs.stdout + logs.stderr
                assert logs.returncode == 0 and "Traceback" not in said, said
            assert f"job {spec['name']}: Succeeded" in said, said
            job = json.loads(server.shoal("job", job_id, "-o", "json").stdout)
            assert job["phase"] == "Succeeded", job
    listed = server.shoal("jobs").stdout.splitlines()
    assert len(listed) == 3 and max(map(len, listed)) <= 80, listed
