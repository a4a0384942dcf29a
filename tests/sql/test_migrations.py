"""Numbered migrations: discovery, the registry, upgrades in place, and time as a parameter."""

from __future__ import annotations

import asyncio
import re
import shutil
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

import drainpipe
from drainpipe.sqlmodules import (
    MODULES,
    install,
    legacy_checksum,
    migrations,
    read_sql,
    sql_dir,
    verify,
)
from tests.conftest import ROOT, clone_database, connect, drop_database, with_database
from tests.schedules.test_pg_cron import cleanup, cron_db, cron_url, names  # noqa: F401 - fixtures

# Called by no client: they stay unversioned (docs/sql.md).
INTERNAL_FUNCTIONS = {
    # jobs 0019: the record functions under the public ones, which count their attempts
    "counted_job_records",
    "forget_job_steps",
    "uncounted_get_job",
    "uncounted_list_jobs_1",
    "uncounted_list_jobs_2",
    "uncounted_search_jobs",
    # jobs 0016 (durable steps): helpers of the step functions, never called by the client
    "assert_event_name",
    "hold_job_fence",
    "lock_job_event",
    "park_job",
    "wake_job",
    "set_job_parent",
    "child_job_states",
    # jobs 0004 (records): helpers the _v1/_v2 functions call, never the client
    "assert_job_code",
    "is_job_code",
    "job_tenant",
    "job_state_at",
    "job_records_at",
    "enqueue_keyed_job",
    "pgmq_has_last_read",
    "pgmq_live_state",
    "pgmq_archive_job",
    "pgmq_records_sql",
    "pgmq_records",
    # jobs 0010 (newest first): the listing's helpers and the per-queue index maker
    "job_records_newest",
    "pgmq_records_newest_sql",
    "pgmq_enqueued_indexes",
    # jobs 0013 (newest first on the primary keys): stamps, the walk, the queues' setup
    "job_stamp",
    "job_stamp_window",
    "pgmq_list_by_ids",
    "pgmq_newest_window",
    "pgmq_records_ids_sql",
    "assert_queue_name",
    "is_queue_name",
    "job_retry_delay",
    "assert_max_attempts",
    "job_message",
    "dead_job_message",
    "dead_job_ids",
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
    "pgmq_queue_policy_lease",
    # replay rules (jobs 0011): helpers of replay_dead_job_v3, never the client
    "replay_rules_in_force",
    "replay_refusal",
    "replay_origin",
    # the console (jobs 0012): helpers and triggers of its _v1 functions
    "overview_minutes",
    "overview_series",
    "job_cause",
    "add_job_totals",
    "kept_job_totals",
    "table_job_totals",
    "pgmq_job_totals",
    "pgmq_search_sql",
    # the agent inbox's helpers (webhook-inbox 0004): called by its _v1 functions only
    "agent_priority",
    "agent_where_matches",
    "agent_fan_out",
    "agent_event_rows",
    "agent_event_ends",
    "agent_end_spent",
    "agent_hand_out",
    "agent_lock_event",
    # a turn's checks and refusals (jobs 0008): called by complete_and_claim_jobs_v1 only
    "assert_turn_arrays",
    "refused_turn_rows",
    # the claims' bound (jobs 0014): called by the claims only
    "claim_bound_pass",
    "claim_bound",
    "keep_claim_bound",
    # flow control (jobs 0015): helpers of the claims and of enqueue_flow_job_v1
    "job_key",
    "job_priority",
    "flow_room",
    "flow_gate",
    "flow_record_claims",
    "ensure_flow_indexes",
    "debounce_job",
    "job_messages_flow_room",
    "job_messages_flow_pick",
    # jobs 0020: the limited pick, with and without priorities, and its lapsed leases
    "job_messages_flow_take",
    # held counts (jobs 0018): called by job_queue_stats_v4, job_flow_holds_v1 and
    # job_queue_holds_v1 only
    "job_flow_held",
    "job_queue_due",
    # priorities in the claim (jobs 0017): helpers of the enqueues and the claims
    "note_job_priority",
    "note_job_priorities",
    "ensure_priority_claim",
    "priority_bound_name",
    "job_messages_priority_pick",
    "job_messages_flow_priority_pick",
    "flow_leased_hint",
    "keep_flow_leased",
    # the queue's concurrency budget (jobs 0021): called by the claims only
    "flow_budget_chunk",
    "flow_budget_applies",
    "flow_budget_take",
    "flow_budget_pending",
    "flow_budget_reset",
    # jobs 0023: the budget's sequences, the chunk spent without a statement, the lease
    # trigger's bound
    "flow_budget_sequence",
    "flow_budget_advance",
    "flow_budget_spend",
    "ensure_lease_trigger",
}

# what release 0 (0.1.0) shipped; later modules have no release-0 state to upgrade from
RELEASE_0_MODULES = ("jobs", "idempotency", "webhook-inbox")


@pytest.fixture
def empty_db(server_dsn: str) -> Iterator[str]:
    name = clone_database(server_dsn, "template0")
    yield with_database(server_dsn, name)
    drop_database(server_dsn, name)


def test_every_module_has_numbered_migrations_with_known_option_parts() -> None:
    for module in MODULES:
        found = migrations(module)
        assert [m.version for m in found] == list(range(1, len(found) + 1))
        if module == "rest-api":  # new in this release: nothing older to keep or drop
            named = [(m.name, m.contract) for m in found]
            assert named == [
                ("api_v1", False),
                ("records_v1", False),
                ("policies_v1", False),
                ("complete_and_claim_v1", False),
                ("list_jobs_v2", False),
                ("replay_rules_v1", False),
                ("console_v1", False),
                ("flow_control", False),
                ("steps_v1", False),
                ("held_counts", False),
            ]
            assert not any(m.contract for m in found)
            continue
        assert found[0].name == "release_0" and found[1].name == "v1_functions"
        # the contract step of release 0's names is 0003; later migrations expand again
        # (jobs 0004_job_records, webhook-inbox 0004_agent_inbox)
        assert [m.contract for m in found][:3] == [False, False, True]
        assert not any(m.contract for m in found[3:])
        for migration in found:
            for part in migration.parts:
                tag = part.name.removesuffix(".sql").partition(".")[2]
                assert tag in ("", "pgmq", "table", "drain", "pg_cron"), part
    # each option picks its own part of the storage and scheduler files
    v1 = migrations("jobs")[1]
    table_drain = [p.name for p in v1.selected_parts("table", "drain")]
    assert "20_storage.table.sql" in table_drain and "20_storage.pgmq.sql" not in table_drain
    assert "50_schedules.drain.sql" in table_drain and "50_schedules.pg_cron.sql" not in table_drain


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


async def test_each_client_function_of_release_0_has_a_v1(db_url: str) -> None:
    async with await connect(db_url) as conn:
        rows = await (
            await conn.execute(
                "SELECT DISTINCT proname FROM pg_proc"
                " WHERE pronamespace = 'drainpipe'::regnamespace AND proname !~ '__'"
            )
        ).fetchall()
    functions = {row[0] for row in rows}
    unversioned = {n for n in functions if not re.search(r"_v\d+$", n)} - INTERNAL_FUNCTIONS
    assert unversioned, functions
    missing = sorted(
        n for n in unversioned if f"{n}_v1" not in functions and n != "index_job_queue"
    )
    assert missing == []


async def _install_release_0(url: str, backend: str) -> None:
    """What release 0's install() left: its SQL and its drainpipe.modules rows, no
    schema_migrations (release_0 is that release's SQL, byte for byte)."""
    async with await connect(url) as conn:
        if backend == "pgmq":
            from drainpipe.sqlmodules import pgmq_sql_path

            await conn.execute(pgmq_sql_path().read_bytes())
        for module in RELEASE_0_MODULES:
            header = f"-- drainpipe module {module}" + (
                f" (backend={backend}, scheduler=drain)" if module == "jobs" else ""
            )
            baseline = migrations(module)[0].text(backend, "drain")
            text = "\n".join([header, read_sql("common.sql"), baseline, read_sql("privileges.sql")])
            await conn.execute(text.encode())
            options = {"backend": backend, "scheduler": "drain"} if module == "jobs" else {}
            await conn.execute(
                "INSERT INTO drainpipe.modules (name, options, checksum) VALUES (%s, %s, %s)",
                (module, Jsonb(options), legacy_checksum(module, backend)),
            )


@pytest.mark.parametrize("backend", ["pgmq", "table"])
async def test_concurrent_installs_upgrade_release_0_in_place(empty_db: str, backend: str) -> None:
    await _install_release_0(empty_db, backend)
    async with await connect(empty_db) as conn:
        for n in range(3):
            await conn.execute("SELECT drainpipe.enqueue_job('q', %s)", (Jsonb({"n": n}),))
        [(claimed_id, attempt)] = await (
            await conn.execute("SELECT id, attempts FROM drainpipe.claim_jobs('q', 300, 1)")
        ).fetchall()
    report = await verify(empty_db)
    assert [s.label for s in report.problems][:2] == [
        "jobs 0001_release_0",
        "jobs 0002_v1_functions",
    ]

    results = await asyncio.gather(
        *(install(empty_db, MODULES, backend=backend) for _ in range(4))  # type: ignore[arg-type]
    )
    assert sorted(len(r) for r in results) == [0, 0, 0, len(MODULES)]
    assert (await verify(empty_db)).ok
    async with await connect(empty_db) as conn:
        rows = await (
            await conn.execute(
                "SELECT module, version, name FROM drainpipe.schema_migrations ORDER BY 1, 2"
            )
        ).fetchall()
        # every expansion is applied; the contract migrations wait until asked for
        assert rows == [
            (module, migration.version, migration.name)
            for module in sorted(MODULES)
            for migration in migrations(module)
            if not migration.contract
        ]
    async with drainpipe.Jobs(empty_db, {"q": dict}) as jobs:
        # the jobs that waited through the upgrade; the claimed one is still leased
        waiting = await jobs.claim("q", batch=10)
        assert sorted(job.payload["n"] for job in waiting) == [1, 2]
        stats = (await jobs.stats(["q"]))["q"]
        assert (stats.ready, stats.in_flight) == (0, 3)
    async with await connect(empty_db) as conn:
        # the lease release 0 took is still fenced by its attempt in the _v1 functions
        row = await (
            await conn.execute(
                "SELECT drainpipe.complete_job_v1('q', %s, %s)", (claimed_id, attempt)
            )
        ).fetchone()
        assert row == (True,)


async def test_a_changed_migration_is_reported_and_applied_again(db_url: str) -> None:
    async with await connect(db_url) as conn:
        await conn.execute(
            "UPDATE drainpipe.schema_migrations SET checksum = 'edited'"
            " WHERE module = 'idempotency' AND version = 1"
        )
    report = await verify(db_url, ["idempotency"])
    assert [(s.label, s.state) for s in report.migrations] == [
        ("idempotency 0001_release_0", "changed"),
        ("idempotency 0002_v1_functions", "applied"),
        ("idempotency 0003_contract_drop_unversioned", "deferred"),
    ]
    assert not report.ok
    # re-applied with everything after it, so a later migration's effect is not undone
    assert await install(db_url, ["idempotency"]) == ["idempotency"]
    assert (await verify(db_url, ["idempotency"])).ok
    assert (await verify(db_url, ["idempotency"], contract=True)).problems[0].state == "pending"


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
                "SELECT drainpipe.fail_job_v1('q', %s, %s, 'boom', 60, %s)",
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
        await conn.execute("SELECT * FROM drainpipe.receive_webhook_v1('s', 'm1', 't', '{}')")
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
    part = copy / migrations("jobs")[1].parts[0].relative_to(sql_dir())
    part.write_text(part.read_text() + "\n-- touched\n")
    assert harness._sql_hash() != before


async def test_verify_of_an_empty_database_lists_everything_pending(
    empty_db: str,
) -> None:
    report = await verify(empty_db)
    assert not report.ok
    assert {s.state for s in report.migrations} == {"pending", "deferred"}
    assert (report.backend, report.scheduler) == ("pgmq", "drain")
    with pytest.raises(ValueError, match="Unknown SQL module"):
        await verify(empty_db, ["nope"])


@pytest.mark.pg_cron
async def test_pg_cron_jobs_release_0_scheduled_stay_drainpipes_and_contract_repoints_them(
    cron_db: psycopg.AsyncConnection[Any],  # noqa: F811 - the fixture of test_pg_cron
    names: dict[str, str],  # noqa: F811
) -> None:
    """Release 0 wrote commands calling drainpipe.enqueue_job: v1 lists and removes them;
    the contract migration points them at enqueue_job_v1 before dropping the old one."""
    queue, prefix = names["queue"], names["prefix"]
    old_command = f"SELECT drainpipe.enqueue_job('{queue}', '{{}}'::jsonb)"
    try:
        await cron_db.execute(
            "SELECT cron.schedule(%s, '0 4 * * *', %s)", (prefix + "old", old_command)
        )
        jobs = drainpipe.Jobs(cron_db, {queue: dict[str, Any]}, scheduler="pg_cron")
        await jobs.schedule(prefix + "new", "@hourly", queue, {})
        listed = await jobs.list_schedules(prefix=prefix)
        assert [(info.name, info.queue) for info in listed] == [
            (prefix + "new", queue),
            (prefix + "old", queue),
        ]
        commands = dict(
            await (
                await cron_db.execute(
                    "SELECT jobname, command FROM cron.job WHERE starts_with(jobname, %s)",
                    (prefix,),
                )
            ).fetchall()
        )
        assert commands[prefix + "new"].startswith("SELECT drainpipe.enqueue_job_v1(")
        # the contract migration, in a transaction rolled back: the cron database is shared
        # with other test runs, whose code still calls the unversioned functions
        contract = migrations("jobs")[2].text("table", "pg_cron")
        async with cron_db.transaction(force_rollback=True):
            await cron_db.execute(contract.encode())
            row = await (
                await cron_db.execute(
                    "SELECT command FROM cron.job WHERE jobname = %s", (prefix + "old",)
                )
            ).fetchone()
            assert row == (f"SELECT drainpipe.enqueue_job_v1('{queue}', '{{}}'::jsonb)",)
            assert await (
                await cron_db.execute("SELECT to_regproc('drainpipe.enqueue_job')")
            ).fetchone() == (None,)
        assert await jobs.unschedule(prefix + "old") is True
        assert [info.name for info in await jobs.list_schedules(prefix=prefix)] == [prefix + "new"]
    finally:
        await cleanup(cron_db, prefix)
