"""The lease engine: one pure core (:mod:`.core`), how it reports errors (:mod:`.reports`),
what it runs (:mod:`.source`), a batch's heartbeat (:mod:`.heartbeat`) and one runner
(:mod:`.runner`) that jobs and the webhook inbox (and, next, the agent inbox) run on. The semantics are written once, in :mod:`drainpipe.engine.runner`'s
docstring and in ``docs/engine.md``. The sync twin's worker (:mod:`drainpipe.sync.worker`)
uses the core and the reports; the runner (asyncio) loads on first use."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .core import LEASE_LOST, lease_lost

if TYPE_CHECKING:
    from .runner import ClaimableSource, Runner, call_hook

__all__ = ["LEASE_LOST", "ClaimableSource", "Runner", "call_hook", "lease_lost"]


def __getattr__(name: str) -> Any:
    if name not in ("ClaimableSource", "Runner", "call_hook"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(".runner", __name__), name)
    globals()[name] = value
    return value
