"""The picture of a replay (`shoal simulate --plot FILE`): GPU utilisation over time, the
GPUs each queue holds against its guarantee, and the distribution of queueing delay per
queue. matplotlib (Agg: no display) is imported only here, when a plot is asked for."""

from __future__ import annotations

from pathlib import Path

from scheduler.sim.replay import SimReport


def write(rep: SimReport, path: Path, *, title: str = "") -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # a dev extra, not a runtime dependency
        raise RuntimeError("--plot needs matplotlib (pip install matplotlib)") from exc
    hours = [(t - rep.start) / 3600 for t, _ in rep.utilisation]
    # Each sample holds until the next one; the last until the replay's end.
    xs = [*hours, (rep.end - rep.start) / 3600]
    fig, (ax_u, ax_q, ax_w) = plt.subplots(3, 1, figsize=(9, 10), dpi=110)
    util = [100 * u for _, u in rep.utilisation]
    ax_u.stairs(util, xs, fill=True, alpha=0.4)
    ax_u.axhline(100 * rep.mean_utilisation(), color="black", linestyle=":", linewidth=1)
    ax_u.set_ylabel("GPUs held (% of cluster)")
    ax_u.set_ylim(0, 100)
    ax_u.set_title(title or f"replay of {rep.jobs} jobs")
    ax_u.text(0.01, 0.92, f"mean {rep.mean_utilisation():.1%}", transform=ax_u.transAxes)
    for k, (q, g) in enumerate(sorted(rep.guaranteed.items())):
        color = f"C{k % 10}"
        ax_q.stairs([h.get(q, 0.0) for h in rep.usage], xs, color=color, label=q)
        ax_q.axhline(g, color=color, linestyle="--", linewidth=0.9)
    ax_q.set_ylabel("GPUs held (dashed: guarantee)")
    ax_q.legend(loc="upper right", fontsize="small")
    for ax in (ax_u, ax_q):
        ax.set_xlabel("virtual time (h)")
        ax.grid(alpha=0.3)
    for k, q in enumerate(sorted(rep.guaranteed)):
        d = sorted(w / 3600 for w in rep.delays.get(q, []))
        if d:
            ys = [100 * (i + 1) / len(d) for i in range(len(d))]
            ax_w.step(d, ys, where="post", color=f"C{k % 10}", label=f"{q} ({len(d)} placed)")
    ax_w.set_xlabel("wait from submit to first launch (h)")
    ax_w.set_ylabel("jobs placed (%)")
    ax_w.set_ylim(0, 100)
    ax_w.grid(alpha=0.3)
    ax_w.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
