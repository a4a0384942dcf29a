"""Held counts (``QueueStats.held``) and ``JobRecord.held_by`` agree (docs/flow-control.md
#what-held-means): on both storages, through PostgREST and the sync twin, a queue's held
counts are its records' ``held_by`` counted; a retry_wait job whose wait is over is held as
a queued one is, and a job not due yet is held by nothing."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import asdict
from typing import Any

import httpx
import pytest

from drainpipe import Jobs, QueuePolicy, QueueStats, Rate
from drainpipe.backends.postgrest import PostgrestBackend
from drainpipe.models import held_counts
from drainpipe.sync import Jobs as SyncJobs
from drainpipe.testing import MemoryBackend
from tests.admin.conftest import VIEWER, bearer, make_app
from tests.jobs.postgrest_emulation import BASE, SERVICE_KEY, postgrest_emulation

QUEUES: dict[str, Any] = {
    name: dict[str, Any] for name in ("llm", "ledger", "slow", "keyed", "plain", "stopped")
}
POLICIES = {
    "llm": QueuePolicy(concurrency=1),
    "ledger": QueuePolicy(ordered=True),
    "slow": QueuePolicy(key_rate=Rate(1, per=600)),
    "keyed": QueuePolicy(key_concurrency=1),
}


async def fill(jobs: Jobs) -> dict[str, int]:
    """Holds of every kind; returns the ids the checks name."""
    await jobs.ensure_policies()
    await jobs.enqueue_many("llm", [{"n": n} for n in range(3)])
    assert len(await jobs.claim("llm", batch=5)) == 1  # two held by concurrency
    await jobs.enqueue_many("ledger", [{"n": n} for n in range(3)], key="acct")
    await jobs.enqueue("ledger", {"n": 9}, key="other")  # two of acct held by order
    await jobs.enqueue_many("slow", [{"n": 1}, {"n": 2}], key="api")
    assert len(await jobs.claim("slow", batch=5)) == 1  # one held by the key's rate
    # keyed: a retry_wait job whose wait is over, held while its key's place is taken
    first = await jobs.enqueue("keyed", {"n": 1}, key="k")
    (running,) = await jobs.claim("keyed")
    second = await jobs.enqueue("keyed", {"n": 2}, key="k")
    assert await jobs.fail(running, RuntimeError("try again"), retry_in=0) == "queued"
    (taken,) = await jobs.claim("keyed", batch=5)
    assert taken.id == second  # eligible before the retry: the retry is held behind it
    await jobs.enqueue("plain", {"n": 1})
    await jobs.enqueue_many("stopped", [{"n": 1}, {"n": 2}])
    later = await jobs.enqueue("stopped", {"n": 3}, delay=3600)
    await jobs.pause("stopped")
    return {"retrying": first, "later": later}


EXPECTED = {
    "llm": {"concurrency": 2},
    "ledger": {"order": 2},
    "slow": {"rate": 1},
    "keyed": {"concurrency": 1},
    "plain": {},
    "stopped": {"paused": 2},
}


async def check(jobs: Jobs, ids: dict[str, int]) -> None:
    stats = await jobs.stats()
    assert {queue: dict(one.held) for queue, one in stats.items()} == EXPECTED
    for queue, one in stats.items():
        assert sum(one.held.values()) <= one.ready
        page = await jobs.list_jobs(queue)
        assert Counter(r.held_by for r in page.items if r.held_by) == EXPECTED[queue], queue
    retrying = await jobs.get("keyed", ids["retrying"])
    assert retrying is not None
    assert (retrying.state, retrying.held_by) == ("retry_wait", "concurrency")
    later = await jobs.get("stopped", ids["later"])
    assert later is not None and (later.state, later.held_by) == ("queued", None)


async def test_held_counts_are_the_records_held_by_counted(jobs_db_url: str) -> None:
    async with Jobs(jobs_db_url, QUEUES, policies=POLICIES) as jobs:
        ids = await fill(jobs)
        await check(jobs, ids)
        await jobs.resume("stopped")
        assert (await jobs.stats(["stopped"]))["stopped"].held == {}


async def test_postgrest_and_the_sync_twin_show_the_same_held_counts(jobs_db_url: str) -> None:
    async with Jobs(jobs_db_url, QUEUES, policies=POLICIES) as jobs:
        ids = await fill(jobs)
    async with (
        postgrest_emulation(jobs_db_url) as (server, _),
        PostgrestBackend(BASE, SERVICE_KEY) as backend,
    ):
        await check(Jobs(backend, QUEUES), ids)
        assert "stats_v4" in {call[0] for call in server.calls()}

    def sync_view() -> None:
        with SyncJobs(jobs_db_url, QUEUES) as twin:
            stats = twin.stats()
            assert {queue: dict(one.held) for queue, one in stats.items()} == EXPECTED
            record = twin.get("keyed", ids["retrying"])
            assert record is not None and record.held_by == "concurrency"
            later = twin.get("stopped", ids["later"])
            assert later is not None and later.held_by is None

    await asyncio.to_thread(sync_view)


def test_held_counts_are_checked_hash_free_and_serialisable() -> None:
    stats = QueueStats(1, 0, 0, 0, None, held=held_counts({"paused": 1, "rate": 0}))
    assert stats.held == {"paused": 1}
    assert hash(stats) == hash(QueueStats(1, 0, 0, 0, None))  # held is left out of the hash
    assert json.loads(json.dumps(asdict(stats)))["held"] == {"paused": 1}  # the CLI's --json
    assert QueueStats(0, 0, 0, 0, None).held == {}
    assert held_counts('{"order": 3}') == {"order": 3}
    for bad in ({"waiting": 1}, {"rate": -1}, {"rate": True}, {"rate": 1.5}, [1]):
        with pytest.raises(ValueError, match="held counts"):
            held_counts(bad)


async def noop(payload: Any, job: Any) -> None:
    return None


HANDLERS = {queue: noop for queue in QUEUES}


async def test_the_drain_report_shows_held_counts_of_the_queues_that_gave_no_work(
    jobs_db_url: str,
) -> None:
    async with Jobs(jobs_db_url, QUEUES, policies=POLICIES) as jobs:
        await fill(jobs)
        result = await jobs.drain_route(secret="s" * 32, handlers=HANDLERS, budget=5).run()
    # plain and ledger ran their jobs; every other queue gave no work: its held jobs
    assert result["queues"]["plain"] == {"succeeded": 1, "failed": 0}
    # ordered: each of acct's jobs runs once the one before it finished
    assert result["queues"]["ledger"] == {"succeeded": 4, "failed": 0}
    assert result["paused"] == ["stopped"]
    assert result["held"] == {
        "keyed": {"concurrency": 1},
        "llm": {"concurrency": 2},
        "slow": {"rate": 1},
        "stopped": {"paused": 2},
    }
    assert result["more"] is False


async def test_postgrest_drain_reports_and_memory_falls_back_to_paused(jobs_db_url: str) -> None:
    async with Jobs(jobs_db_url, QUEUES, policies=POLICIES) as jobs:
        await fill(jobs)
    async with (
        postgrest_emulation(jobs_db_url) as (server, _),
        PostgrestBackend(BASE, SERVICE_KEY) as backend,
    ):
        route = Jobs(backend, QUEUES).drain_route(secret="s" * 32, handlers=HANDLERS, budget=5)
        result = await route.run()
        assert "queue_holds_v1" in {call[0] for call in server.calls()}
    assert result["held"]["llm"] == {"concurrency": 2}
    assert result["held"]["stopped"] == {"paused": 2} and result["paused"] == ["stopped"]
    memory = Jobs(MemoryBackend(), QUEUES)
    await memory.enqueue("stopped", {"n": 1})
    await memory.pause("stopped")
    report = await memory.drain_route(secret="s" * 32, handlers=HANDLERS, budget=5).run()
    assert report["paused"] == ["stopped"] and "held" not in report


async def test_the_console_overview_shows_what_flow_limits_hold(jobs_db_url: str) -> None:
    async with Jobs(jobs_db_url, QUEUES, policies=POLICIES) as jobs:
        await fill(jobs)
        app = make_app(jobs)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://inbox") as http:
            answer = await http.get("/queues", headers=bearer(VIEWER))
        assert answer.status_code == 200, answer.text
        held = {entry["queue"]: entry["held"] for entry in answer.json()["data"]}
        assert held == EXPECTED  # what stats() says, the paused queue's included


async def test_held_jobs_are_not_work_left_for_the_drain_route(jobs_db_url: str) -> None:
    # "more" asks stats() about the queues the deadline cut short: their held jobs are not
    # work another call could do now, their free ones are
    async with Jobs(jobs_db_url, QUEUES, policies=POLICIES) as jobs:
        await fill(jobs)
        route = jobs.drain_route(secret="s" * 32, handlers=HANDLERS, budget=5)
        for queue in ("llm", "slow", "keyed", "stopped"):
            assert await route._has_ready([queue]) is False, queue
        assert await route._has_ready(["ledger"]) is True  # acct's head and other are free
        assert await route._has_ready(["llm", "plain"]) is True
