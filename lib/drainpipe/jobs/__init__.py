"""Jobs: typed queues on Postgres with leases, fenced completion, retries and dead letters.

:mod:`.client` is :class:`Jobs`, :mod:`.queue` the typed per-queue handle, and
:mod:`.worker` the jobs source of the lease engine behind ``work`` and ``drain``;
:mod:`.job_rules` holds the checks and payload handling :class:`Jobs` shares with the sync
twin (:mod:`drainpipe.sync`). The names load on first use, so the sync twin can import
the rules without the async client (and asyncio)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .client import Handler, Jobs, OnError
    from .policy import QueuePolicy, Rate
    from .queue import Queue

__all__ = ["Handler", "Jobs", "OnError", "Queue", "QueuePolicy", "Rate"]

_EXPORTS = {
    "Handler": "client",
    "Jobs": "client",
    "OnError": "client",
    "Queue": "queue",
    "QueuePolicy": "policy",
    "Rate": "policy",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
