"""The heartbeat of a running batch: it extends the leases of the items not settled yet
and, when an extend says an item is no longer held, marks it lost and cancels its handler
if it is the one running (the semantics are :mod:`.runner`'s docstring)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .source import ClaimableSource

if TYPE_CHECKING:
    # the batch is the runner's; the heartbeat only reads and marks it
    from .runner import Batch


async def lost_reasons(source: ClaimableSource[Any], items: list[Any]) -> dict[int, str]:
    """Why ``items`` are no longer held, when the source can say (one round trip on
    this rare path); empty when it cannot or the question fails."""
    why_lost = getattr(source, "why_lost", None)
    if why_lost is None:
        return {}
    try:
        return dict(await why_lost(items))
    except Exception:
        return {}


def start_heartbeat(
    batch: Batch, source: ClaimableSource[Any], lease: Callable[[], float], every: float
) -> None:
    """The first beat's timer callback: the beats go on in a task of the batch's."""
    batch.beats.append(asyncio.create_task(heartbeat(batch, source, lease, every)))


async def heartbeat(
    batch: Batch, source: ClaimableSource[Any], lease: Callable[[], float], every: float
) -> None:
    """Extend every unsettled item of the batch now, then every ``every`` seconds, for
    ``lease()`` seconds each time."""
    while True:
        items = list(batch.unfinished.values())
        if items:
            try:
                held = await source.extend(items, lease())
            except Exception:  # a missed beat is retried next time; the items keep running
                source.log.warning(
                    "drainpipe: heartbeat failed for %s",
                    source.describe(None),
                    exc_info=True,
                    extra={**source.fields(None), "code": None},
                )
            else:
                if len(held) < len(items):
                    gone = [item for item in items if item.id not in held]
                    batch.reasons.update(await lost_reasons(source, gone))
                    mark_lost(batch, gone)
        await asyncio.sleep(every)


def mark_lost(batch: Batch, items: list[Any]) -> None:
    # an item settled while the extend was on its way is not lost: it left unfinished
    lost = {item.id for item in items if item.id in batch.unfinished}
    if not lost:
        return
    for item_id in lost:
        del batch.unfinished[item_id]
    batch.lost = lost if batch.lost is None else batch.lost | lost
    running = batch.running
    if running in lost and batch.cancelled != running and batch.lane is not None:
        # the lane is suspended inside this item's handler: cancel it there
        batch.cancelled = running
        batch.lane.cancel()
