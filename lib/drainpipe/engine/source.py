"""What the runner runs: a :class:`ClaimableSource` of leased items, and the hooks it calls."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

log = logging.getLogger("drainpipe")

OnError = Callable[[BaseException, Any], Any]


class Claimed(Protocol):
    """What the runner needs of a claimed item: its id (unique within its source)."""

    @property
    def id(self) -> int: ...


ItemT = TypeVar("ItemT", bound=Claimed)
ItemT_co = TypeVar("ItemT_co", bound=Claimed, covariant=True)


class ClaimableSource(Protocol[ItemT]):
    """Something that hands out items under a lease and settles them, fenced.

    * ``leases``: False when the source cannot extend leases (no heartbeat is sent).
    * ``heartbeat_floor``: the shortest time between heartbeats, in seconds.
    * ``complete_each``: settle each success at once (the source has no batch completion).
    * ``async_handler``: ``start`` always returns an awaitable (skips a check per item).
    * optional ``complete_and_claim(items, batch, lease)``: settle ``items`` as done and
      claim the next batch atomically; returns ``(refused items, claimed items)``.
    """

    leases: bool
    heartbeat_floor: float
    complete_each: bool
    async_handler: bool
    #: where errors without an ``on_error`` are logged (a child of ``drainpipe``)
    log: logging.Logger

    # Plain methods returning awaitables, so an adapter may hand its backend's coroutine
    # straight through (no extra coroutine per claim on the hot path); ``async def`` fits too.
    def claim(self, batch: int, lease: float) -> Awaitable[Sequence[ItemT]]:
        """Up to ``batch`` items leased for ``lease`` seconds (empty: nothing is due)."""
        ...

    def extend(self, items: Sequence[ItemT], lease: float) -> Awaitable[set[int]]:
        """Extend the leases of ``items`` in one round trip; the ids still held."""
        ...

    def complete(self, items: Sequence[ItemT]) -> Awaitable[Sequence[ItemT]]:
        """Settle ``items`` as done; the items whose settlement was refused (lease lost)."""
        ...

    def fail(
        self,
        item: ItemT,
        error: str,
        retry_in: float | None,
        code: str | None = None,
        discard: bool = False,
    ) -> Awaitable[Any]:
        """Settle ``item`` as failed: retried after ``retry_in`` s (None: the backoff),
        recording ``code``; ``discard``: no more attempts."""
        ...

    def start(self, item: ItemT) -> Any:
        """Call the handler on ``item``; what it returns (awaited when awaitable)."""
        ...

    def describe(self, item: ItemT | None) -> str:
        """Words for logs and errors: ``queue emails job 12 (attempt 1/5)``."""
        ...

    def fields(self, item: ItemT | None) -> dict[str, Any]:
        """The ``extra`` fields of a log record about ``item`` (or the source: None)."""
        ...


async def call_hook(hook: Callable[..., Any] | None, *args: Any) -> Any:
    """Call a plain or async hook; its own failure is logged, never raised."""
    if hook is None:
        return None
    try:
        result = hook(*args)
        if inspect.isawaitable(result):
            result = await result
        return result
    except Exception:
        log.exception("drainpipe: a hook raised")
        return None
