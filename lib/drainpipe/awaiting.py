"""An application's function may answer an awaitable: the async API awaits it.

Its sync twin, :mod:`drainpipe.sync.awaiting`, refuses one instead (there is no event loop
to run it); the generated sync modules import it in place of this one.
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["settled"]


async def settled(value: Any, what: str) -> Any:
    """``value``, awaited when the application's ``what`` (``"replay_check"``) answered an
    awaitable: plain and ``async def`` functions are both accepted."""
    if inspect.isawaitable(value):
        return await value
    return value
