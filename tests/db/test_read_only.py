"""A session of drainpipe's own pool that turns out read-only (it reached a standby: the old
primary restarted as one after a switchover, or a DNS name still pointing at the old
writer) is an outage, not a query error: the write fails with ``network`` and code
``READ_ONLY``, and the next call probes for a server that takes writes and runs on a fresh
pool. Before, the write was ``unexpected`` and the read-only session stayed in the pool, so
every later write failed the same way until the pool happened to drop it.

The read-only session is made for real, on the test server: ``SET SESSION
CHARACTERISTICS AS TRANSACTION READ ONLY`` on the pooled session (the server refuses a write
with 25006, as a standby does), or ``default_transaction_read_only`` for every session of a
DSN (a server that stays read-only).
"""

from __future__ import annotations

import time

import pytest
from psycopg.conninfo import make_conninfo

from drainpipe import DrainpipeError
from drainpipe.db import Database
from drainpipe.db.outage import OUTAGE_PROBE_INTERVAL, READ_ONLY
from drainpipe.db.sync import SyncDatabase

READ_ONLY_SESSION = "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"
WRITE = "INSERT INTO read_only_probe (x) VALUES (1) RETURNING x"


async def test_a_pooled_session_on_a_standby_is_an_outage_and_the_pool_is_renewed(
    db_url: str,
) -> None:
    db = Database(db_url, max_size=1)  # one session: the one made read-only
    try:
        await db.fetch("CREATE TABLE read_only_probe (x int)")
        async with db.connection() as conn:
            await conn.execute(READ_ONLY_SESSION)
        with pytest.raises(DrainpipeError) as info:
            await db.fetch(WRITE)
        assert (info.value.kind, info.value.code) == ("network", READ_ONLY), info.value
        assert "read-only" in str(info.value)
        started = time.monotonic()
        assert await db.fetchval(WRITE) == 1  # a probe that takes writes, a fresh pool
        assert time.monotonic() - started < 1.0
        assert await db.fetchval("SELECT current_setting('transaction_read_only')") == "off"
    finally:
        await db.close()


async def test_a_server_that_stays_read_only_is_probed_at_the_probe_pace(db_url: str) -> None:
    read_only = make_conninfo(db_url, options="-c default_transaction_read_only=on")
    db = Database(read_only, timeout=1.0)
    try:
        with pytest.raises(DrainpipeError) as info:
            await db.fetch("CREATE TABLE read_only_probe (x int)")
        assert (info.value.kind, info.value.code) == ("network", READ_ONLY)
        started = time.monotonic()
        with pytest.raises(DrainpipeError) as info:
            await db.fetchval("SELECT 1")  # the probes find no server that takes writes
        waited = time.monotonic() - started
        assert (info.value.kind, info.value.code) == ("network", READ_ONLY), info.value
        assert "unreachable" in str(info.value)
        assert 1.0 <= waited < 1.0 + OUTAGE_PROBE_INTERVAL + 0.5  # the pool's timeout
    finally:
        await db.close()


def test_the_sync_twin_renews_a_pool_whose_session_is_read_only(db_url: str) -> None:
    db = SyncDatabase(db_url, max_size=1)
    try:
        db.fetch("CREATE TABLE read_only_probe (x int)")
        with db.connection() as conn:
            conn.execute(READ_ONLY_SESSION)
        with pytest.raises(DrainpipeError) as info:
            db.fetch(WRITE)
        assert (info.value.kind, info.value.code) == ("network", READ_ONLY), info.value
        assert db.fetch(WRITE) == [(1,)]
    finally:
        db.close()


def test_the_sync_probe_refuses_a_server_that_stays_read_only(db_url: str) -> None:
    db = SyncDatabase(
        make_conninfo(db_url, options="-c default_transaction_read_only=on"), timeout=1.0
    )
    try:
        with pytest.raises(DrainpipeError) as info:
            db.fetch("CREATE TABLE read_only_probe (x int)")
        assert info.value.code == READ_ONLY
        with pytest.raises(DrainpipeError) as info:
            db.fetch("SELECT 1")
        assert (info.value.kind, info.value.code) == ("network", READ_ONLY), info.value
    finally:
        db.close()
