"""ASGI middleware refusing request bodies over a size limit with 413, before any route
reads them. A declared Content-Length is checked at once; a chunked body (no length) is
read up to the limit first and then replayed to the app."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import ErrorItem, response


class BodySizeLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        item = ErrorItem(
            loc=["body"], msg=f"request body over {self.max_bytes} bytes", type="too_large"
        )
        await response(413, [item])(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # No text column takes a NUL byte (PostgreSQL refuses it): 422 before any route runs.
        query = scope.get("query_string", b"")
        where = "path" if "\x00" in scope["path"] else None
        if b"%00" in query or b"\x00" in query:
            where = where or "query"
        if where is not None:
            item = ErrorItem(
                loc=[where], msg=f"the {where} contains a NUL byte", type="value_error"
            )
            await response(422, [item])(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                if value.isdigit() and int(value) > self.max_bytes:
                    await self._refuse(scope, receive, send)
                    return
                await self.app(scope, receive, send)  # the server enforces the length
                return
        buffered: list[Message] = []
        seen = 0
        while True:
            message = await receive()
            buffered.append(message)
            if message["type"] != "http.request":
                break
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return buffered.pop(0) if buffered else await receive()

        await self.app(scope, replay, send)
