"""A backend with only the required methods (like pgmq_public): every optional feature
answers invalid_request naming itself, before anything is sent anywhere."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from drainpipe import DrainpipeError, Jobs, Queue, QueueStats, ScheduleInfo
from drainpipe.backends import (
    SupportsBatches,
    SupportsCompleteMany,
    SupportsDeadLetters,
    SupportsExtendMany,
    SupportsPurgeArchive,
    SupportsReplay,
    SupportsScheduleRuns,
    SupportsSchedules,
    SupportsSendMany,
    SupportsStats,
)
from drainpipe.backends.pgmq_public import PgmqPublicBackend
from drainpipe.backends.sql import SqlQueueBackend
from drainpipe.db import Database
from drainpipe.errors import NOT_INSTALLED, SCHEMA_NOT_EXPOSED, postgrest_error


class MinimalBackend:
    api_version = 1
    name = "minimal"
    leases = False

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def send(self, queue: str, payload: Any, **options: Any) -> int:
        self.calls.append("send")
        return 1

    async def read(self, queue: str, *, lease: float, batch: int) -> list[Any]:
        self.calls.append("read")
        return []

    async def complete(self, job: Any) -> bool:
        return True

    async def fail(self, job: Any, error: str, retry_in: float | None = None) -> Any:
        return "queued"

    async def extend(self, job: Any, lease: float) -> bool:
        return False


@pytest.mark.parametrize(
    ("feature", "call"),
    [
        ("stats", lambda j: j.stats()),
        ("list_dead", lambda j: j.list_dead("q")),
        ("retry_dead", lambda j: j.retry_dead("q")),
        ("replay", lambda j: j.replay("q", 1)),
        ("purge_archive", lambda j: j.purge_archive("q")),
        ("schedule", lambda j: j.schedule("s", "@daily", "q", {})),
        ("unschedule", lambda j: j.unschedule("s")),
        ("list_schedules", lambda j: j.list_schedules()),
        ("unschedule_all", lambda j: j.unschedule_all(tenant="t")),
        (
            "ensure_schedules",
            lambda j: j.ensure_schedules(
                [{"name": "p:a", "cron": "@daily", "queue": "q", "payload": {}}], prefix="p:"
            ),
        ),
    ],
)
async def test_missing_features_are_invalid_requests(feature: str, call: Any) -> None:
    backend = MinimalBackend()
    jobs = Jobs(backend, {"q": dict})
    with pytest.raises(DrainpipeError) as info:
        await call(jobs)
    assert info.value.kind == "invalid_request"
    assert feature in str(info.value) and "minimal" in str(info.value)
    assert backend.calls == []


async def test_schedules_are_a_no_op_to_run_and_jobs_still_work() -> None:
    backend = MinimalBackend()
    jobs = Jobs(backend, {"q": dict})
    assert await jobs.run_schedules() == 0
    assert await jobs.enqueue("q", {"a": 1}) == 1
    assert (await jobs.drain("q", lambda p, j: None)).succeeded == 0  # type: ignore[arg-type,return-value]
    assert backend.calls == ["send", "read"]


# -- capabilities: structural, per method ---------------------------------------------------


class PartialBackend(MinimalBackend):
    """A backend written before the capability protocols: two optional methods by name,
    one switched off with None, legacy tuple rows for schedules."""

    name = "partial"
    purge_archive = None  # None counts as missing

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, Any, dict[str, Any]]] = []
        self.advanced: list[tuple[str, Any, Any, Any]] = []

    async def send(self, queue: str, payload: Any, **options: Any) -> int:
        self.sent.append((queue, payload, options))
        return len(self.sent)

    async def replay(self, queue: str, job_id: int) -> int | None:
        return job_id + 100

    async def stats(self, queues: Sequence[str]) -> dict[str, QueueStats]:
        return {q: QueueStats(1, 2, 3, 4, None) for q in queues}

    async def list_schedules(self, *, prefix: str | None, tenant: str | None) -> list[Any]:
        return [("p:a", "@daily", "UTC", "q", None, None, None, None, None)]

    async def due_schedules(self, *, lease: float, batch: int) -> list[Any]:
        due = datetime.now(UTC) - timedelta(minutes=1)
        return [("nightly", "@daily", "UTC", "q", {"n": 1}, due, None, "token-1")]

    async def advance_schedule(
        self, name: str, ran: datetime | None, next_run: datetime | None, claim_token: Any
    ) -> bool:
        self.advanced.append((name, ran, next_run, claim_token))
        return True


async def test_optional_methods_implemented_by_name_keep_working() -> None:
    backend = PartialBackend()
    assert isinstance(backend, SupportsReplay) and isinstance(backend, SupportsStats)
    assert not isinstance(backend, SupportsDeadLetters)  # only part of the group
    assert not isinstance(backend, SupportsPurgeArchive)  # set to None
    jobs = Jobs(backend, {"q": dict})
    assert await jobs.replay("q", 1) == 101
    assert (await jobs.stats())["q"] == QueueStats(1, 2, 3, 4, None)
    with pytest.raises(DrainpipeError) as info:
        await jobs.purge_archive("q")
    assert info.value.kind == "invalid_request" and "purge_archive" in str(info.value)
    assert "partial" in str(info.value)


async def test_legacy_tuple_rows_are_still_read_as_typed_rows() -> None:
    backend = PartialBackend()
    jobs = Jobs(backend, {"q": dict})
    [info] = await jobs.list_schedules()
    assert isinstance(info, ScheduleInfo) and (info.name, info.queue) == ("p:a", "q")
    assert await jobs.run_schedules() == 1
    [(queue, payload, options)] = backend.sent
    assert (queue, payload, options["dedupe_key"][:17]) == ("q", {"n": 1}, "schedule:nightly:")
    [(name, ran, following, token)] = backend.advanced
    assert (name, token) == ("nightly", "token-1") and following > ran


def test_the_shipped_backends_declare_what_they_can_do() -> None:
    sql = SqlQueueBackend("postgresql://unused")
    for capability in (SupportsBatches, SupportsStats, SupportsDeadLetters, SupportsSchedules):
        assert isinstance(sql, capability), capability
    rest = PgmqPublicBackend(url="https://example.supabase.co", key="k")
    assert isinstance(rest, SupportsSendMany)  # batched sends, nothing else optional
    for capability in (SupportsCompleteMany, SupportsExtendMany, SupportsStats, SupportsReplay):
        assert not isinstance(rest, capability), capability
    assert not isinstance(MinimalBackend(), SupportsScheduleRuns)


# -- the one error translation --------------------------------------------------------------


async def test_missing_drainpipe_sql_is_not_installed_and_says_what_to_run(
    fresh_database: Any,
) -> None:
    url = fresh_database("table")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("DROP FUNCTION drainpipe.claim_jobs_v1")
    jobs = Jobs(url, {"q": dict})
    try:
        with pytest.raises(DrainpipeError) as info:
            await jobs.claim("q")
        assert (info.value.kind, info.value.status, info.value.code) == (
            "unexpected",
            500,
            NOT_INSTALLED,
        )
        assert "drainpipe sql apply" in str(info.value) and "claim_jobs" in str(info.value)
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute("DROP SCHEMA drainpipe CASCADE")
        with pytest.raises(DrainpipeError) as info:
            await jobs.enqueue("q", {})
        assert info.value.code == NOT_INSTALLED
        # a missing object that is not drainpipe's is an ordinary unexpected error
        backend = jobs.backend
        assert isinstance(backend, SqlQueueBackend)
        with pytest.raises(DrainpipeError) as info:
            await backend.db.fetch("SELECT * FROM no_such_table")
        assert (info.value.kind, info.value.code) == ("unexpected", None)
    finally:
        await jobs.close()


@pytest.mark.parametrize(
    ("sqlstate", "kind"),
    [
        ("23505", "conflict"),
        ("42501", "forbidden"),
        ("P0001", "raised"),
        ("57014", "timeout"),
        ("40001", "serialization"),
        ("40P01", "serialization"),
        ("22P02", "invalid_input"),
        ("22012", "invalid_input"),
        ("08006", "network"),
        ("57P01", "network"),
        ("42P01", "unexpected"),
        ("42883", "unexpected"),
        ("XX000", "unexpected"),
    ],
)
async def test_a_sqlstate_means_the_same_over_psycopg_and_postgrest(
    db_url: str, sqlstate: str, kind: str
) -> None:
    database = Database(db_url)
    try:
        with pytest.raises(DrainpipeError) as direct:
            await database.fetch(
                f"DO $$ BEGIN RAISE EXCEPTION 'boom' USING ERRCODE = '{sqlstate}'; END $$"
            )
    finally:
        await database.close()
    # PostgREST answers the same failure with its own HTTP status and the SQLSTATE as code
    for status in (400, 404, 409, 500, 503):
        over_http = postgrest_error(status, sqlstate, "boom")
        assert (direct.value.kind, over_http.kind) == (kind, kind), status


def test_postgrest_codes_for_missing_drainpipe_sql_and_unexposed_schemas() -> None:
    missing = postgrest_error(
        404,
        "PGRST202",
        "Could not find the function drainpipe.claim_jobs(p_queue) in the schema cache",
    )
    assert (missing.kind, missing.code) == ("unexpected", NOT_INSTALLED)
    assert "drainpipe sql apply" in str(missing)
    other = postgrest_error(
        404, "PGRST205", "Could not find the table 'public.x' in the schema cache"
    )
    assert (other.kind, other.code) == ("unexpected", "PGRST205")
    hidden = postgrest_error(406, "PGRST106", "The schema must be one of the following: public")
    assert (hidden.kind, hidden.code) == ("invalid_request", SCHEMA_NOT_EXPOSED)
    assert "Exposed schemas" in str(hidden)
    taken = postgrest_error(
        409, "23505", 'duplicate key value violates unique constraint "jobs_dedupe_key"'
    )
    assert (taken.kind, taken.code) == ("conflict", "jobs_dedupe_key")


@pytest.mark.parametrize("method", ["work", "drain"])
def test_queue_work_and_drain_take_the_same_keywords_as_jobs(method: str) -> None:
    # typed keywords instead of **options: the handle must not drift from Jobs
    on_jobs = inspect.signature(getattr(Jobs, method)).parameters
    on_queue = inspect.signature(getattr(Queue, method)).parameters
    assert [name for name in on_jobs if name != "queue"] == list(on_queue)
    assert all(
        on_queue[name].default == on_jobs[name].default for name in on_queue if name != "self"
    )
    assert all(on_queue[name].kind is inspect.Parameter.KEYWORD_ONLY for name in list(on_queue)[2:])


class RecordingBackend(MinimalBackend):
    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[float, int]] = []

    async def read(self, queue: str, *, lease: float, batch: int) -> list[Any]:
        self.reads.append((lease, batch))
        return []


async def test_queue_drain_passes_its_options_on() -> None:
    backend = RecordingBackend()
    queue = Jobs(backend, {"q": dict}).queue("q")
    report = await queue.drain(_no_op, batch=3, lease=42, budget=5.0)
    assert (report.succeeded, report.failed) == (0, 0)
    assert backend.reads and set(backend.reads) == {(42, 3)}
    with pytest.raises(TypeError):
        await queue.drain(_no_op, budgets=5.0)  # type: ignore[call-arg]


async def _no_op(payload: Any, job: Any) -> None:
    return None
