"""Scale on a real control plane: Shoal against kube-scheduler, side by side (not a test).

    .venv/bin/python bench/kube_scale.py [--nodes 1000] [--gpus 8] [--pods 5000]
        [--gangs 300] [--gang-size 8] [--fractions 2000] [--timeout 900] [--json out.json]

Each scheduler gets a fresh control plane (scripts/controlplane.sh start: etcd,
kube-apiserver, kube-controller-manager, kwok; plus kube-scheduler, default profile, for
the peer) with `--nodes` kwok nodes of `--gpus` GPUs (four GPU models by GFD labels).

(a) `--pods` single-GPU pods (`nvidia.com/gpu: 1`), created from `--creators`
    processes (4) of 8 threads each, so that creating them does not set the rate; for
    Shoal with `schedulerName: shoal` and the `shoal.dev/queue` label (Shoal adopts and
    binds them, its foreign-pod path), for the peer with the default scheduler.
    Measured: pods bound per second from the first create to the last bind, as seen on a
    watch of the namespace.
(b) `--gangs` TrainingJob-like REST jobs of `--gang-size` workers x 1 GPU (Shoal only:
    kube-scheduler has no gangs); at the end every gang is fully bound or not at all.
(c) `--fractions` REST jobs of one 0.5-GPU worker (Shoal only: kube-scheduler has no
    fractions). kwok cannot run `shoal reserve`, so this script plays it: it writes a
    made-up UUID onto each reservation pod, as the reserver would.
Shoal runs as `shoal serve --backend kubernetes` on this host with the admin kubeconfig;
its peak RSS (VmHWM) and CPU seconds (utime+stime) are read from /proc at the end.
Its cycle's step times (issue 10, item 14) come from its /metrics histograms: the mean
per step over the cycles of (a), and over an idle stretch after (a) with every pod of
(a) bound (`cycle_a`, `cycle_idle`). `--profile PATH` runs Shoal's loop under cProfile
(only `Loop.run_once`, summed over all cycles; written as pstats to PATH at exit) and
writes each cycle's step times to PATH.cycles.json.

`--dra` runs the DRA workload instead (bench/kubescale_dra.py, issue 28 item 5): nodes
with no `nvidia.com/gpu`, their GPUs published as ResourceSlices; `--pods` 1-GPU claims
allocated by kube-scheduler (pods from a ResourceClaimTemplate), then by Shoal (1-worker
jobs through its REST API), the claims checked after each.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if not __package__:  # run as `python bench/kube_scale.py`: make the `bench` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import kubescale_dra
from bench.kubescale_cluster import JOBS_NS, NS, Cluster
from bench.kubescale_jobs import rest_jobs
from bench.kubescale_pods import single_gpu_pods
from bench.kubescale_shoal import ShoalProc, step_means


def run_shoal(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Shoal on a fresh control plane: (a), then (b) and (c)."""
    cluster = Cluster(peer=False, tmp=tmp / "shoal")
    shoal: ShoalProc | None = None
    try:
        out: dict[str, Any] = {"nodes_ready_s": round(cluster.nodes(args.nodes, args.gpus), 1)}
        (tmp / "shoal").mkdir(exist_ok=True)
        cluster.namespace(JOBS_NS)
        # Reservation pods run as shoal-reserve (the chart makes it; admission refuses
        # pods whose ServiceAccount does not exist).
        cluster.post(
            f"/api/v1/namespaces/{JOBS_NS}/serviceaccounts",
            {"metadata": {"name": "shoal-reserve"}},
        )
        shoal = ShoalProc(cluster, tmp / "shoal", args.profile)
        shoal.queue("bench", args.nodes * args.gpus)
        before = shoal.steps()
        out["a"] = single_gpu_pods(
            cluster, args.pods, "shoal", args.timeout, args.gpus, args.creators
        )
        after = shoal.steps()
        out["cycle_a"] = step_means(before, after)
        time.sleep(10)  # idle cycles with every pod of (a) in the cache
        out["cycle_idle"] = step_means(after, shoal.steps())
        print(json.dumps(out, indent=1), flush=True)
        # Free the GPUs for (b) and (c): delete (a)'s pods at once (grace 0; a graceful
        # delete waits for kwok to finish each of 5,000 pods, ~2/s on a loaded machine).
        # One collection delete; the server goes on after a 504 on a slow answer.
        cluster.http.request(
            "DELETE",
            f"/api/v1/namespaces/{NS}/pods",
            json={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
            timeout=300,
        )
        cluster.http.delete(f"/api/v1/namespaces/{NS}")
        while cluster.http.get(f"/api/v1/namespaces/{NS}").status_code != 404:
            time.sleep(1)
        if args.gangs:
            out["b"] = rest_jobs(cluster, shoal, args.gangs, args.gang_size, 1, args.timeout)
            print(json.dumps(out["b"], indent=1), flush=True)
        if args.fractions:
            out["c"] = rest_jobs(cluster, shoal, args.fractions, 1, 0.5, args.timeout)
        out["usage"] = shoal.usage()
        return out
    finally:
        if shoal:
            shoal.stop()
            if args.profile is not None:  # its log beside the profile
                shutil.copy(tmp / "shoal" / "shoal.log", f"{args.profile}.log")
        cluster.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--pods", type=int, default=5000)
    ap.add_argument("--gangs", type=int, default=300)
    ap.add_argument("--gang-size", type=int, default=8)
    ap.add_argument("--fractions", type=int, default=2000)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--profile", type=Path, help="pstats of Shoal's Loop.run_once to this file")
    ap.add_argument("--shoal-only", action="store_true", help="skip the kube-scheduler peer")
    ap.add_argument("--peer-only", action="store_true", help="only the kube-scheduler peer")
    ap.add_argument("--creators", type=int, default=4, help="pod-creating processes (x8 threads)")
    ap.add_argument("--dra", action="store_true", help="DRA claims only (kubescale_dra)")
    args = ap.parse_args()
    results: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    if args.dra:
        with tempfile.TemporaryDirectory() as tmp_s:
            results["dra"] = kubescale_dra.run(args, Path(tmp_s))
        print(json.dumps(results, indent=1))
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))
        return

    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        # The peer: kube-scheduler, default profile.
        if not args.shoal_only:
            peer = Cluster(peer=True, tmp=tmp / "peer")
            try:
                results["nodes_ready_s_peer"] = round(peer.nodes(args.nodes, args.gpus), 1)
                results["kube-scheduler"] = {
                    "a": single_gpu_pods(
                        peer,
                        args.pods,
                        "default-scheduler",
                        args.timeout,
                        args.gpus,
                        args.creators,
                    )
                }
            finally:
                peer.stop()
            print(json.dumps(results, indent=1), flush=True)

        if not args.peer_only:
            results["shoal"] = run_shoal(args, tmp)
    print(json.dumps(results, indent=1), flush=True)
    a_peer = results.get("kube-scheduler", {}).get("a", {}).get("pods_bound_per_s")
    a_shoal = results.get("shoal", {}).get("a", {}).get("pods_bound_per_s")
    results["ratio_a"] = round(a_shoal / a_peer, 2) if a_peer and a_shoal else None
    print(json.dumps(results, indent=1))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
