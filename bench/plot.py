"""Plots for the benchmarks (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def inflation(curves: dict[str, list[list[float]]], path: Path) -> None:
    """Allocation ratio vs arrived GPU requests, mean over seeds, band = min..max."""
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    for name, cs in curves.items():
        xs = list(range(len(cs[0])))
        mean = [100 * sum(c[i] for c in cs) / len(cs) for i in xs]
        lo = [100 * min(c[i] for c in cs) for i in xs]
        hi = [100 * max(c[i] for c in cs) for i in xs]
        width = 2.2 if name == "fgd" else 1.2
        (line,) = ax.plot(xs, mean, label=name, linewidth=width)
        ax.fill_between(xs, lo, hi, alpha=0.15, color=line.get_color())
    ax.plot([0, 100], [0, 100], color="grey", linestyle=":", linewidth=0.8)
    ax.set_xlabel("arrived GPU requests (% of 6,212 GPUs)")
    ax.set_ylabel("GPUs allocated (%)")
    ax.set_title("Workload inflation on the Alibaba openb trace (1,213 nodes)")
    ax.set_xlim(60, 130)
    ax.set_ylim(60, 100)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def inflation_grid(
    results: dict[str, dict[str, list[list[float]]]],
    path: Path,
    reference: dict[str, list[list[float]]] | None = None,
    protocol: str = "openb",
) -> None:
    """One panel per pod list: allocation vs arrivals (mean over seeds, band =
    min..max), the paper's FGD dashed where its published curves are known."""
    reference = reference or {}
    lists = list(results)
    cols = min(2, len(lists))
    rows = (len(lists) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(7 * cols, 4.6 * rows), dpi=110, squeeze=False)
    for k, lst in enumerate(lists):
        ax = axes[k // cols][k % cols]
        series = dict(results[lst])
        for name, cs in series.items():
            if not cs:
                continue
            xs = list(range(len(cs[0])))
            mean = [100 * sum(c[i] for c in cs) / len(cs) for i in xs]
            lo = [100 * min(c[i] for c in cs) for i in xs]
            hi = [100 * max(c[i] for c in cs) for i in xs]
            width = 2.4 if name == "fgd-learned" else 1.1
            (line,) = ax.plot(xs, mean, label=name, linewidth=width)
            ax.fill_between(xs, lo, hi, alpha=0.12, color=line.get_color())
        if reference.get(lst):
            cs = reference[lst]
            xs = list(range(len(cs[0])))
            mean = [100 * sum(c[i] for c in cs) / len(cs) for i in xs]
            ax.plot(xs, mean, "k--", linewidth=1.6, label="paper's FGD (published)")
        ax.plot([0, 100], [0, 100], color="grey", linestyle=":", linewidth=0.8)
        ax.set_title(f"pod list {lst} ({protocol} protocol)")
        ax.set_xlabel("arrived GPU requests (% of 6,212 GPUs)")
        ax.set_ylabel("GPUs allocated (%)")
        ax.set_xlim(70, 130)
        ax.set_ylim(70, 100)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=7)
    for k in range(len(lists), rows * cols):
        axes[k // cols][k % cols].axis("off")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def gap_to_paper(
    ours: list[list[float]],
    paper: list[list[float]],
    ceilings: list[list[float]],
    path: Path,
    pod_list: str = "default",
) -> None:
    """The default policy's mean curve minus the paper's FGD, in points of capacity,
    against arrivals; with the same for a policy that places every task (the arrivals'
    own curve), which is all the gap can be where no task was dropped."""
    xs = list(range(min(len(ours[0]), len(paper[0]))))

    def mean(cs: list[list[float]], i: int) -> float:
        return 100 * sum(c[i] for c in cs) / len(cs)

    fig, ax = plt.subplots(figsize=(8, 4), dpi=110)
    ax.plot(xs, [mean(ours, i) - mean(paper, i) for i in xs], linewidth=1.8,
            label="Shoal fgd-learned (default) - paper's FGD")  # fmt: skip
    ax.plot(xs, [mean(ceilings, i) - mean(paper, i) for i in xs], "k:", linewidth=1.2,
            label="all arrivals placed - paper's FGD (order of arrivals only)")  # fmt: skip
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_ylim(-0.25, 1.0)  # the gap is hundredths of a point until drops start
    ax.grid(alpha=0.3)
    ax.set_xlabel("arrived GPU requests (% of capacity)")
    ax.set_ylabel("allocation difference (points)")
    ax.set_title(f"{pod_list}: mean over seeds, minus the paper's published FGD curve")
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
