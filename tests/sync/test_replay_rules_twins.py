"""Replay rules on both twins, both storages: the rules a policy stored refuse the sync
twin's replays as the async one's (409 ``REPLAY_BLOCKED`` / ``EVENT_EXPIRED``),
``replay_check`` refuses with its code on both, and ``retry_dead`` reports per job alike."""

from __future__ import annotations

from typing import Any

import pytest

from drainpipe import DrainpipeError, JobRecord, Jobs, QueuePolicy, ReplayReport, sync
from tests.policies.test_replay_rules import age
from tests.sync.conftest import Twin

QUEUES: dict[str, Any] = {"pushes": dict[str, Any], "hooks": dict[str, Any]}


async def dead_job(jobs: Any, queue: str, event_id: str, tenant: str | None = None) -> int:
    context = None if tenant is None else {"tenant": tenant}
    job_id = await jobs.enqueue(queue, {"event_id": event_id}, max_attempts=1, context=context)
    [job] = await jobs.claim(queue, lease=30)
    assert job.id == job_id
    assert await jobs.fail(job, RuntimeError("receiver down")) == "dead"
    return int(job_id)


async def test_stored_rules_refuse_both_twins_alike(
    twin: Twin, jobs_db_url: str, backend_name: str
) -> None:
    policies = {"pushes": QueuePolicy(replayable=False), "hooks": QueuePolicy(replay_window=60)}
    async with Jobs(jobs_db_url, QUEUES, policies=policies) as declared:
        assert await declared.ensure_policies() == 2
    jobs = twin.jobs(jobs_db_url, QUEUES)
    push = await dead_job(jobs, "pushes", "p-1")
    old = await dead_job(jobs, "hooks", "h-old")
    fresh = await dead_job(jobs, "hooks", "h-fresh")
    await age(jobs_db_url, backend_name, "hooks", old, days=1)
    refusals = []
    for queue, job_id in (("pushes", push), ("hooks", old)):
        with pytest.raises(DrainpipeError) as caught:
            await jobs.replay(queue, job_id)
        refusals.append((caught.value.kind, caught.value.code, caught.value.status))
    assert refusals == [
        ("conflict", "REPLAY_BLOCKED", 409),
        ("conflict", "EVENT_EXPIRED", 409),
    ]
    report = await jobs.retry_dead("hooks")
    assert isinstance(report, ReplayReport)
    assert report == 1 and list(report.replayed) == [fresh]
    assert dict(report.refused) == {old: "EVENT_EXPIRED"}
    blocked = await jobs.retry_dead("pushes", ids=[push])
    assert (blocked, dict(blocked.refused)) == (0, {push: "REPLAY_BLOCKED"})
    child = report.replayed[fresh]
    record = await jobs.get("hooks", child)
    assert record is not None and record.parent_id == fresh


async def test_replay_check_on_both_twins(twin: Twin, jobs_db_url: str) -> None:
    def check(record: JobRecord) -> str | None:
        return "SUBSCRIPTION_INACTIVE" if record.tenant == "gone" else None

    jobs = twin.jobs(jobs_db_url, QUEUES, replay_check=check)
    gone = await dead_job(jobs, "hooks", "a", tenant="gone")
    kept = await dead_job(jobs, "hooks", "b", tenant="kept")
    with pytest.raises(DrainpipeError) as caught:
        await jobs.replay("hooks", gone)
    assert (caught.value.status, caught.value.code) == (409, "SUBSCRIPTION_INACTIVE")
    report = await jobs.retry_dead("hooks", ids=[gone, kept])
    assert report == 1 and list(report.replayed) == [kept]
    assert dict(report.refused) == {gone: "SUBSCRIPTION_INACTIVE"}


def test_the_sync_twin_needs_a_plain_check(db_url: str) -> None:
    async def check(record: JobRecord) -> None:
        return None

    with sync.Jobs(db_url, QUEUES, replay_check=check) as jobs:
        job_id = jobs.enqueue("hooks", {"event_id": "a"}, max_attempts=1)
        [job] = jobs.claim("hooks", lease=30)
        assert jobs.fail(job, RuntimeError("down")) == "dead"
        with pytest.raises(TypeError, match="plain replay_check"):
            jobs.replay("hooks", job_id)
        record = jobs.get("hooks", job_id)
        assert record is not None and record.replayed_by is None
