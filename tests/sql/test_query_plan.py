"""The claim stays on its index with a big backlog (an EXPLAIN regression test).

A claim that falls back to a Seq Scan costs O(backlog) per call: fine with 1,000 jobs,
fatal with 1,000,000. The backlog is filled with ``generate_series`` straight into the
storage tables (fast), analysed, and the picking statements of ``drainpipe.claim_jobs_v1``
are explained with the function's parameters inlined, both as a custom plan (what the
first executions get) and as a generic plan (what plpgsql may switch to afterwards).
Then ``auto_explain`` reports the plans of every statement the functions really run
(``claim_jobs_v1``, ``complete_jobs_v1`` and ``complete_and_claim_jobs_v1``), so a join that falls back to a Seq Scan is caught too.
Those functions keep one generic plan per session, so plans made while the queue was still
empty are checked again once it has grown.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

BACKLOG = 50_000
QUEUE = "bench"

# The statements claim_jobs runs, parameters inlined (sql/jobs_table.sql).
TABLE_PICK = """
    SELECT j.id FROM drainpipe.job_messages j
     WHERE j.queue = {queue} AND j.finished_at IS NULL AND j.visible_at <= {now}
       AND j.attempts < j.max_attempts
     ORDER BY j.visible_at, j.id
     LIMIT greatest({batch}, 1)
       FOR UPDATE SKIP LOCKED"""
TABLE_SWEEP = """
    SELECT x.id FROM drainpipe.job_messages x
     WHERE x.queue = {queue} AND x.finished_at IS NULL AND x.attempts >= x.max_attempts
       AND x.visible_at <= {now}
       FOR UPDATE SKIP LOCKED"""
# The picking CTE of the pgmq claim (the flat claim of the jobs baseline), queue "bench".
PGMQ_PICK = """
    SELECT msg_id, read_ct >= coalesce((message ->> 'max_attempts')::integer, 5) AS exhausted
      FROM pgmq.q_bench
     WHERE vt <= clock_timestamp()
     ORDER BY vt
     LIMIT {batch}
       FOR UPDATE SKIP LOCKED"""


def plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)


def explain(conn: psycopg.Connection[Any], sql: str) -> list[dict[str, Any]]:
    row = conn.execute("EXPLAIN (FORMAT JSON) " + sql).fetchone()
    assert row is not None
    document = row[0] if not isinstance(row[0], str) else json.loads(row[0])
    return list(plan_nodes(document[0]["Plan"]))


def assert_on_index(nodes: list[dict[str, Any]], table: str, indexes: set[str]) -> None:
    scans = [n for n in nodes if n.get("Relation Name") == table]
    assert scans, f"no scan of {table} in {nodes}"
    summary = [(n["Node Type"], n.get("Index Name")) for n in nodes]
    assert all(n["Node Type"] != "Seq Scan" for n in scans), summary
    # a Bitmap Heap Scan names its index on the Bitmap Index Scan below it
    assert any(n.get("Index Name") in indexes for n in nodes), summary


def run_explained(conn: psycopg.Connection[Any], sql: str, params: Any = None) -> list[Any]:
    """Run ``sql``; return the plans of the statements nested in it (auto_explain, JSON)."""
    notices: list[str] = []

    def collect(diag: psycopg.errors.Diagnostic) -> None:
        notices.append(diag.message_primary or "")

    conn.add_notice_handler(collect)
    try:
        conn.execute(sql, params).fetchall()
    finally:
        conn.remove_notice_handler(collect)
    plans = []
    for text in notices:
        if "plan:" not in text:
            continue
        document = json.loads(text.split("plan:", 1)[1])
        plans.append((document["Query Text"], list(plan_nodes(document["Plan"]))))
    return plans


def auto_explain(conn: psycopg.Connection[Any]) -> None:
    try:
        conn.execute("LOAD 'auto_explain'")
    except psycopg.Error as exc:  # a server without contrib: the EXPLAINs above still ran
        pytest.skip(f"auto_explain is not available: {exc}")
    for setting in (
        "auto_explain.log_min_duration = 0",
        "auto_explain.log_nested_statements = on",
        "auto_explain.log_level = notice",
        "auto_explain.log_format = json",
    ):
        conn.execute("SET " + setting)


def scans_of(plans: list[Any], table: str) -> list[tuple[str, str | None]]:
    """``(node type, index)`` of every scan of ``table`` (its name without schema) in
    ``run_explained``'s plans; a bitmap scan names its index on the Bitmap Index Scan
    below its heap scan, so those are listed too."""
    return [
        (node["Node Type"], node.get("Index Name"))
        for _, nodes in plans
        for node in nodes
        if node.get("Relation Name") == table or node["Node Type"] == "Bitmap Index Scan"
    ]


def seq_scans(plans: list[Any], table: str) -> list[str]:
    return [
        text
        for text, nodes in plans
        if any(n["Node Type"] == "Seq Scan" and n.get("Relation Name") == table for n in nodes)
    ]


def assert_functions_on_index(
    conn: psycopg.Connection[Any], table: str, picking: set[str], *, rounds: int = 8
) -> None:
    """``rounds`` claims, each completed: no statement the functions run scans ``table``
    sequentially, and the statement that locks the picked rows reads a ``picking`` index.
    More than five rounds, so plpgsql's plan cache has made its custom/generic choice."""
    for _ in range(rounds):
        claim = run_explained(
            conn, "SELECT id, attempts FROM drainpipe.claim_jobs_v1(%s, 30, 100)", (QUEUE,)
        )
        nested = [(text, nodes) for text, nodes in claim if "drainpipe.claim_jobs_v1" not in text]
        assert nested, claim
        assert seq_scans(nested, table) == []
        locking = [nodes for text, nodes in nested if "SKIP LOCKED" in text and "ORDER BY" in text]
        assert any(n.get("Index Name") in picking for nodes in locking for n in nodes), locking
        rows = conn.execute(
            "SELECT id, attempts FROM drainpipe.claim_jobs_v1(%s, 30, 100)", (QUEUE,)
        ).fetchall()
        assert len(rows) == 100
        complete = run_explained(
            conn,
            "SELECT drainpipe.complete_jobs_v1(%s, %s, %s)",
            (QUEUE, [r[0] for r in rows], [r[1] for r in rows]),
        )
        assert seq_scans(complete, table) == []
        # a lane's turn: the completions of one batch and the claim of the next, one call
        rows = conn.execute(
            "SELECT id, attempts FROM drainpipe.claim_jobs_v1(%s, 30, 100)", (QUEUE,)
        ).fetchall()
        turn = run_explained(
            conn,
            "SELECT id FROM drainpipe.complete_and_claim_jobs_v1(%s, %s, %s, 30, 100)",
            (QUEUE, [r[0] for r in rows], [r[1] for r in rows]),
        )
        assert seq_scans(turn, table) == []


def insert_backlog(conn: psycopg.Connection[Any], backend: str) -> None:
    """``BACKLOG`` visible jobs of ``QUEUE`` straight into storage (and, on the table, some
    of another queue and some in flight, as a live system has). Not analysed."""
    payload = "jsonb_build_object('n', g, 'email', 'user' || g || '@example.com')"
    message = f"jsonb_build_object('payload', {payload}, 'max_attempts', 5)"
    if backend == "table":
        conn.execute(
            "INSERT INTO drainpipe.job_messages (queue, payload, visible_at)"
            f" SELECT %s, {payload}, now() - interval '1 hour' + g * interval '1 ms'"
            f" FROM generate_series(1, {BACKLOG}) g",
            (QUEUE,),
        )
        conn.execute(
            "INSERT INTO drainpipe.job_messages (queue, payload, attempts, visible_at)"
            f" SELECT 'other', {payload}, 1, now() + interval '5 minutes'"
            " FROM generate_series(1, 1000) g"
        )
    else:
        conn.execute(
            f"INSERT INTO pgmq.q_{QUEUE} (vt, message)"
            f" SELECT now() - interval '1 hour' + g * interval '1 ms', {message}"
            f" FROM generate_series(1, {BACKLOG}) g"
        )


def storage_table(backend: str) -> str:
    return "drainpipe.job_messages" if backend == "table" else f"pgmq.q_{QUEUE}"


@pytest.fixture
def fill(
    fresh_database: Callable[[str], str],
) -> Iterator[Callable[[str], psycopg.Connection[Any]]]:
    opened: list[psycopg.Connection[Any]] = []

    def make(backend: str) -> psycopg.Connection[Any]:
        conn = psycopg.connect(fresh_database(backend), autocommit=True)
        opened.append(conn)
        if backend == "pgmq":
            conn.execute("SELECT drainpipe.ensure_job_queue_v1(%s)", (QUEUE,))
        insert_backlog(conn, backend)
        conn.execute(f"ANALYZE {storage_table(backend)}")
        return conn

    yield make
    for conn in opened:
        conn.close()


def test_table_picking_uses_the_ready_index(fill: Callable[[str], psycopg.Connection[Any]]) -> None:
    conn = fill("table")
    custom = TABLE_PICK.format(queue=f"'{QUEUE}'", now="now()", batch=100)
    assert_on_index(explain(conn, custom), "job_messages", {"job_messages_live_idx"})
    sweep = TABLE_SWEEP.format(queue=f"'{QUEUE}'", now="now()")
    assert_on_index(explain(conn, sweep), "job_messages", {"job_messages_exhausted_live_idx"})

    # plpgsql passes p_queue, v_now and p_batch as parameters: the generic plan must hold too
    conn.execute("SET plan_cache_mode = force_generic_plan")
    conn.execute(
        "PREPARE pick(text, timestamptz, integer) AS "
        + TABLE_PICK.format(queue="$1", now="$2", batch="$3")
    )
    conn.execute("PREPARE sweep(text, timestamptz) AS " + TABLE_SWEEP.format(queue="$1", now="$2"))
    generic = explain(conn, f"EXECUTE pick('{QUEUE}', now(), 100)")
    assert_on_index(generic, "job_messages", {"job_messages_live_idx"})
    generic_sweep = explain(conn, f"EXECUTE sweep('{QUEUE}', now())")
    assert_on_index(generic_sweep, "job_messages", {"job_messages_exhausted_live_idx"})

    conn.execute("RESET plan_cache_mode")
    # the function claims from the head of the backlog
    rows = conn.execute("SELECT id FROM drainpipe.claim_jobs_v1(%s, 30, 100)", (QUEUE,)).fetchall()
    assert [r[0] for r in rows] == list(range(1, 101))


def test_pgmq_picking_uses_an_index(fill: Callable[[str], psycopg.Connection[Any]]) -> None:
    conn = fill("pgmq")
    indexes = {f"q_{QUEUE}_pkey", f"q_{QUEUE}_vt_idx"}
    assert_on_index(explain(conn, PGMQ_PICK.format(batch=100)), f"q_{QUEUE}", indexes)

    conn.execute("SET plan_cache_mode = force_generic_plan")
    conn.execute("PREPARE pick(integer) AS " + PGMQ_PICK.format(batch="$1"))
    assert_on_index(explain(conn, "EXECUTE pick(100)"), f"q_{QUEUE}", indexes)
    conn.execute("RESET plan_cache_mode")

    rows = conn.execute("SELECT id FROM drainpipe.claim_jobs_v1(%s, 30, 100)", (QUEUE,)).fetchall()
    assert [r[0] for r in rows] == list(range(1, 101))


TABLE_INDEXES = ("job_messages", {"job_messages_live_idx"})
PGMQ_INDEXES = (f"q_{QUEUE}", {f"q_{QUEUE}_pkey", f"q_{QUEUE}_vt_idx"})


@pytest.mark.parametrize("backend", ["table", "pgmq"])
def test_claim_and_complete_stay_on_indexes(
    fill: Callable[[str], psycopg.Connection[Any]], backend: str
) -> None:
    """What the functions really run, as plpgsql plans them with default settings."""
    conn = fill(backend)
    auto_explain(conn)
    table, indexes = TABLE_INDEXES if backend == "table" else PGMQ_INDEXES
    assert_functions_on_index(conn, table, indexes)


@pytest.mark.parametrize("backend", ["table", "pgmq"])
def test_claim_holds_with_generic_plans(
    fill: Callable[[str], psycopg.Connection[Any]], backend: str
) -> None:
    conn = fill(backend)
    conn.execute("SET plan_cache_mode = force_generic_plan")
    auto_explain(conn)
    table, indexes = TABLE_INDEXES if backend == "table" else PGMQ_INDEXES
    assert_functions_on_index(conn, table, indexes, rounds=1)


@pytest.mark.parametrize("backend", ["table", "pgmq"])
def test_plans_cached_while_the_queue_was_empty_hold_as_it_grows(
    fresh_database: Callable[[str], str], backend: str
) -> None:
    """The claim and complete functions keep one generic plan per session. A worker that
    started on an empty queue must not keep a plan that scans the table once the queue has
    grown (before any ANALYZE could make it plan again)."""
    url = fresh_database(backend)
    with psycopg.connect(url, autocommit=True) as conn:
        if backend == "pgmq":
            conn.execute("SELECT drainpipe.ensure_job_queue_v1(%s)", (QUEUE,))
        conn.execute(f"ALTER TABLE {storage_table(backend)} SET (autovacuum_enabled = false)")
        for n in range(6):  # past plpgsql's first executions: the plans are cached now
            claimed = conn.execute(
                "SELECT id, attempts FROM drainpipe.claim_jobs_v1(%s, 30, 100)", (QUEUE,)
            ).fetchall()
            assert claimed == []
            conn.execute("SELECT drainpipe.complete_jobs_v1(%s, %s, %s)", (QUEUE, [1], [1]))
            conn.execute("SELECT drainpipe.fail_job_v2(%s, 1, 1, 'x')", (QUEUE,))
            conn.execute("SELECT drainpipe.enqueue_job_v1(%s, '{}', 3600, 5, %s)", (QUEUE, f"k{n}"))
            conn.execute("SELECT drainpipe.extend_job_leases_v1(%s, %s, %s, 30)", (QUEUE, [1], [1]))
        with psycopg.connect(url, autocommit=True) as other:
            insert_backlog(other, backend)
        auto_explain(conn)
        table, indexes = TABLE_INDEXES if backend == "table" else PGMQ_INDEXES
        assert_functions_on_index(conn, table, indexes, rounds=2)
        # the other by-id and by-key statements a worker or an enqueue runs
        for sql, params in (
            ("SELECT drainpipe.fail_job_v2(%s, 7, 0, 'x')", (QUEUE,)),
            ("SELECT drainpipe.enqueue_job_v1(%s, '{}', 0, 5, 'key')", (QUEUE,)),
            ("SELECT drainpipe.extend_job_leases_v1(%s, %s, %s, 30)", (QUEUE, [7], [0])),
        ):
            assert seq_scans(run_explained(conn, sql, params), table) == [], sql


FINISHED = 150_000
DUE = 12_000


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["table", "pgmq"])
def test_a_claim_after_a_vacuum_of_the_drained_queue_reads_its_index_in_order(
    fresh_database: Callable[[str], str], backend: str
) -> None:
    """A VACUUM taken while the queue is empty (what autovacuum does when the workers keep
    up) records the claim's partial index as empty. The functions plan generically
    (``force_generic_plan``) from those statistics; with many finished rows kept and a
    backlog enqueued afterwards, the pick must still walk its index in order and stop at the
    batch. A pick that collects every due row and sorts them (a Bitmap Heap Scan + Sort,
    the agent inbox's pick before its fix: 17 ms at 12,000 due rows) reads ``DUE`` rows."""
    url = fresh_database(backend)
    with psycopg.connect(url, autocommit=True) as conn:
        if backend == "pgmq":
            conn.execute("SELECT drainpipe.ensure_job_queue_v1(%s)", (QUEUE,))
        conn.execute(
            "SELECT count(*) FROM drainpipe.enqueue_jobs_v1(%s,"
            " (SELECT jsonb_agg(jsonb_build_object('n', g)) FROM generate_series(1, %s) g))",
            (QUEUE, FINISHED),
        )
        done = 0
        while done < FINISHED:  # all of them claimed and completed: records, nothing live
            rows = conn.execute(
                "SELECT id, attempts FROM drainpipe.claim_jobs_v1(%s, 30, 10000)", (QUEUE,)
            ).fetchall()
            assert rows
            conn.execute(
                "SELECT count(*) FROM drainpipe.complete_jobs_v1(%s, %s, %s)",
                (QUEUE, [r[0] for r in rows], [r[1] for r in rows]),
            )
            done += len(rows)
        conn.execute("VACUUM ANALYZE")
        conn.execute(
            "SELECT count(*) FROM drainpipe.enqueue_jobs_v1(%s,"
            " (SELECT jsonb_agg(jsonb_build_object('n', g)) FROM generate_series(1, %s) g))",
            (QUEUE, DUE),
        )
        auto_explain(conn)
        conn.execute("SET auto_explain.log_analyze = on")
        for _ in range(7):  # past plpgsql's first executions
            plans = run_explained(
                conn, "SELECT id FROM drainpipe.claim_jobs_v1(%s, 30, 10)", (QUEUE,)
            )
            picks = [
                nodes
                for text, nodes in plans
                if "SKIP LOCKED" in text and "ORDER BY" in text and "claim_jobs_v1" not in text
            ]
            assert picks, [text for text, _ in plans]
            for nodes in picks:
                summary = [
                    (n["Node Type"], n.get("Index Name"), n.get("Actual Rows")) for n in nodes
                ]
                assert all(n["Node Type"] != "Sort" for n in nodes), summary
                assert max(int(n.get("Actual Rows", 0)) for n in nodes) <= 10, summary


def test_every_vacuum_of_the_jobs_table_cleans_its_indexes(
    fresh_database: Callable[[str], str],
) -> None:
    """Finished jobs stay in ``job_messages`` (records), so the table is large and a vacuum
    would skip its indexes (PostgreSQL's bypass under 2% of pages with dead rows), leaving
    the entries every claim steps over at the front of its index (the storage parameters of
    ``job_messages`` make every vacuum clean them; the agent inbox's test of the same shape: tests/agents/test_pull_plan.py)."""
    with psycopg.connect(fresh_database("table")) as conn:
        row = conn.execute(
            "SELECT reloptions FROM pg_class WHERE oid = 'drainpipe.job_messages'::regclass"
        ).fetchone()
    assert row is not None
    assert "vacuum_index_cleanup=on" in row[0], row
    assert "autovacuum_vacuum_scale_factor=0" in row[0], row
