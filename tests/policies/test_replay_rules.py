"""Replay rules on real Postgres, both storages (docs/policies.md#replaying-safely): a
queue's ``replay_window`` (counted from the first job of a replay lineage) and
``replayable=False`` refuse ``replay`` and ``retry_dead`` with 409 ``EVENT_EXPIRED`` /
``REPLAY_BLOCKED``, declared or stored, for every writer (another ``Jobs``, plain SQL);
``replay_check`` refuses with its own code; ``retry_dead`` reports per job; and a replay
racing a policy change on real connections is ordered with it, never half of each."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from drainpipe import DrainpipeError, JobRecord, Jobs, QueuePolicy, ReplayReport
from tests.conftest import connect

QUEUES: dict[str, Any] = {"pushes": dict[str, Any], "hooks": dict[str, Any]}
DAY = 86400


async def dead_job(jobs: Jobs, queue: str, payload: Any, *, tenant: str | None = None) -> int:
    """A job that spent its only attempt (enqueue, claim the oldest, fail)."""
    context = None if tenant is None else {"tenant": tenant}
    job_id = await jobs.enqueue(queue, payload, max_attempts=1, context=context)
    [job] = await jobs.claim(queue, lease=30)
    assert job.id == job_id
    assert await jobs.fail(job, RuntimeError("receiver down")) == "dead"
    return job_id


async def age(url: str, backend: str, queue: str, job_id: int, days: float) -> None:
    """Moves a dead job's enqueue time ``days`` back (instead of waiting for it)."""
    if backend == "table":
        statement = "UPDATE drainpipe.job_messages SET enqueued_at = enqueued_at - %s WHERE id = %s"
    else:
        statement = f"UPDATE pgmq.a_{queue} SET enqueued_at = enqueued_at - %s WHERE msg_id = %s"
    async with await connect(url) as conn:
        cursor = await conn.execute(statement, (timedelta(days=days), job_id))
        assert cursor.rowcount == 1


def refusal(caught: pytest.ExceptionInfo[DrainpipeError]) -> tuple[str, str | None, int]:
    return caught.value.kind, caught.value.code, caught.value.status


# -- QueuePolicy's fields ------------------------------------------------------------------


def test_the_rules_default_to_none_and_are_validated() -> None:
    assert (QueuePolicy().replay_window, QueuePolicy().replayable) == (None, True)
    window = QueuePolicy(replay_window=timedelta(hours=24))  # type: ignore[arg-type]
    assert window.replay_window == DAY
    assert QueuePolicy(replay_window=1).replay_window == 1.0
    for bad in (0, -1, float("nan"), float("inf"), "24h", True):
        with pytest.raises(ValueError, match="replay_window"):
            QueuePolicy(replay_window=bad)
    for flag in (None, 0, "no"):
        with pytest.raises(ValueError, match="replayable"):
            QueuePolicy(replayable=flag)  # type: ignore[arg-type]


def test_a_replay_report_is_an_int_that_copies_and_pickles() -> None:
    import copy
    import pickle

    report = ReplayReport({1: 2, 5: 6}, {3: "EVENT_EXPIRED"})
    assert report == 2 and report + 1 == 3 and f"{report}" == "2"
    for again in (copy.copy(report), copy.deepcopy(report), pickle.loads(pickle.dumps(report))):  # noqa: S301
        assert (again, dict(again.replayed), dict(again.refused)) == (
            2,
            {1: 2, 5: 6},
            {3: "EVENT_EXPIRED"},
        )
    assert ReplayReport({}, {}, count=4) == 4  # a backend that only counts
    assert "refused={3: 'EVENT_EXPIRED'}" in repr(report)


def test_replay_check_must_be_callable() -> None:
    with pytest.raises(TypeError, match="replay_check"):
        Jobs("postgresql://unused", QUEUES, replay_check="NOT_AUTHORIZED")  # type: ignore[arg-type]


# -- the rules, declared and stored --------------------------------------------------------


async def test_a_queue_that_is_not_replayable_refuses_every_replay(
    jobs_db_url: str, backend_name: str
) -> None:
    declared = Jobs(jobs_db_url, QUEUES, policies={"pushes": QueuePolicy(replayable=False)})
    job_id = await dead_job(declared, "pushes", {"event_id": "evt-1"})
    # declared: refused before ensure_policies() stored anything
    with pytest.raises(DrainpipeError) as blocked:
        await declared.replay("pushes", job_id)
    assert refusal(blocked) == ("conflict", "REPLAY_BLOCKED", 409)
    other = Jobs(jobs_db_url, QUEUES)  # a writer without the policy: not refused yet
    hook = await dead_job(other, "hooks", {"event_id": "evt-h"})
    assert isinstance(await other.replay("hooks", hook), int)
    assert await declared.ensure_policies() == 1
    with pytest.raises(DrainpipeError) as stored:
        await other.replay("pushes", job_id)
    assert refusal(stored) == ("conflict", "REPLAY_BLOCKED", 409)
    # plain SQL: the same refusal, as a code
    async with await connect(jobs_db_url) as conn:
        row = await (
            await conn.execute(
                "SELECT new_job_id, code FROM drainpipe.replay_dead_job_v3('pushes', %s)",
                (job_id,),
            )
        ).fetchone()
        assert row == (None, "REPLAY_BLOCKED")
        rows = await (
            await conn.execute(
                "SELECT job_id, new_job_id, code FROM drainpipe.retry_dead_jobs_v2('pushes')"
            )
        ).fetchall()
        assert rows == [(job_id, None, "REPLAY_BLOCKED")]  # one refusal, not an error
    record = await other.get("pushes", job_id)
    assert record is not None and (record.state, record.replayed_by) == ("dead", None)
    report = await other.retry_dead("pushes")
    assert (report, dict(report.refused)) == (0, {job_id: "REPLAY_BLOCKED"})
    await declared.close()
    await other.close()


async def test_a_replay_past_the_window_is_refused_from_the_lineage_s_first_enqueue(
    jobs_db_url: str, backend_name: str
) -> None:
    policy = QueuePolicy(replay_window=timedelta(hours=24))  # type: ignore[arg-type]
    jobs = Jobs(jobs_db_url, QUEUES, policies={"hooks": policy})
    old = await dead_job(jobs, "hooks", {"event_id": "evt-old"})
    fresh = await dead_job(jobs, "hooks", {"event_id": "evt-fresh"})
    await age(jobs_db_url, backend_name, "hooks", old, days=2)
    with pytest.raises(DrainpipeError) as expired:
        await jobs.replay("hooks", old)
    assert refusal(expired) == ("conflict", "EVENT_EXPIRED", 409)
    # the fresh one replays: same payload (its event id), parent_id, the parent's replayed_by
    child = await jobs.replay("hooks", fresh)
    assert child is not None
    [claimed] = await jobs.claim("hooks", lease=30)
    assert (claimed.id, claimed.payload) == (child, {"event_id": "evt-fresh"})
    child_record = await jobs.get("hooks", child)
    parent_record = await jobs.get("hooks", fresh)
    assert child_record is not None and child_record.parent_id == fresh
    assert parent_record is not None and parent_record.replayed_by == child
    # the child dies too; its own enqueue is new, but its lineage began two days ago
    assert await jobs.fail(claimed, RuntimeError("down again")) == "dead"
    await age(jobs_db_url, backend_name, "hooks", fresh, days=2)
    with pytest.raises(DrainpipeError) as lineage:
        await jobs.replay("hooks", child)
    assert refusal(lineage)[1] == "EVENT_EXPIRED"
    # stored for every writer; a wider declared window does not lift the stored one
    await jobs.ensure_policies()
    wider = QueuePolicy(replay_window=timedelta(days=30))  # type: ignore[arg-type]
    lenient = Jobs(jobs_db_url, QUEUES, policies={"hooks": wider})
    with pytest.raises(DrainpipeError) as stored:
        await lenient.replay("hooks", old)
    assert refusal(stored)[1] == "EVENT_EXPIRED"
    await jobs.close()
    await lenient.close()


async def test_retry_dead_reports_each_job_and_replays_the_rest(
    jobs_db_url: str, backend_name: str
) -> None:
    policy = QueuePolicy(replay_window=3600)
    jobs = Jobs(jobs_db_url, QUEUES, policies={"hooks": policy})
    ids = [await dead_job(jobs, "hooks", {"event_id": f"evt-{n}"}) for n in range(3)]
    await age(jobs_db_url, backend_name, "hooks", ids[1], days=1)
    live = await jobs.enqueue("hooks", {"event_id": "live"})
    report = await jobs.retry_dead("hooks", ids=[*ids, live, 10**12])
    assert isinstance(report, ReplayReport) and isinstance(report, int)
    assert report == 2 and set(report.replayed) == {ids[0], ids[2]}
    assert dict(report.refused) == {
        ids[1]: "EVENT_EXPIRED",
        live: "JOB_NOT_DEAD",
        10**12: "JOB_NOT_FOUND",
    }
    for parent, child in report.replayed.items():
        record = await jobs.get("hooks", child)
        assert record is not None and record.parent_id == parent
    again = await jobs.retry_dead("hooks", ids=ids)
    assert again == 0
    assert dict(again.refused) == {
        ids[0]: "JOB_ALREADY_REPLAYED",
        ids[1]: "EVENT_EXPIRED",
        ids[2]: "JOB_ALREADY_REPLAYED",
    }
    assert await jobs.retry_dead("hooks") == 0  # only the expired one is left
    with pytest.raises(TypeError):
        report.replayed[1] = 2  # type: ignore[index]
    await jobs.close()


# -- replay_check ---------------------------------------------------------------------------


@pytest.mark.parametrize("flavour", ["plain", "async"])
async def test_replay_check_sees_the_record_and_refuses_with_its_code(
    jobs_db_url: str, flavour: str
) -> None:
    seen: list[JobRecord] = []
    revoked = {"t-revoked"}

    def decide(record: JobRecord) -> str | None:
        seen.append(record)
        return "NOT_AUTHORIZED" if record.tenant in revoked else None

    async def decide_async(record: JobRecord) -> str | None:
        await asyncio.sleep(0)
        return decide(record)

    check = decide if flavour == "plain" else decide_async
    jobs = Jobs(jobs_db_url, QUEUES, replay_check=check)
    allowed = await dead_job(jobs, "hooks", {"event_id": "a"}, tenant="t-ok")
    denied = await dead_job(jobs, "hooks", {"event_id": "b"}, tenant="t-revoked")
    third = await dead_job(jobs, "hooks", {"event_id": "c"}, tenant="t-ok2")
    with pytest.raises(DrainpipeError) as caught:
        await jobs.replay("hooks", denied)
    assert refusal(caught) == ("conflict", "NOT_AUTHORIZED", 409)
    assert [(r.id, r.state, r.tenant) for r in seen] == [(denied, "dead", "t-revoked")]
    record = await jobs.get("hooks", denied)
    assert record is not None and record.replayed_by is None
    child = await jobs.replay("hooks", allowed)
    assert child is not None
    # not a candidate (replayed already, live, unknown): answered by the storage, unasked
    seen.clear()
    assert await jobs.replay("hooks", allowed) is None
    assert await jobs.replay("hooks", child) is None
    assert await jobs.replay("hooks", 10**12) is None
    assert seen == []
    # retry_dead asks per job: the revoked tenant's job is refused, the others go back
    report = await jobs.retry_dead("hooks")
    assert report == 1 and list(report.replayed) == [third]
    assert dict(report.refused) == {denied: "NOT_AUTHORIZED"}
    # once authorization is back, the same job replays
    revoked.clear()
    assert isinstance(await jobs.replay("hooks", denied), int)
    await jobs.close()


async def test_a_check_that_answers_no_code_is_the_application_s_bug(db_url: str) -> None:
    jobs = Jobs(db_url, QUEUES, replay_check=lambda record: "not a code")
    job_id = await dead_job(jobs, "hooks", {"event_id": "a"})
    with pytest.raises(TypeError, match="replay_check"):
        await jobs.replay("hooks", job_id)
    record = await jobs.get("hooks", job_id)
    assert record is not None and record.replayed_by is None
    await jobs.close()


async def test_a_blocked_queue_refuses_without_asking_the_check(db_url: str) -> None:
    asked: list[int] = []

    def check(record: JobRecord) -> None:
        asked.append(record.id)

    blocked = {"pushes": QueuePolicy(replayable=False)}
    jobs = Jobs(db_url, QUEUES, policies=blocked, replay_check=check)
    job_id = await dead_job(jobs, "pushes", {"event_id": "p"})
    with pytest.raises(DrainpipeError) as caught:
        await jobs.replay("pushes", job_id)
    assert caught.value.code == "REPLAY_BLOCKED" and asked == []
    await jobs.close()


# -- racing a policy change on real connections ---------------------------------------------


async def waiting_on_a_lock(url: str, application_name: str) -> None:
    """Returns once the session named ``application_name`` waits for a lock."""
    async with await connect(url) as probe:
        for _ in range(500):
            row = await (
                await probe.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE application_name = %s AND wait_event_type = 'Lock'",
                    (application_name,),
                )
            ).fetchone()
            if row and row[0]:
                return
            await asyncio.sleep(0.01)
    raise AssertionError(f"{application_name} never waited for a lock")


POLICY_ROW = (
    "SELECT drainpipe.ensure_queue_policy_v3('hooks', 65536, 10000, 30, 60, 604800, 5, NULL,"
    " 2592000, false, NULL, %s)"
)


async def test_a_replay_waits_for_a_policy_change_in_flight_and_obeys_it(
    jobs_db_url: str, backend_name: str
) -> None:
    jobs = Jobs(jobs_db_url, QUEUES, policies={"hooks": QueuePolicy()})
    await jobs.ensure_policies()
    job_id = await dead_job(jobs, "hooks", {"event_id": "evt-race"})
    async with await psycopg.AsyncConnection.connect(
        jobs_db_url, application_name="replayer", autocommit=True
    ) as replayer_conn:
        replayer = Jobs(replayer_conn, QUEUES)  # declares nothing: the stored rules decide
        async with await connect(jobs_db_url) as operator:
            await operator.set_autocommit(False)
            await operator.execute(POLICY_ROW, (False,))  # uncommitted: replayable = false
            replay = asyncio.create_task(replayer.replay("hooks", job_id))
            await waiting_on_a_lock(jobs_db_url, "replayer")
            assert not replay.done()
            await operator.commit()
        with pytest.raises(DrainpipeError) as caught:
            await replay
    assert caught.value.code == "REPLAY_BLOCKED"
    record = await jobs.get("hooks", job_id)
    assert record is not None and record.replayed_by is None
    await jobs.close()


async def test_a_policy_change_waits_for_a_replay_in_flight(
    jobs_db_url: str, backend_name: str
) -> None:
    jobs = Jobs(jobs_db_url, QUEUES, policies={"hooks": QueuePolicy()})
    await jobs.ensure_policies()
    first = await dead_job(jobs, "hooks", {"event_id": "evt-1"})
    second = await dead_job(jobs, "hooks", {"event_id": "evt-2"})
    blocked = Jobs(jobs_db_url, QUEUES, policies={"hooks": QueuePolicy(replayable=False)})
    async with await connect(jobs_db_url) as replayer:
        await replayer.set_autocommit(False)
        row = await (
            await replayer.execute(
                "SELECT new_job_id, code FROM drainpipe.replay_dead_job_v3('hooks', %s)", (first,)
            )
        ).fetchone()
        assert row is not None and row[0] is not None and row[1] is None  # not committed yet
        async with await psycopg.AsyncConnection.connect(
            jobs_db_url, application_name="operator", autocommit=True
        ) as operator_conn:
            operator = Jobs(operator_conn, QUEUES, policies=blocked.policies)
            change = asyncio.create_task(operator.ensure_policies())
            await waiting_on_a_lock(jobs_db_url, "operator")
            assert not change.done()
            await replayer.commit()  # the replay that began first commits under the old rules
            assert await change == 1
    parent = await jobs.get("hooks", first)
    assert parent is not None and parent.replayed_by == row[0]
    with pytest.raises(DrainpipeError) as caught:
        await jobs.replay("hooks", second)  # after the change: refused
    assert caught.value.code == "REPLAY_BLOCKED"
    await jobs.close()
    await blocked.close()


# -- the memory backend, for tests without Postgres -------------------------------------------


async def test_the_memory_backend_applies_the_same_rules() -> None:
    from drainpipe.testing import MemoryBackend

    backend = MemoryBackend()
    policies = {"hooks": QueuePolicy(replay_window=3600), "pushes": QueuePolicy(replayable=False)}
    declared = Jobs(backend, QUEUES, policies=policies)
    old = await dead_job(declared, "hooks", {"event_id": "old"})
    push = await dead_job(declared, "pushes", {"event_id": "p"})
    backend.advance_time(3601)
    fresh = await dead_job(declared, "hooks", {"event_id": "fresh"})
    for queue, job_id, code in (
        ("hooks", old, "EVENT_EXPIRED"),
        ("pushes", push, "REPLAY_BLOCKED"),
    ):
        with pytest.raises(DrainpipeError) as caught:
            await declared.replay(queue, job_id)
        assert refusal(caught) == ("conflict", code, 409)
    undeclared = Jobs(backend, QUEUES, replay_check=lambda record: None)
    assert await undeclared.replay("pushes", push) is not None  # nothing stored yet
    await declared.ensure_policies()
    report = await undeclared.retry_dead("hooks", ids=[old, fresh, 10**6])
    assert report == 1 and list(report.replayed) == [fresh]
    assert dict(report.refused) == {old: "EVENT_EXPIRED", 10**6: "JOB_NOT_FOUND"}
    child = report.replayed[fresh]
    [claimed] = await undeclared.claim("hooks", lease=30)
    assert (claimed.id, claimed.payload) == (child, {"event_id": "fresh"})
    assert await undeclared.fail(claimed, RuntimeError("again")) == "dead"
    backend.advance_time(3600)  # the child is new, its lineage is not
    with pytest.raises(DrainpipeError) as lineage:
        await undeclared.replay("hooks", child)
    assert lineage.value.code == "EVENT_EXPIRED"
