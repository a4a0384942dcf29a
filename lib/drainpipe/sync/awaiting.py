"""The sync twin of :mod:`drainpipe.awaiting`: an application's function that answers an
awaitable is refused (there is no event loop to run it), and the awaitable is closed."""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["settled"]


def settled(value: Any, what: str) -> Any:
    """``value`` as the application's ``what`` answered it; an awaitable (an ``async def``
    function's coroutine) → ``TypeError`` after closing it, so that Python does not warn
    that it was never awaited."""
    if inspect.isawaitable(value):
        close = getattr(value, "close", None)
        if close is not None:
            close()
        raise TypeError(f"drainpipe.sync needs a plain {what} function, not an async one")
    return value
