"""Issue 25 item 2, without a browser: queue colours distinct and far apart, bars scaled
to the cluster (a huge limit no longer flattens them), and the history charts (an
in-process ring buffer, drawn as inline SVG)."""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.dashboard import charts, history
from api.services import services_of
from api.settings import Settings
from scheduler.model import Node
from scheduler.spec.queue import QueueSpec
from scheduler.store.cluster import save_inventory
from scheduler.store.queues import create_queue

TOKENS = (
    "root-token: {user: root, role: admin}\nann-token: {user: ann, role: member, queues: [q03]}\n"
)
NAMES = [f"q{i:02d}" for i in range(12)]


def _rgb(colour: str) -> tuple[float, float, float]:
    """#rrggbb or hsl(H S% L%) as sRGB in [0, 1]."""
    if colour.startswith("#"):
        r, g, b = (int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5))
        return r, g, b
    h, s, li = (float(x) for x in re.findall(r"[\d.]+", colour)[:3])
    import colorsys

    return colorsys.hls_to_rgb(h / 360, li / 100, s / 100)


def delta_e(a: str, b: str) -> float:
    """CIE76 colour difference (about 2.3 is just noticeable; 20+ is clearly different)."""

    def lab(c: str) -> tuple[float, float, float]:
        lin = [x / 12.92 if x <= 0.04045 else ((x + 0.055) / 1.055) ** 2.4 for x in _rgb(c)]
        r, g, bl = lin
        x = (0.4124 * r + 0.3576 * g + 0.1805 * bl) / 0.95047
        y = 0.2126 * r + 0.7152 * g + 0.0722 * bl
        z = (0.0193 * r + 0.1192 * g + 0.9505 * bl) / 1.08883

        def f(t: float) -> float:
            return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

        return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))

    return sum((p - q) ** 2 for p, q in zip(lab(a), lab(b), strict=True)) ** 0.5


def test_palette_keeps_queues_apart_and_stable() -> None:
    for n, least in ((10, 20.0), (12, 15.0)):
        cs = [charts.colour_at(i) for i in range(n)]
        worst = min(delta_e(a, b) for a, b in itertools.combinations(cs, 2))
        assert worst >= least, (n, worst)
    many = [charts.colour_at(i) for i in range(60)]
    assert len(set(many)) == 60
    assert all(delta_e(a, b) >= 30 for a, b in itertools.pairwise(many))
    assert all(delta_e(c, charts.OTHER) >= 15 for c in many)  # never the anonymous grey
    before = charts.palette(NAMES[:5])
    after = charts.palette([*NAMES[:5], "new"])
    assert all(after[q] == c for q, c in before.items())  # a new queue moves no other


def test_bar_scale_is_the_cluster_not_a_huge_limit() -> None:
    assert charts.bar_scale(8, [2.0, 3.5]) == 8
    assert charts.bar_scale(8, [12.0]) == 12  # a queue holding more than... (borrowed GPUs)
    assert charts.pct(1e6, 8) == 100 and charts.pct(4, 8) == 50 and charts.pct(-1, 8) == 0


def test_ring_buffer_is_bounded_and_ordered() -> None:
    h = history.History(database=None, size=3)  # type: ignore[arg-type]
    for t in (1.0, 2.0, 3.0, 4.0, 2.5):
        h.record(history.Sample(t, 8, t, {"a": t}))
    assert [s.at for s in h.samples(fresh=False)] == [2.0, 3.0, 4.0]
    line = charts.polyline([(0, 0), (5, 4), (10, 8)], 0, 10, 8, width=100, height=10)
    assert line.split() == [
        "0.0,10.0",
        "50.0,10.0",
        "50.0,5.0",
        "100.0,5.0",
        "100.0,0.0",
        "100.0,0.0",
    ]


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'd.db'}", tokens_yaml=TOKENS))
    with app.state.database.session() as s:
        save_inventory(session=s, nodes=(Node("n1", 64_000, 256_000, 8, "H100", 81920),))
        for i, name in enumerate(NAMES):
            quota = {"guaranteed": 0.5} if i else {"guaranteed": 4, "limit": 1e6}
            create_queue(session=s, spec=QueueSpec.model_validate({"name": name, **quota}))
    with TestClient(app) as c:
        c.cookies.set("shoal_token", "root-token")
        yield c
    app.state.database.close()


def test_queues_page_colours_apart_bars_to_scale_and_history(client: TestClient) -> None:
    html = client.get("/ui/queues").text
    dots = dict(
        re.findall(
            r'<tr data-testid="queue-(q\d\d)">\s*<td[^>]*>'
            r'<span class="dot" style="background: ([^"]+)"',
            html,
        )
    )
    assert sorted(dots) == NAMES
    worst = min(delta_e(dots[a], dots[b]) for a, b in itertools.combinations(NAMES, 2))
    assert worst >= 15, worst  # the hash of the name gave near-twins
    # q00: guarantee 4 of the cluster's 8 GPUs, limit 1e6: the guarantee line at the
    # middle of its bar (it sat at 0.0004 % when the limit set the scale), the limit at the end.
    bar = re.search(r'data-testid="bar-q00">(.*?)</svg>', html, re.S)
    assert bar is not None
    x = float(re.search(r'x="([\d.]+)"[^>]*data-part="guarantee"', bar.group(1)).group(1))  # type: ignore[union-attr]
    assert 49 <= x <= 50, x
    assert 'data-testid="history"' in html


def test_history_is_drawn_once_there_are_two_samples(client: TestClient) -> None:
    app_history = services_of(client.app).history  # type: ignore[arg-type]
    app_history.sample()
    app_history.clock = lambda: 10**10  # later: a fresh sample on the next page
    html = client.get("/ui/cluster").text
    assert re.search(r'<polyline[^>]*data-series="GPUs allocated"[^>]*points="[\d., ]+"', html)
    html = client.get("/ui/queues").text
    assert html.count("<polyline") == len(NAMES)  # one line per queue the admin sees
    client.cookies.set("shoal_token", "ann-token")
    html = client.get("/ui/queues").text
    assert re.findall(r'data-series="([^"]+)"', html) == ["q03"]  # a member: its queue only


def test_the_sampler_thread_records_and_stops(client: TestClient) -> None:
    h = history.History(client.app.state.database, interval_s=0.05)  # type: ignore[attr-defined]
    h.start()
    try:
        deadline = time.monotonic() + 30
        while len(h.samples(fresh=False)) < 3:
            assert time.monotonic() < deadline, "no samples"
            time.sleep(0.05)
    finally:
        h.stop()
    first = h.samples(fresh=False)[0]
    assert first.capacity == 8 and first.allocated == 0
