"""The lease engine: one pure core (:mod:`.core`) and one runner (:mod:`.runner`) that jobs
and the webhook inbox (and, next, the agent inbox) run on. The semantics are written once,
in :mod:`drainpipe.engine.runner`'s docstring and in ``docs/engine.md``."""

from .runner import LEASE_LOST, ClaimableSource, Runner, call_hook, lease_lost

__all__ = ["LEASE_LOST", "ClaimableSource", "Runner", "call_hook", "lease_lost"]
