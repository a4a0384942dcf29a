"""Durable steps in records and retention, on both storages.

* A resumed run keeps its attempt number in every record reader: ``get``, ``list_jobs``
  and the SQL functions behind the console's search and PostgREST agree.
* A job's step and workflow rows go with its record (``purge_archive`` and the retention
  upkeep), and the upkeep purges events past their 7 days; nothing is left behind.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from drainpipe import Job, Jobs
from tests.conftest import connect
from tests.jobs.test_steps import move_time

QUEUES: dict[str, Any] = {"flows": dict[str, Any]}


@pytest.fixture
async def jobs(jobs_db_url: str) -> AsyncIterator[Jobs]:
    client = Jobs(jobs_db_url, QUEUES)
    yield client
    await client.close()


async def counts_everywhere(jobs: Jobs, url: str, job_id: int) -> set[tuple[str, int, int]]:
    """(state, attempts, max_attempts) of the job as each reader shows it: one element
    when they all agree."""
    record = await jobs.get("flows", job_id)
    assert record is not None
    seen = {(record.state, record.attempts, record.max_attempts)}
    page = await jobs.list_jobs("flows")
    [listed] = [r for r in page.items if r.id == job_id]
    seen.add((listed.state, listed.attempts, listed.max_attempts))
    async with await connect(url) as conn:
        for sql in (
            "SELECT state, attempts, max_attempts FROM drainpipe.get_job_v1('flows', %s)",
            "SELECT state, attempts, max_attempts FROM drainpipe.list_jobs_v2('flows')"
            " WHERE id = %s",
            "SELECT state, attempts, max_attempts FROM drainpipe.search_jobs_v1("
            "'flows', NULL, NULL, NULL, NULL, NULL, NULL, %s, 10)",
        ):
            rows = await (await conn.execute(sql, (job_id,))).fetchall()
            assert len(rows) == 1, sql
            seen.add((str(rows[0][0]), int(rows[0][1]), int(rows[0][2])))
    return seen


async def test_a_resumed_run_keeps_its_attempt_number_in_every_reader(
    jobs: Jobs, jobs_db_url: str, backend_name: str
) -> None:
    runs: list[int] = []

    async def handler(payload: Any, job: Job[Any]) -> None:
        runs.append(job.attempts)
        await job.step("a", lambda: 1)
        await job.sleep(3600)
        await job.step("b", lambda: 2)
        if len(runs) == 2:
            raise RuntimeError("the second run fails: a real failed attempt")
        await job.sleep(3600)

    job_id = await jobs.enqueue("flows", {}, max_attempts=3)
    await jobs.drain("flows", handler)
    assert await counts_everywhere(jobs, jobs_db_url, job_id) == {("waiting", 1, 3)}

    await move_time(jobs_db_url, backend_name, "flows", job_id, 3601)
    await jobs.drain("flows", handler)  # resumed, then failed: the second attempt comes
    [(state, attempts, max_attempts)] = await counts_everywhere(jobs, jobs_db_url, job_id)
    assert (state, attempts, max_attempts) == ("retry_wait", 1, 3)

    await move_time(jobs_db_url, backend_name, "flows", job_id, 3600)
    await jobs.drain("flows", handler)  # attempt 2: replays, sleeps again
    assert await counts_everywhere(jobs, jobs_db_url, job_id) == {("waiting", 2, 3)}

    await move_time(jobs_db_url, backend_name, "flows", job_id, 3601)
    await jobs.drain("flows", handler)
    assert await counts_everywhere(jobs, jobs_db_url, job_id) == {("succeeded", 2, 3)}
    # the fence moved on at every claim (4 runs), the count only at the failure
    assert runs == [1, 2, 3, 4]


async def leftovers(url: str, job_id: int) -> tuple[int, int]:
    async with await connect(url) as conn:
        steps = await (
            await conn.execute(
                "SELECT count(*) FROM drainpipe.job_steps WHERE queue = 'flows' AND job_id = %s",
                (job_id,),
            )
        ).fetchone()
        workflows = await (
            await conn.execute(
                "SELECT count(*) FROM drainpipe.job_workflows WHERE queue = 'flows'"
                " AND job_id = %s",
                (job_id,),
            )
        ).fetchone()
    assert steps is not None and workflows is not None
    return int(steps[0]), int(workflows[0])


async def finished_workflow(jobs: Jobs, url: str, backend: str) -> int:
    """A job that recorded steps, slept once and succeeded (its result kept)."""

    async def handler(payload: Any, job: Job[Any]) -> str:
        await job.step("a", lambda: 1)
        await job.sleep(60)
        return "done"

    job_id = await jobs.enqueue("flows", {})
    await jobs.drain("flows", handler)
    await move_time(url, backend, "flows", job_id, 61)
    await jobs.drain("flows", handler)
    assert (await jobs.result("flows", job_id)) == "done"
    assert await leftovers(url, job_id) == (3, 1)  # a, the sleep, the result; the workflow
    return job_id


async def test_purge_archive_takes_a_jobs_steps_and_workflow_with_it(
    jobs: Jobs, jobs_db_url: str, backend_name: str
) -> None:
    job_id = await finished_workflow(jobs, jobs_db_url, backend_name)
    live = await finished_workflow(jobs, jobs_db_url, backend_name)
    async with await connect(jobs_db_url) as conn:  # only the first one is old enough
        if backend_name == "pgmq":
            await conn.execute(
                "UPDATE pgmq.a_flows SET archived_at = archived_at - interval '8 days'"
                " WHERE msg_id = %s",
                (job_id,),
            )
        else:
            await conn.execute(
                "UPDATE drainpipe.job_messages SET finished_at = finished_at - interval '8 days'"
                " WHERE id = %s",
                (job_id,),
            )
    assert await jobs.purge_archive("flows", older_than=timedelta(days=7)) == 1
    assert await jobs.get("flows", job_id) is None
    assert await leftovers(jobs_db_url, job_id) == (0, 0)
    assert await leftovers(jobs_db_url, live) == (3, 1)


async def test_retention_takes_steps_and_purges_old_events(
    jobs_db_url: str, backend_name: str
) -> None:
    from drainpipe import QueuePolicy

    jobs = Jobs(jobs_db_url, QUEUES, policies={"flows": QueuePolicy(retention=timedelta(days=1))})
    try:
        await jobs.ensure_policies()
        job_id = await finished_workflow(jobs, jobs_db_url, backend_name)
        await jobs.emit("old.event", "k", {"n": 1})
        async with await connect(jobs_db_url) as conn:
            await conn.execute(
                "UPDATE drainpipe.job_events SET emitted_at = emitted_at - interval '8 days'"
            )
        await jobs.emit("new.event", "k", {"n": 2})
        async with await connect(jobs_db_url) as conn:
            # two days on: the record is past its queue's retention
            row = await (
                await conn.execute(
                    "SELECT drainpipe.apply_job_retention_v1(NULL, 10000,"
                    " clock_timestamp() + interval '2 days')"
                )
            ).fetchone()
            assert row is not None and row[0] == 1
            names = await (
                await conn.execute("SELECT name FROM drainpipe.job_events ORDER BY id")
            ).fetchall()
        assert [n for (n,) in names] == ["new.event"]
        assert await jobs.get("flows", job_id) is None
        assert await leftovers(jobs_db_url, job_id) == (0, 0)
    finally:
        await jobs.close()


# -- event data with a keyring -------------------------------------------------------------


async def test_event_data_is_sealed_with_a_keyring_and_opened_for_the_waiter(
    jobs_db_url: str, backend_name: str
) -> None:
    from drainpipe import Keyring, QueuePolicy

    keyring = Keyring.parse(Keyring.new_entry("k1"))
    policies = {"flows": QueuePolicy(encrypt=True)}
    async with Jobs(jobs_db_url, QUEUES, policies=policies, keyring=keyring) as jobs:
        got: list[Any] = []

        async def handler(payload: Any, job: Job[Any]) -> None:
            got.append(await job.wait_for("card.added", key="u1"))
            if len(got) == 1:
                raise RuntimeError("again: the wait replays from its record")

        job_id = await jobs.enqueue("flows", {})
        await jobs.drain("flows", handler)  # suspends: no event yet
        await jobs.emit("card.added", "u1", {"card": "SECRET-4242"})
        await jobs.drain("flows", handler)  # takes it, then fails
        await move_time(jobs_db_url, backend_name, "flows", job_id, 3600)
        await jobs.drain("flows", handler)  # replays the recorded wait
        assert got == [{"card": "SECRET-4242"}, {"card": "SECRET-4242"}]
        async with await connect(jobs_db_url) as conn:
            events = await (
                await conn.execute("SELECT data::text FROM drainpipe.job_events")
            ).fetchall()
            steps = await (
                await conn.execute("SELECT result::text FROM drainpipe.job_steps")
            ).fetchall()
        stored = " ".join(str(row[0]) for row in [*events, *steps])
        assert "SECRET-4242" not in stored and "sealed" in stored
        job_id = await jobs.enqueue("flows", {})
        await jobs.emit("card.added", "u1", {"card": "SECRET-4242"})

    # a Jobs without the keys cannot read it: the attempt fails PAYLOAD_UNREADABLE
    async with Jobs(jobs_db_url, QUEUES) as plain:
        errors: list[BaseException] = []
        await plain.drain("flows", handler, on_error=lambda exc, job: errors.append(exc))
        record = await plain.get("flows", job_id)
        assert record is not None and record.state == "retry_wait"
        assert [getattr(e, "code", None) for e in errors] == ["PAYLOAD_UNREADABLE"]
