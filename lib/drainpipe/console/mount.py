"""An ASGI app served below a path prefix it is not mounted at: what a platform that routes
every path under a function to it (Vercel's rewrites) needs so that the app's routes and its
page's links are relative to that prefix."""

from __future__ import annotations

from typing import Any

from ..http import Receive, Scope, Send


class Mounted:
    """``app`` served below ``prefix`` when the platform hands it the full path (Vercel gives
    the function at ``/api/jobs`` every path under it through a rewrite): ``root_path``
    becomes the prefix, so routes and the page's links are relative to it."""

    def __init__(self, prefix: str, app: Any) -> None:
        self.prefix = "/" + prefix.strip("/")
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope.get("root_path"):
            path = str(scope.get("path") or "/")
            if path == self.prefix or path.startswith(self.prefix + "/"):
                scope = dict(scope, root_path=self.prefix)
        await self.app(scope, receive, send)

    async def aclose(self) -> None:
        close = getattr(self.app, "aclose", None)
        if close is not None:
            await close()
