"""`shoal serve` on a port another server holds stops with the reason before it says
"serving on" or writes the `url` file the CLI would follow to the other server (issue 25
item 10)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler.cli import serve


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen(1)
        yield int(other.getsockname()[1])


def _serve(state: Path, port: int) -> None:
    serve.serve(
        host="127.0.0.1",
        port=port,
        state_dir=str(state),
        database_url=None,
        cluster=None,
        backend_kind="local",
        policy="fgd",
        interval_s=1.0,
        min_runtime_s=0.0,
    )


def test_a_busy_port_is_refused_and_no_url_file_is_left(
    tmp_path: Path, busy_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit, match="the port is in use") as stopped:
        _serve(tmp_path / "fresh", busy_port)
    assert f"127.0.0.1:{busy_port}" in str(stopped.value.code)
    assert "serving on" not in capsys.readouterr().out
    assert not (tmp_path / "fresh" / "url").exists()


def test_a_url_file_naming_the_busy_port_is_removed(tmp_path: Path, busy_port: int) -> None:
    """Left by this directory's last server (stopped since; the port is someone else's now)."""
    state = tmp_path / "old"
    state.mkdir()
    (state / "url").write_text(f"http://127.0.0.1:{busy_port}\n")
    with pytest.raises(SystemExit, match="the port is in use"):
        _serve(state, busy_port)
    assert not (state / "url").exists()
