"""Numbered migrations: discovery, the registry, concurrent installs, and time as a parameter."""

from __future__ import annotations

import asyncio
import re
import shutil
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

import drainpipe
from drainpipe.sqlmodules import MODULES, install, migrations, sql_dir, verify
from tests.conftest import ROOT, clone_database, connect, drop_database, with_database

# Called by no client: they stay unversioned (docs/sql.md).
INTERNAL_FUNCTIONS = {
    # the record functions under the public ones, which count their attempts
    "counted_job_records",
    "forget_job_steps",
    "uncounted_get_job",
    "uncounted_list_jobs_2",
    "uncounted_search_jobs",
    # durable steps: helpers of the step functions, never called by the client
    "assert_event_name",
    "hold_job_fence",
    "lock_job_event",
    "park_job",
    "wake_job",
    "set_job_parent",
    "child_job_states",
    # records: helpers the _v1/_v2 functions call, never the client
    "assert_job_code",
    "is_job_code",
    "job_tenant",
    "job_state_at",
    "enqueue_keyed_job",
    "pgmq_has_last_read",
    "pgmq_live_state",
    "pgmq_archive_job",
    # newest first: the listing's helpers and the per-queue index maker
    "job_records_newest",
    # newest first on the primary keys: stamps, the walk, the queues' setup
    "job_stamp",
    "job_stamp_window",
    "pgmq_list_by_ids",
    "pgmq_newest_window",
    "pgmq_records_ids_sql",
    "pgmq_records_sql",
    "assert_queue_name",
    "is_queue_name",
    "job_retry_delay",
    "assert_max_attempts",
    "job_message",
    "dead_job_message",
    "dead_job_ids",
    "delete_finished_jobs",
    "live_jobs_by_minute",  # job_queue_overview_v1's storage halves
    "finished_jobs_by_minute",
    "define_job_queue_functions",
    "assert_schedule_form",
    "assert_time_zone",
    "has_pg_cron",
    "is_pg_cron_job_command",
    # queue policies: trigger functions and the check they share
    "policy_payload_limit",
    "policy_payload_size",
    "check_policy_insert",
    "job_messages_policy_insert",
    "pgmq_queue_policy_insert",
    "count_live_jobs",
    "job_messages_policy_lease",
    "pgmq_lease_refused",
    # replay rules: helpers of replay_dead_job_v3, never the client
    "replay_rules_in_force",
    "replay_refusal",
    "replay_origin",
    # the console: helpers and triggers of its _v1 functions
    "overview_minutes",
    "overview_series",
    "job_cause",
    "add_job_totals",
    "kept_job_totals",
    "table_job_totals",
    "pgmq_job_totals",
    "pgmq_search_sql",
    # the pgmq per-queue makers' shared statement parts: called by the makers only
    "pgmq_lease_cols",
    "pgmq_lease_sql",
    "pgmq_flow_pick_sql",
    "pgmq_define_flow_pick",
    # the agent inbox's helpers: called by its _v1 functions only
    "agent_priority",
    "agent_where_matches",
    "agent_fan_out",
    "agent_event_rows",
    "agent_event_ends",
    "agent_end_spent",
    "agent_hand_out",
    "agent_lock_event",
    # a turn's checks and refusals: called by complete_and_claim_jobs_v1 only
    "assert_turn_arrays",
    "refused_turn_rows",
    # the claims' bound: called by the claims only
    "claim_bound_pass",
    "claim_bound",
    "keep_claim_bound",
    # flow control: helpers of the claims and of enqueue_flow_job_v1
    "job_key",
    "job_priority",
    "flow_room",
    "flow_record_claims",
    "ensure_flow_indexes",
    "debounce_job",
    "job_messages_flow_room",
    "job_messages_leased",
    "keep_flow_lease_window",
    "flow_lease_upto",
    "pgmq_lease_bound_current",
    "pgmq_ensure_index",
    "job_messages_flow_pick",
    # the limited pick, with and without priorities, and its lapsed leases
    "job_messages_flow_take",
    # held counts: called by job_queue_stats_v4, job_flow_holds_v1 and
    # job_queue_holds_v1 only
    "job_flow_held",
    "job_queue_due",
    # priorities in the claim: helpers of the enqueues and the claims
    "note_job_priority",
    "note_job_priorities",
    "ensure_priority_claim",
    "priority_bound_name",
    "job_messages_priority_pick",
    "job_messages_flow_priority_pick",
    # the queue's concurrency budget: called by the claims only
    "flow_budget_chunk",
    "flow_budget_applies",
    "flow_budget_take",
    "flow_budget_granted",
    "flow_budget_pending",
    "flow_budget_reset",
    # the budget's sequences, the chunk spent without a statement (and the shared
    # lock it marks nothing of), the lease bound
    "flow_budget_sequence",
    "flow_budget_advance",
    "flow_budget_spend",
    "flow_budget_keep",
    "flow_budget_held",
    "ensure_lease_bound",
}


@pytest.fixture
def empty_db(server_dsn: str) -> Iterator[str]:
    name = clone_database(server_dsn, "template0")
    yield with_database(server_dsn, name)
    drop_database(server_dsn, name)


def test_every_module_starts_from_its_baseline_with_known_option_parts() -> None:
    for module in MODULES:
        found = migrations(module)
        assert [m.version for m in found] == list(range(1, len(found) + 1))
        assert (found[0].name, found[0].contract) == ("baseline", False), module
        for migration in found:
            for part in migration.parts:
                tag = part.name.removesuffix(".sql").partition(".")[2]
                assert tag in ("", "pgmq", "table", "drain", "pg_cron"), part
    # each option picks its own part of the storage and scheduler files
    baseline = migrations("jobs")[0]
    table_drain = [p.name for p in baseline.selected_parts("table", "drain")]
    assert table_drain == ["10_common.sql", "20_storage.table.sql", "30_schedules.drain.sql"]
    pgmq_cron = [p.name for p in baseline.selected_parts("pgmq", "pg_cron")]
    assert pgmq_cron == ["10_common.sql", "20_storage.pgmq.sql", "30_schedules.pg_cron.sql"]


def test_python_calls_only_versioned_sql_functions() -> None:
    """A rolling deploy needs every name the client calls to carry a version."""
    called: set[str] = set()
    for path in (ROOT / "lib" / "drainpipe").rglob("*.py"):
        for name in re.findall(r"drainpipe\.([a-z_0-9]+)\(", path.read_text(encoding="utf-8")):
            called.add(name)
    sql_functions = {
        name
        for path in sql_dir().rglob("*.sql")
        for name in re.findall(
            r"FUNCTION drainpipe\.([a-z_0-9]+)\(", path.read_text(encoding="utf-8")
        )
    }
    calls = called & sql_functions
    assert calls, "no SQL function calls found"
    assert sorted(n for n in calls if not re.search(r"_v\d+$", n)) == []


async def test_every_function_a_client_may_call_carries_a_version(db_url: str) -> None:
    """Unversioned functions are internal (INTERNAL_FUNCTIONS): a change to a versioned one
    after the baseline adds a version, so a rolling deploy's older code keeps its own."""
    async with await connect(db_url) as conn:
        rows = await (
            await conn.execute(
                "SELECT DISTINCT proname FROM pg_proc"
                " WHERE pronamespace = 'drainpipe'::regnamespace AND proname !~ '__'"
            )
        ).fetchall()
    functions = {row[0] for row in rows}
    unversioned = {n for n in functions if not re.search(r"_v\d+$", n)}
    assert unversioned and sorted(unversioned - INTERNAL_FUNCTIONS) == []


@pytest.mark.parametrize("backend", ["pgmq", "table"])
async def test_concurrent_installs_of_every_module_apply_each_baseline_once(
    empty_db: str, backend: str
) -> None:
    results = await asyncio.gather(
        *(install(empty_db, MODULES, backend=backend) for _ in range(4))  # type: ignore[arg-type]
    )
    assert sorted(results) == [[], [], [], list(MODULES)]
    assert (await verify(empty_db)).ok
    async with await connect(empty_db) as conn:
        rows = await (
            await conn.execute(
                "SELECT module, version, name FROM drainpipe.schema_migrations ORDER BY 1, 2"
            )
        ).fetchall()
    assert rows == [  # a contract migration waits for contract=True
        (module, migration.version, migration.name)
        for module in sorted(MODULES)
        for migration in migrations(module)
        if not migration.contract
    ]
    async with drainpipe.Jobs(empty_db, {"q": dict}) as jobs:
        await jobs.enqueue("q", {"n": 1})
        [job] = await jobs.claim("q")
        assert await jobs.complete(job)


async def test_the_agent_inbox_installs_the_webhook_inbox_it_sits_on(empty_db: str) -> None:
    assert await install(empty_db, ["agent-inbox"]) == ["webhook-inbox", "agent-inbox"]
    report = await verify(empty_db, ["agent-inbox"])
    assert report.ok and list(dict.fromkeys(s.module for s in report.migrations)) == [
        "webhook-inbox",
        "agent-inbox",
    ]


async def test_a_changed_migration_is_reported_and_applied_again(db_url: str) -> None:
    async with await connect(db_url) as conn:
        await conn.execute(
            "UPDATE drainpipe.schema_migrations SET checksum = 'edited'"
            " WHERE module = 'idempotency' AND version = 1"
        )
    report = await verify(db_url, ["idempotency"])
    assert [(s.label, s.state) for s in report.migrations] == [
        ("idempotency 0001_baseline", "changed")
    ]
    assert not report.ok
    # the baseline is re-runnable: applied again over itself, it changes nothing else
    assert await install(db_url, ["idempotency"]) == ["idempotency"]
    assert (await verify(db_url, ["idempotency"])).ok


@pytest.mark.parametrize("backend", ["pgmq", "table"])
async def test_a_lease_runs_out_when_the_claim_moves_time(jobs_db_url: str, backend: str) -> None:
    """p_now: a test moves the clock instead of sleeping through a lease."""
    async with await connect(jobs_db_url) as conn:
        now = (await (await conn.execute("SELECT clock_timestamp()")).fetchone() or [None])[0]
        assert isinstance(now, datetime)
        await conn.execute("SELECT drainpipe.enqueue_job_v1('q', '{}')")
        [(job_id, first)] = await (
            await conn.execute("SELECT id, attempts FROM drainpipe.claim_jobs_v1('q', 300, 1)")
        ).fetchall()
        empty = await (
            await conn.execute(
                "SELECT id FROM drainpipe.claim_jobs_v1('q', 300, 1, %s)",
                (now + timedelta(seconds=299),),
            )
        ).fetchall()
        assert empty == []  # still leased a second before the end
        later = now + timedelta(seconds=301)
        [(again_id, second)] = await (
            await conn.execute(
                "SELECT id, attempts FROM drainpipe.claim_jobs_v1('q', 300, 1, %s)", (later,)
            )
        ).fetchall()
        assert (again_id, second) == (job_id, first + 1)
        # the first holder's lease is gone: its heartbeat and completion change nothing
        stale = await (
            await conn.execute(
                "SELECT drainpipe.extend_job_lease_v1('q', %s, %s, 60),"
                " drainpipe.complete_job_v1('q', %s, %s)",
                (job_id, first, job_id, first),
            )
        ).fetchone()
        assert stale == (False, False)
        # a retry backoff is measured from p_now too
        row = await (
            await conn.execute(
                "SELECT drainpipe.fail_job_v2('q', %s, %s, 'boom', 60, 'HANDLER_ERROR', false, %s)",
                (job_id, second, later),
            )
        ).fetchone()
        assert row == ("queued",)
        for offset, expected in ((59, []), (61, [(job_id,)])):
            claimed = await (
                await conn.execute(
                    "SELECT id FROM drainpipe.claim_jobs_v1('q', 300, 1, %s)",
                    (later + timedelta(seconds=offset),),
                )
            ).fetchall()
            assert claimed == expected, offset


async def test_webhooks_leases_and_keys_take_the_time_too(db_url: str) -> None:
    async with await connect(db_url) as conn:
        now = (await (await conn.execute("SELECT clock_timestamp()")).fetchone() or [None])[0]
        assert isinstance(now, datetime)
        await conn.execute("SELECT * FROM drainpipe.receive_webhook_v3('s', 'm1', 't', '{}')")
        claim = "SELECT id, attempts FROM drainpipe.claim_webhooks_v1('s', %s, 10, 30, %s)"
        [(message, attempt)] = await (await conn.execute(claim, ("w1", None))).fetchall()
        assert (
            await (await conn.execute(claim, ("w2", now + timedelta(seconds=29)))).fetchall() == []
        )
        taken = await (await conn.execute(claim, ("w2", now + timedelta(seconds=31)))).fetchall()
        assert taken == [(message, attempt + 1)]

        holder = await (
            await conn.execute("SELECT drainpipe.acquire_lease_v1('k', 10, '', %s)", (now,))
        ).fetchone()
        assert holder is not None and holder[0] is not None
        takeover = "SELECT drainpipe.acquire_lease_v1('k', 10, '', %s)"
        assert await (await conn.execute(takeover, (now + timedelta(seconds=9),))).fetchone() == (
            None,
        )
        second = await (await conn.execute(takeover, (now + timedelta(seconds=11),))).fetchone()
        assert second is not None and second[0] not in (None, holder[0])

        begin = (
            "SELECT state, holder FROM drainpipe.begin_idempotent_v1('', 'key', 'fp', 3600, 60, %s)"
        )
        first = await (await conn.execute(begin, (now,))).fetchone()
        assert first is not None and first[0] == "started"
        busy = await (await conn.execute(begin, (now + timedelta(seconds=59),))).fetchone()
        assert busy == ("running", None)
        took = await (await conn.execute(begin, (now + timedelta(seconds=61),))).fetchone()
        assert took is not None and took[0] == "started" and took[1] != first[1]


def test_template_hash_covers_every_migration_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test template is rebuilt when any SQL file changes, in subfolders too."""
    import tests.conftest as harness

    copy = tmp_path / "sql"
    shutil.copytree(sql_dir(), copy)
    monkeypatch.setattr(harness, "sql_dir", lambda: copy)
    before = harness._sql_hash()
    part = copy / migrations("jobs")[0].parts[0].relative_to(sql_dir())
    part.write_text(part.read_text() + "\n-- touched\n")
    assert harness._sql_hash() != before


async def test_verify_of_an_empty_database_lists_everything_pending(
    empty_db: str,
) -> None:
    report = await verify(empty_db)
    assert not report.ok
    # a contract migration waits for contract=True
    assert {s.state for s in report.migrations} <= {"pending", "deferred"}
    assert {s.state for s in report.migrations if not s.name.startswith("contract_")} == {"pending"}
    assert (report.backend, report.scheduler) == ("pgmq", "drain")
    with pytest.raises(ValueError, match="Unknown SQL module"):
        await verify(empty_db, ["nope"])
