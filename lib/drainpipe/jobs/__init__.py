"""Jobs: typed queues on Postgres with leases, fenced completion, retries and dead letters.

:mod:`.client` is :class:`Jobs`, :mod:`.queue` the typed per-queue handle, and
:mod:`.worker` the jobs source of the lease engine behind ``work`` and ``drain``."""

from .client import Handler, Jobs, OnError
from .policy import QueuePolicy
from .queue import Queue

__all__ = ["Handler", "Jobs", "OnError", "Queue", "QueuePolicy"]
