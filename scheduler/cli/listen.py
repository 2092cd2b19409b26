"""`shoal serve`'s listening socket, bound before anything is announced or written.

uvicorn binds late: on a port another server holds, `shoal serve` used to print "serving
on ...", write the state directory's `url` (so the CLI then talked to the other server
and got a 401 it could not explain) and only then fail. `bind` takes the port first and
stops with the reason; port 0 gets a free port, and the URL names the one bound.
"""

from __future__ import annotations

import errno
import socket
from pathlib import Path


def claim_port(host: str, port: int, *, url_file: Path | None) -> tuple[socket.socket, str]:
    """The bound socket and the URL it serves. When the port is taken, a `url_file` (the
    state directory's, when no other server of that directory runs) that names this URL is
    removed before stopping: it would lead the CLI to whatever server holds the port."""
    try:
        sock = bind(host, port)
    except SystemExit:
        url = f"http://{host}:{port}"
        if url_file is not None and url_file.exists() and url_file.read_text().strip() == url:
            url_file.unlink()
        raise
    return sock, url_of(host, sock)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (uvicorn serves on it), else `SystemExit` with
    why: in use, or not an address of this host."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise SystemExit(f"cannot listen on {host}:{port}: {e.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise SystemExit(
                f"cannot listen on {host}:{port}: the port is in use (another server, perhaps "
                "another `shoal serve`); stop it, or pick another --port"
            ) from None
        raise SystemExit(f"cannot listen on {host}:{port}: {e.strerror}") from None
    return sock


def url_of(host: str, sock: socket.socket) -> str:
    """The URL the CLI and workers use: `host` as given, the port bound (the real one
    when 0 was asked)."""
    port = sock.getsockname()[1]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
