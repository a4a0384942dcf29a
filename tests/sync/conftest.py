"""One suite for both twins: each behavioural test runs once on the async API and once on
``drainpipe.sync``. A sync object is driven through :class:`InThread`, which runs each of
its calls in a worker thread (no event loop there, as in a Django or Flask worker), so the
same ``await obj.call(...)`` line exercises both."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

import drainpipe
from drainpipe import sync

FLAVOURS = ("async", "sync")


class InThread:
    """Every method of a sync object as a coroutine that runs it in a worker thread."""

    def __init__(self, target: Any) -> None:
        self.target = target

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.target, name)
        if not callable(attribute):
            return attribute

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(attribute, *args, **kwargs)

        return call


class Twin:
    """Builds the same object on either twin and adapts handlers to it."""

    def __init__(self, flavour: str) -> None:
        self.flavour = flavour
        self.closers: list[Callable[[], Any]] = []

    @property
    def is_sync(self) -> bool:
        return self.flavour == "sync"

    def jobs(self, db: Any, queues: dict[str, Any], **options: Any) -> Any:
        if self.is_sync:
            made: Any = InThread(sync.Jobs(db, queues, **options))
        else:
            made = drainpipe.Jobs(db, queues, **options)
        self.closers.append(made.close)
        return made

    def idempotency(self, db: Any, **options: Any) -> Any:
        made: Any = (
            InThread(sync.Idempotency(db, **options))
            if self.is_sync
            else drainpipe.Idempotency(db, **options)
        )
        self.closers.append(made.db.close if not self.is_sync else made.close)
        return made

    def inbox(self, db: Any, **options: Any) -> Any:
        made: Any = (
            InThread(sync.WebhookInbox(db, **options))
            if self.is_sync
            else drainpipe.WebhookInbox(db, **options)
        )
        self.closers.append(made.close)
        return made

    def handler(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` (a plain function) as this twin's handler: itself for the sync twin, a
        coroutine running it in a thread for the async one (so it may block alike)."""
        if self.is_sync:
            return fn

        async def handler(*args: Any) -> Any:
            return await asyncio.to_thread(fn, *args)

        return handler


@pytest.fixture(params=FLAVOURS)
async def twin(request: pytest.FixtureRequest) -> AsyncIterator[Twin]:
    made = Twin(str(request.param))
    yield made
    for close in reversed(made.closers):
        result = close()
        if asyncio.iscoroutine(result):
            await result
