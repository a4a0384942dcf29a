"""An in-memory backend with the SQL backends' semantics, for tests without Postgres
(re-exported by :mod:`drainpipe.testing`)."""

from .backend import MemoryBackend
from .clock import Clock, retry_delay

__all__ = ["Clock", "MemoryBackend", "retry_delay"]
