"""The API's connections past `SHOAL_API_MAX_CONNECTIONS` are refused by the HTTP protocol
itself, before any app runs: 503 with `Retry-After`, and the connection closed.

The app's own shedding (`api.overload.LoadShedder`) decides only once the event loop gets
to a request's task, so under a flood its refusals waited behind the admitted requests
(p99 0.57-1.19 s at 600/s: docs/benchmarks.md). Here a connection opened while the bound
is reached is answered from the protocol's data callback as soon as its request has
arrived: no task, no middleware, no database. uvicorn's own `limit_concurrency` refuses
the same way but without `Retry-After`, and logs a warning per refusal (thousands in a
flood). Connections already admitted keep being served (keep-alive clients are not cut
off mid-conversation); the bound counts open connections, idle ones included.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from api.errors import ErrorItem, response
from api.settings import Settings

DRAIN_BYTES = 64 * 1024  # a refused request's body read up to this (as `LoadShedder`)


@functools.cache
def _limits() -> tuple[int, int]:
    settings = Settings.from_env()
    return settings.max_connections, settings.retry_after_s


@functools.cache
def _refusal(max_connections: int, retry_after_s: int) -> bytes:
    msg = f"server overloaded ({max_connections} connections open); retry after {retry_after_s} s"
    item = ErrorItem(loc=[], msg=msg, type="overloaded.connections")
    answer = response(503, [item], {"Retry-After": str(retry_after_s)})
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # h11 answers only a request
    conn.next_event()
    headers = [*answer.raw_headers, (b"connection", b"close")]
    return (
        conn.send(h11.Response(status_code=503, headers=headers))
        + conn.send(h11.Data(data=bytes(answer.body)))
        + conn.send(h11.EndOfMessage())
    )


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol (`uvicorn.Config(http=GuardedH11)`) with the bound."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        limit = _limits()[0]
        self._refused = 0 < limit < len(self.connections)
        self._drained = 0

    def data_received(self, data: bytes) -> None:
        if not self._refused:
            super().data_received(data)
            return
        # Read the request first: answering before its body is in makes the client's
        # send fail, and it would see a reset, not the 503.
        self._drained += len(data)
        self.conn.receive_data(data)
        while True:
            try:
                event: Any = self.conn.next_event()
            except h11.RemoteProtocolError:
                self.transport.close()
                return
            if isinstance(event, h11.EndOfMessage) or self._drained > DRAIN_BYTES:
                self.transport.write(_refusal(*_limits()))
                self.transport.close()
                return
            if event is h11.NEED_DATA or isinstance(event, h11.ConnectionClosed):
                return
