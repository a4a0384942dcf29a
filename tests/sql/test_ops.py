"""The sans-I/O operations: every statement names a function the installed SQL has, the
parsers read what the functions return, and a second executor (synchronous psycopg) runs
the very same operations against real Postgres with the async API seeing the effects."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import drainpipe
from drainpipe import statements as ops
from drainpipe.backends import job_statements as job_ops
from drainpipe.backends import schedule_statements as schedule_ops
from drainpipe.backends import sql_enqueue as enqueue_ops
from drainpipe.backends import sql_leases as claim_ops
from drainpipe.context import wrap_payload
from drainpipe.errors import DrainpipeError
from drainpipe.idempotency import statements as idem_ops
from drainpipe.leases import statements as lease_ops
from drainpipe.models import Actor, JobContext, claimed_job

_FUNCTION = re.compile(r"drainpipe\.(\w+)\(")
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def run(conn: psycopg.Connection[Any], statement: str, params: ops.Params) -> list[ops.Row]:
    """The whole synchronous executor: one statement, its rows."""
    with conn.cursor() as cur:
        cur.execute(statement, params)
        return cur.fetchall() if cur.description is not None else []


def test_every_operation_module_contributes_statements() -> None:
    modules = {name.partition(".")[0] for name in ops.STATEMENTS}
    assert modules == {
        *("jobs", "records", "schedules", "idempotency", "leases", "inbox", "management"),
        *("agents", "pause", "console"),
    }
    called = {_FUNCTION.findall(statement)[0] for statement in ops.STATEMENTS.values()}
    assert called == {
        f"{name}_v1"
        for name in (
            *("enqueue_job", "enqueue_jobs", "claim_jobs", "complete_job", "complete_jobs"),
            "complete_and_claim_jobs",
            *("extend_job_lease", "extend_job_leases"),
            *("list_dead_jobs", "purge_job_archive"),
            *("get_job", "cancel_job", "skip_job"),
            *("schedule_job", "unschedule_job", "list_schedules", "unschedule_tenant"),
            *("claim_due_schedules", "advance_schedule"),
            *("begin_idempotent", "complete_idempotent", "release_idempotent"),
            *("purge_idempotency_keys", "acquire_lease", "extend_lease", "release_lease"),
            *("claim_webhooks", "extend_webhooks", "complete_webhook"),
            *("fail_webhook", "checkpoint_webhook", "list_webhooks", "purge_webhooks"),
            "audited_cancel_job",
            *("agent_create_inbox", "agent_inbox", "agent_subscribe", "agent_next"),
            *(
                "agent_claim",
                "agent_events",
                "agent_ack",
                "agent_ack_many",
                "agent_ack_next",
                "agent_release",
                "agent_extend",
            ),
            *("agent_stream_acquire", "agent_stream_renew", "agent_stream_release"),
            *("pause_queue", "resume_queue", "paused_queues"),
            *("job_queue_overview", "ensure_queue_overview", "search_jobs", "job_causes"),
            *("audited_pause_queue", "audit_bulk_action"),
            "agent_inbox_overview",  # the console's GET /inboxes
            *("enqueue_flow_job", "job_flow_holds"),  # flow control
            "job_queue_holds",  # the drain report's held counts
        )
    } | {"fail_job_v2", "receive_webhook_v3"} | {
        "agent_raw_v2",
        "list_jobs_v2",  # newest first by enqueued_at
        "replay_dead_job_v3",
        "retry_dead_jobs_v2",
        "audited_replay_job_v2",
        "list_management_audit_v2",
        "job_queue_stats_v4",  # with the held counts
    }


@pytest.mark.parametrize("backend", ["pgmq", "table"])
def test_each_statement_calls_one_installed_function_with_a_fitting_arity(
    fresh_database: Any, backend: str
) -> None:
    with psycopg.connect(fresh_database(backend), autocommit=True) as conn:
        for name, statement in ops.STATEMENTS.items():
            # the function name is written out literally (the _v1 rename is a sed)
            [function] = _FUNCTION.findall(statement)
            placeholders = statement.count("%s")
            rows = run(
                conn,
                """SELECT p.pronargs, p.pronargdefaults FROM pg_proc p
                     JOIN pg_namespace n ON n.oid = p.pronamespace
                    WHERE n.nspname = 'drainpipe' AND p.proname = %s""",
                (function,),
            )
            assert rows, f"{name}: drainpipe.{function} is not installed"
            assert any(total - defaults <= placeholders <= total for total, defaults in rows), (
                f"{name}: {placeholders} parameters fit no drainpipe.{function}{rows}"
            )


def test_the_sync_executor_runs_the_job_operations(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        statement, params = enqueue_ops.enqueue_query("emails", {"n": 1}, 0, 5, None, "always")
        assert statement == enqueue_ops.ENQUEUE_DEFAULT
        first = enqueue_ops.parse_enqueue(run(conn, statement, params))
        statement, params = enqueue_ops.enqueue_query("emails", {"n": 2}, 0, 1, "k", "waiting")
        assert statement == enqueue_ops.ENQUEUE
        second = enqueue_ops.parse_enqueue(run(conn, statement, params))
        again = enqueue_ops.parse_enqueue(run(conn, statement, params))
        assert again == second != first  # the dedupe hit answers the existing id

        jobs = claim_ops.parse_claim(
            "emails", run(conn, claim_ops.CLAIM, claim_ops.claim_params("emails", 30, 10))
        )
        assert sorted(job.id for job in jobs) == [first, second]
        assert {job.id: job.payload for job in jobs} == {first: {"n": 1}, second: {"n": 2}}
        by_id = {job.id: job for job in jobs}
        assert claim_ops.parse_extend_many(
            run(conn, claim_ops.EXTEND_MANY, claim_ops.extend_many_params(jobs, 60))
        ) == {first, second}

        stale = claimed_job(first, "emails", None, JobContext(), 2, 5, NOW, NOW, None)
        assert claim_ops.parse_complete_many(
            [stale, by_id[first]],
            run(conn, claim_ops.COMPLETE_MANY, claim_ops.complete_many_params([stale])),
        ) == [False, False]  # fenced: attempt 2 never happened, nothing completed
        assert claim_ops.parse_complete(
            run(conn, claim_ops.COMPLETE, claim_ops.complete_params(by_id[first]))
        )
        assert (
            claim_ops.parse_fail(
                run(conn, claim_ops.FAIL, claim_ops.fail_params(by_id[second], "boom", None))
            )
            == "dead"
        )  # max_attempts=1
        assert (
            claim_ops.parse_fail(
                run(conn, claim_ops.FAIL, claim_ops.fail_params(by_id[second], "boom", None))
            )
            is None
        )  # settled already: the lease is gone

        stats = job_ops.parse_stats(run(conn, job_ops.STATS, job_ops.stats_params(["emails"])))
        assert stats["emails"].dead == 1 and stats["emails"].ready == 0
        [dead] = job_ops.parse_list_dead(
            "emails", run(conn, job_ops.LIST_DEAD, job_ops.list_dead_params("emails", 10, None))
        )
        assert (dead.id, dead.payload, dead.last_error, dead.max_attempts) == (
            second,
            {"n": 2},
            "boom",
            1,
        )
        replayed = job_ops.parse_replay(
            "emails", second, run(conn, job_ops.REPLAY, job_ops.replay_params("emails", second))
        )
        assert replayed is not None and replayed != second
        again = run(conn, job_ops.REPLAY, job_ops.replay_params("emails", first))
        assert job_ops.parse_replay("emails", first, again) is None  # completed, not dead


async def test_what_the_sync_executor_did_is_what_the_async_api_sees(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        ids = enqueue_ops.parse_enqueue_many(
            run(
                conn,
                enqueue_ops.ENQUEUE_MANY,
                enqueue_ops.enqueue_many_params("emails", [{"n": 1}, {"n": 2}, {"n": 3}], 0, 5),
            )
        )
    jobs = drainpipe.Jobs(db_url, {"emails": dict})
    try:
        claimed = await jobs.claim("emails", batch=10)
        assert [job.id for job in claimed] == ids
        assert [job.payload for job in claimed] == [{"n": 1}, {"n": 2}, {"n": 3}]
    finally:
        await jobs.close()


def test_the_sync_executor_runs_schedules_idempotency_and_leases(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        run(
            conn,
            schedule_ops.SCHEDULE,
            schedule_ops.schedule_params(
                "nightly", "@daily", "emails", {"n": 1}, "UTC", NOW - timedelta(minutes=1), None
            ),
        )
        [info] = schedule_ops.parse_list_schedules(
            run(
                conn, schedule_ops.LIST_SCHEDULES, schedule_ops.list_schedules_params("night", None)
            )
        )
        assert (info.name, info.queue, info.next_run) == (
            "nightly",
            "emails",
            NOW - timedelta(minutes=1),
        )
        [due] = schedule_ops.parse_due_schedules(
            run(conn, schedule_ops.DUE_SCHEDULES, schedule_ops.due_schedules_params(30, 10))
        )
        assert (due.name, due.payload, due.next_run) == ("nightly", {"n": 1}, info.next_run)
        assert schedule_ops.parse_advance_schedule(
            run(
                conn,
                schedule_ops.ADVANCE_SCHEDULE,
                schedule_ops.advance_schedule_params("nightly", due.next_run, NOW, due.claim_token),
            )
        )
        assert schedule_ops.parse_unschedule(
            run(conn, schedule_ops.UNSCHEDULE, schedule_ops.unschedule_params("nightly"))
        )
        assert not schedule_ops.parse_unschedule(
            run(conn, schedule_ops.UNSCHEDULE, schedule_ops.unschedule_params("nightly"))
        )

        begun = idem_ops.parse_begin(
            run(conn, idem_ops.BEGIN, idem_ops.begin_params("", "k", "fp", 3600.0, 60.0))
        )
        assert begun.state == "started" and begun.holder is not None
        data, content_type = idem_ops.encode_body({"ok": True}, None)
        assert idem_ops.parse_complete(
            run(
                conn,
                idem_ops.COMPLETE,
                idem_ops.complete_params("", "k", begun.holder, 201, data, content_type),
            )
        )
        replay = idem_ops.parse_begin(
            run(conn, idem_ops.BEGIN, idem_ops.begin_params("", "k", "fp", 3600.0, 60.0))
        )
        assert (replay.state, replay.status, replay.body) == ("replay", 201, {"ok": True})

        holder = lease_ops.parse_acquire(
            run(conn, lease_ops.ACQUIRE, lease_ops.acquire_params("sync", 30.0, ""))
        )
        assert holder is not None
        assert (
            lease_ops.parse_acquire(
                run(conn, lease_ops.ACQUIRE, lease_ops.acquire_params("sync", 30.0, ""))
            )
            is None
        )
        assert lease_ops.parse_extend(
            run(conn, lease_ops.EXTEND, lease_ops.extend_params("sync", holder, 30.0, ""))
        )
        assert lease_ops.parse_release(
            run(conn, lease_ops.RELEASE, lease_ops.release_params("sync", holder, ""))
        )
        assert not lease_ops.parse_release(
            run(conn, lease_ops.RELEASE, lease_ops.release_params("sync", holder, ""))
        )


# -- the parsers and builders alone -------------------------------------------------------


def test_a_claimed_row_with_a_context_envelope_is_unwrapped() -> None:
    context = JobContext(actor=Actor("u1"), tenant="acme")
    stored = wrap_payload({"n": 1}, context)
    bare, wrapped = claim_ops.parse_claim(
        "q",
        [
            # the claim statement reads the two times as epoch seconds
            (1, 1, NOW.timestamp(), NOW.timestamp() + 30, {"n": 0}, 5, None),
            (2, 3, NOW.timestamp(), NOW.timestamp(), stored, 4, "earlier failure"),
        ],
    )
    assert (bare.payload, bare.context) == ({"n": 0}, JobContext())
    assert (bare.enqueued_at, bare.visible_until) == (NOW, NOW + timedelta(seconds=30))
    assert (wrapped.payload, wrapped.context, wrapped.attempts, wrapped.last_error) == (
        {"n": 1},
        context,
        3,
        "earlier failure",
    )


def test_batch_parameters_are_array_literals_in_job_order() -> None:
    jobs = [
        claimed_job(i, "q", None, JobContext(), a, 5, NOW, NOW, None) for i, a in ((9, 1), (3, 2))
    ]
    assert claim_ops.complete_many_params(jobs) == ("q", "{9,3}", "{1,2}")
    assert claim_ops.extend_many_params(jobs, 7) == ("q", "{9,3}", "{1,2}", 7.0)
    assert claim_ops.parse_complete_many(jobs, [(3,)]) == [False, True]


@pytest.mark.parametrize(
    ("body", "content_type", "stored"),
    [
        (b"\x00raw", "application/octet-stream", (b"\x00raw", "application/octet-stream")),
        ("héllo", None, ("héllo".encode(), None)),
        (None, None, (b"", None)),
        ({"b": [1, 2]}, None, (b'{"b":[1,2]}', idem_ops.JSON_VALUE_CONTENT_TYPE)),
        (False, None, (b"false", idem_ops.JSON_VALUE_CONTENT_TYPE)),
    ],
)
def test_response_bodies_are_stored_by_their_type(
    body: Any, content_type: str | None, stored: tuple[bytes, str | None]
) -> None:
    assert idem_ops.encode_body(body, content_type) == stored


def test_a_value_json_cannot_hold_is_a_validation_error() -> None:
    with pytest.raises(DrainpipeError) as caught:
        idem_ops.encode_body({"at": NOW}, None)
    assert caught.value.kind == "validation" and "datetime" in str(caught.value)
