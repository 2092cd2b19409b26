"""An elastic job through the whole service (issue 29 part 2): `shoal serve` starts the
elastic example at the size its queue's fair share allows, grows it into the GPUs a
finished job leaves idle, and shrinks it, instead of preempting it, when another queue
comes back for its guarantee. The workers are torchrun agents training for real (CPU,
gloo); the loss keeps falling across both resizes, and the job's status shows its size
and history."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from support import serve
from support.wait import eventually

from .conftest import ROOT, Server

pytestmark = pytest.mark.slow

EXAMPLE = ROOT / "examples" / "pytorch-elastic"
EVERY = 5  # the example's checkpoint interval here
WAIT = "import os, time\nwhile not os.path.exists({!r}): time.sleep(0.2)"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    policy = tmp_path / "policy.yaml"
    policy.write_text("resizeIntervalSeconds: 5\n")
    with (
        serve.serving(tmp_path, env={"SHOAL_POLICY_FILE": str(policy)}) as s,
        httpx.Client(
            base_url=s.url + "/api/v1", headers={"Authorization": f"Bearer {s.token}"}, timeout=60
        ) as http,
    ):
        yield Server(s.url, s.state, s.env, http)


def submit(server: Server, body: dict[str, Any]) -> str:
    r = server.http.post("/jobs", json=body)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def holder(name: str, queue: str, workers: int, flag: Path) -> dict[str, Any]:
    """A rigid job of `workers` whole GPUs that runs until `flag` exists."""
    argv = ["python", "-c", WAIT.format(str(flag))]
    return {"name": name, "queue": queue, "image": "local", "framework": "generic",
            "workers": workers, "gpu": 1, "command": argv}  # fmt: skip


def job(server: Server, job_id: str) -> dict[str, Any]:
    got: dict[str, Any] = server.http.get(f"/jobs/{job_id}").json()
    return got


class Progress:
    """Rank 0's SHOAL_PROGRESS lines, from whichever worker the rendezvous made rank 0,
    read on through the logs endpoint's offsets (it returns 256 KiB at a time)."""

    def __init__(self, server: Server, job_id: str) -> None:
        self.server, self.job_id = server, job_id
        self.offsets: dict[int, int] = {}
        self.partial: dict[int, str] = {}
        self.seen: list[dict[str, Any]] = []

    def __call__(self) -> list[dict[str, Any]]:
        while True:
            most = max(self.offsets, default=-1) + 1
            offsets = ",".join(str(self.offsets.get(w, 0)) for w in range(max(most, 8)))
            got = self.server.http.get(f"/jobs/{self.job_id}/logs", params={"offsets": offsets})
            chunks = got.json()["chunks"]
            for c in chunks:
                text = self.partial.pop(c["worker"], "") + c["text"]
                *lines, rest = text.split("\n")
                self.partial[c["worker"]] = rest
                self.offsets[c["worker"]] = c["nextOffset"]
                self.seen += [p for x in lines if (p := _parsed(x)) is not None]
            if not any(c["text"] for c in chunks):
                return sorted(self.seen, key=lambda p: p["t"])


def _parsed(line: str) -> dict[str, Any] | None:
    if not line.startswith("SHOAL_PROGRESS "):
        return None
    try:
        got: dict[str, Any] = json.loads(line.removeprefix("SHOAL_PROGRESS "))
    except ValueError:
        return None  # a line a kill cut short
    return got


def test_an_elastic_job_starts_by_fair_share_grows_and_shrinks_instead_of_dying(
    server: Server, tmp_path: Path
) -> None:
    server.shoal("queues", "create", "research", "--guaranteed", "2")
    server.shoal("queues", "create", "prod", "--guaranteed", "6")
    released = tmp_path / "holder-may-finish"
    first = submit(server, holder("holder", "prod", 6, released))
    eventually(lambda: job(server, first)["phase"] == "Running", 120, what="the holder to run")

    doc = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    doc.update(queue="research", gpu=1, workers={"min": 2, "max": 4}, command=["python"])
    doc["args"] = ["-m", "torch.distributed.run", str(EXAMPLE / "train.py")]
    doc["env"].update(STEPS="100000", CHECKPOINT_EVERY=str(EVERY), STEP_SECONDS="0.05",
                      CHECKPOINT_DIR=str(tmp_path / "checkpoints"))  # fmt: skip
    el = submit(server, doc)
    progress = Progress(server, el)

    def at(world: int, count: int = 3) -> list[dict[str, Any]]:
        seen = progress()
        return seen if sum(p["world"] == world for p in seen[-count:]) == count else []

    # 2 GPUs are free and research's fair share is 2: it starts at its gang.
    eventually(lambda: at(2), 300, 0.5, "steps at world size 2")
    assert job(server, el)["workers"] == 2
    # The holder ends: 6 idle GPUs, nobody waiting; after the resize interval it grows.
    released.touch()
    eventually(lambda: at(4), 300, 0.5, "steps at world size 4")
    grown = job(server, el)
    assert grown["workers"] == 4 and [(r["previous"], r["workers"]) for r in grown["resizes"]] == [
        (2, 4)
    ]
    # prod comes back for 6 of its guarantee: 4 are free, research gives back 2 workers.
    done = tmp_path / "owner-may-finish"
    owner = submit(server, holder("owner", "prod", 6, done))
    eventually(lambda: job(server, owner)["phase"] == "Running", 300, what="the owner to run")
    eventually(lambda: at(2), 300, 0.5, "steps at world size 2 again")
    after = job(server, el)
    events = server.http.get(f"/jobs/{el}/events").json()["data"]
    said = [(e["kind"], e["reason"], e["message"]) for e in events]
    assert after["phase"] == "Running" and after["restarts"] == 0, said  # shrunk, not preempted
    assert after["workers"] == 2
    assert [(r["previous"], r["workers"]) for r in after["resizes"]] == [(2, 4), (4, 2)]
    assert "reclaimed for job owner" in after["resizes"][-1]["message"]
    shown = server.shoal("job", el).stdout
    assert "workers 2 (2-4)" in shown and "resized" in shown
    seen = progress()
    done.touch()
    server.http.post(f"/jobs/{el}/cancel")

    worlds = [p["world"] for p in seen]
    assert [w for i, w in enumerate(worlds) if i == 0 or worlds[i - 1] != w] == [2, 4, 2]
    back = [a["step"] - b["step"] for a, b in itertools.pairwise(seen)]
    assert max(back) < EVERY, "a restart went back further than its last checkpoint"
    last = max(i for i, p in enumerate(seen) if i and seen[i - 1]["world"] != p["world"])
    assert max(p["loss"] for p in seen[last:]) < seen[0]["loss"]
