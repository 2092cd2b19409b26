"""Colours and scales for the dashboard's SVG bars and charts (pure functions).

Queue colours: a queue's colour is picked by its place in the order queues were created
(ties by name), so it never changes while the queue exists and a new queue takes the next
colour. The first ten are a qualitative palette chosen for contrast (Tableau 10 without
its grey, which the dashboard keeps for other teams' anonymous shares, plus a dark cyan);
beyond ten, hues step by the golden angle (137.5°) with lightness alternating, so queues
next to each other in that order stay far apart. The hash of the name used before gave two
queues 171° and 172°.
"""

from __future__ import annotations

import colorsys
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

OTHER = "#9aa0a6"  # another team's share: grey, never a queue's colour
BASE = (
    "#4e79a7",  # blue
    "#f28e2b",  # orange
    "#e15759",  # red
    "#59a14f",  # green
    "#b07aa1",  # purple
    "#edc948",  # yellow
    "#9c755f",  # brown
    "#76b7b2",  # teal
    "#ff9da7",  # pink
    "#1f5f6b",  # dark cyan
)
GOLDEN_ANGLE = 137.50776
LIGHTNESS = (0.42, 0.62, 0.30)


def colour_at(index: int) -> str:
    """The colour of the queue at `index` in creation order (#rrggbb)."""
    if index < len(BASE):
        return BASE[index]
    k = index - len(BASE)
    hue = (15.0 + k * GOLDEN_ANGLE) % 360.0
    r, g, b = colorsys.hls_to_rgb(hue / 360.0, LIGHTNESS[k % len(LIGHTNESS)], 0.65)
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


def palette(ordered: Sequence[str]) -> dict[str, str]:
    """name -> colour for queues in creation order."""
    return {name: colour_at(i) for i, name in enumerate(ordered)}


def colours(ordered: Sequence[str]) -> Callable[[str | None], str]:
    """The templates' `colour(queue)`: a hidden queue (None) is grey, one created since
    the list was read takes the next free colour."""
    found = palette(ordered)

    def colour(queue: str | None) -> str:
        if not queue:
            return OTHER
        return found.get(queue) or colour_at(len(found))

    return colour


def bar_scale(capacity: float, values: Iterable[float]) -> float:
    """The GPU count a full-width queue bar stands for: the cluster's GPUs, or more when
    what a queue holds or is entitled to exceeds them. Guarantees and limits do not widen
    it (a limit of 1e6 would flatten every bar); beyond the scale they are drawn at the
    bar's end (`pct`)."""
    return max([1.0, capacity, *values])


def pct(value: float, scale: float) -> float:
    """`value` as a percentage of `scale`, clamped to [0, 100]."""
    if scale <= 0:
        return 0.0
    return round(max(0.0, min(100.0, 100.0 * value / scale)), 3)


@dataclass(frozen=True)
class Series:
    """One line of a chart: its label, colour and (t, value) points."""

    label: str
    colour: str
    points: list[tuple[float, float]]


def polyline(
    points: Sequence[tuple[float, float]],
    t0: float,
    t1: float,
    top: float,
    width: float = 600.0,
    height: float = 120.0,
) -> str:
    """SVG polyline `points` for (t, v) in a width x height box, v=0 at the bottom and
    v=top at the top; each value holds until the next point (a step line)."""
    if not points:
        return ""
    span = (t1 - t0) or 1.0
    top = top or 1.0

    def xy(t: float, v: float) -> str:
        x = width * (t - t0) / span
        y = height - height * max(0.0, min(v, top)) / top
        return f"{x:.1f},{y:.1f}"

    out = [xy(points[0][0], points[0][1])]
    for (_, v_prev), (t, v) in itertools.pairwise(points):
        out.append(xy(t, v_prev))
        out.append(xy(t, v))
    out.append(xy(t1, points[-1][1]))
    return " ".join(out)
