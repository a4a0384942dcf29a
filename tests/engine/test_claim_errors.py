"""A fatal claim error: the other lanes finish their batch, then the call raises."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

import drainpipe
from drainpipe import DrainpipeError, Jobs

QUEUES: dict[str, Any] = {"raw": dict[str, Any]}


@pytest.fixture
async def jobs(jobs_db_url: str) -> AsyncIterator[Jobs]:
    instance = Jobs(jobs_db_url, QUEUES)
    yield instance
    await instance.backend.db.close()  # type: ignore[attr-defined]


class FailingClaims:
    """The SQL backend whose second claim fails with a non-transient error after a pause."""

    api_version = 1
    name = "failing"
    leases = True

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.reads = 0

    async def read(self, queue: str, *, lease: float, batch: int) -> list[Any]:
        self.reads += 1
        if self.reads == 2:
            await asyncio.sleep(0.05)
            raise DrainpipeError("forbidden", "no")
        return await self.inner.read(queue, lease=lease, batch=batch)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_fatal_claim_lets_other_lanes_finish_their_batch_then_raises(jobs: Jobs) -> None:
    await jobs.enqueue_many("raw", [{"i": i} for i in range(4)])
    failing = Jobs(FailingClaims(jobs.backend), QUEUES)
    done: list[int] = []

    async def slow(payload: dict[str, Any], job: drainpipe.Job[Any]) -> None:
        await asyncio.sleep(0.2)
        done.append(payload["i"])

    with pytest.raises(DrainpipeError) as info:
        await failing.work("raw", slow, concurrency=2, batch=2, poll_interval=0.01)
    assert info.value.kind == "forbidden"
    assert sorted(done) == [0, 1]
    stats = (await jobs.stats(["raw"]))["raw"]
    assert (stats.ready, stats.in_flight) == (2, 0)  # the finished batch was completed


# -- dedupe in a caller's transaction --------------------------------------------------
