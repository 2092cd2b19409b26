"""`-o json|yaml|wide` on the list and show commands, kubectl's convention.

`table` (the default) fits the terminal (80 columns when piped): long reasons are cut
with "…", names and ids stay whole. `wide` adds the columns the default leaves out and
shows reasons whole. `json` and `yaml` print what the API answered, unchanged: one object
for a show command, `{"items": [...]}` for a list (as `kubectl get -o json` does), so a
script reads fields rather than columns.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

out = Console(highlight=False)


class Format(enum.StrEnum):
    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"


Output = Annotated[
    Format,
    typer.Option("--output", "-o", help="table, wide (every column, reasons whole), json, yaml"),
]


def data(fmt: Format, value: Any) -> bool:
    """Print `value` as JSON or YAML when `fmt` asks for data; False for a table."""
    if fmt is Format.JSON:
        print(json.dumps(value, indent=2, ensure_ascii=False))
    elif fmt is Format.YAML:
        print(yaml.safe_dump(value, sort_keys=False, allow_unicode=True), end="")
    else:
        return False
    return True


def items(fmt: Format, rows: list[Any]) -> bool:
    """`data` for a list command."""
    return data(fmt, {"items": rows})


def cut(text: str, width: int) -> str:
    """`text` on one line of at most `width` characters, "…" where it was cut."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    plain: str | None = None,
    fold: bool = False,
    room: int = 24,
) -> None:
    """Print rows under `headers` (cells are rich markup), names and ids whole.

    `plain`: the header of the last column, whose cells are text (never markup). By
    default it gives way: cut to what the other columns leave of the width (the
    terminal's, 80 when piped), so a row is one line. With `fold` it is shown whole:
    folded on a terminal (at least `room` columns for it), one line a row when piped,
    for grep. A table wider than the console is printed whole anyway: rich would cut a
    column with an ellipsis, and an id so cut cannot be copied."""
    piped = not out.is_terminal
    names = list(headers)
    last = len(names) - 1 if plain is not None else -1

    def width(i: int) -> int:
        cells = [names[i], *(r[i] for r in rows)]
        return max(len(c) if i == last else out.render_str(c).cell_len for c in cells)

    gaps = 2 * (len(names) - 1)  # columns are two spaces apart, none at the edges
    fixed = gaps + sum(width(i) for i in range(len(names)) if i != last)
    if last >= 0 and not fold:
        rows = [[*r[:last], cut(r[last], max(1, out.width - fixed))] for r in rows]
    t = Table(box=None, header_style="bold", pad_edge=False)
    for i, name in enumerate(names):
        wraps = i == last and fold and not piped
        t.add_column(name, no_wrap=not wraps, overflow="fold" if wraps else "ellipsis")
    for r in rows:
        if last >= 0:
            t.add_row(*r[:last], escape(r[last]))
        else:
            t.add_row(*r)
    need = fixed + (width(last) if last >= 0 and (piped or not fold) else 0)
    if last >= 0 and fold and not piped:
        need += room
    if need <= out.width:
        out.print(t)
        return
    Console(highlight=False, width=need, force_terminal=out.is_terminal).print(t, crop=False)
