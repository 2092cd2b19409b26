"""Peak RSS of the GPU reservation pod's process, to size its memory limit.

Runs `python -m scheduler.backends.kubernetes.reservations.reserve` under `/usr/bin/time -v` against
the fake API server (tests/kube/fakeapi.py) until it has published the UUID, stops it
with SIGTERM and prints its "Maximum resident set size"; then the same for what the
pod ran before (`shoal reserve`: the CLI plus the kubernetes client), for comparison.

    .venv/bin/python -m bench.reserve_rss
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.kube.fakeapi import FakeKube  # noqa: E402

UUID = "GPU-5f0e6c4a-0b7e-4c1c-9a77-2b3c4d5e6f70"


def peak_kib(stderr: str) -> int:
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", stderr)
    assert m, stderr
    return int(m.group(1))


def reserver(kube: FakeKube) -> int:
    kube.put(
        "pods",
        {"metadata": {"name": "res", "namespace": "jobs"}, "spec": {"containers": []}},
    )
    env = {
        **os.environ,
        "POD_NAME": "res",
        "POD_NAMESPACE": "jobs",
        "NVIDIA_VISIBLE_DEVICES": UUID,
        "SHOAL_KUBE_HOST": kube.url,
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    cmd = [
        "/usr/bin/time",
        "-v",
        sys.executable,
        "-m",
        "scheduler.backends.kubernetes.reservations.reserve",
    ]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while (kube.obj("pods", "res", "jobs")["metadata"].get("annotations") or {}).get(
        "shoal.dev/gpu-uuid"
    ) != UUID:
        assert time.monotonic() < deadline and proc.poll() is None, "no UUID published"
        time.sleep(0.05)
    # signal the python child, not /usr/bin/time
    child = subprocess.run(
        ["pgrep", "-P", str(proc.pid)], capture_output=True, text=True, check=True
    ).stdout.split()[0]
    os.kill(int(child), signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return peak_kib(err)


def old_way() -> int:
    code = "import scheduler.cli.main, scheduler.backends.kubernetes.client.api"
    out = subprocess.run(
        ["/usr/bin/time", "-v", sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return peak_kib(out.stderr)


def with_tls() -> int:
    code = (
        "import scheduler.backends.kubernetes.reservations.reserve, ssl, urllib.request; "
        "ssl.create_default_context().load_default_certs()"
    )
    out = subprocess.run(
        ["/usr/bin/time", "-v", sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return peak_kib(out.stderr)


def main() -> None:
    with FakeKube() as kube:
        runs = [reserver(kube) for _ in range(3)]
    print(f"reserver peak RSS: {max(runs) / 1024:.1f} MiB (runs: {[r // 1024 for r in runs]} MiB)")
    print(f"reserver imports + TLS context (in-cluster path): {with_tls() / 1024:.1f} MiB")
    print(f"CLI + kubernetes client imports alone: {old_way() / 1024:.1f} MiB")


if __name__ == "__main__":
    main()
